package wire

import "strconv"

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons are wrap-safe: of two PSNs less than 2^23 apart, the one that
// is reached first counting forward is Before the other (IBTA 9.7.1).
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 1<<24 - 1

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Sub returns the signed distance p-q in [-2^23, 2^23).
func (p PSN) Sub(q PSN) int32 {
	d := uint32(p-q) & PSNMask
	return int32(d<<8) >> 8 // sign-extend bit 23
}

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return p.Sub(q) < 0 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return p.Sub(q) > 0 }

// InWindow reports whether p lies in the window of n PSNs starting at first:
// first <= p < first+n, modulo 2^24.
func (p PSN) InWindow(first PSN, n uint32) bool {
	return uint32(p-first)&PSNMask < n
}

// String formats p as six hex digits, "0x00abcd".
func (p PSN) String() string { return string(AppendHex(nil, uint64(p&PSNMask), 6)) }

// AppendHex appends "0x" and v in lower-case hex, zero-padded to digits:
// the form of the text of every header field, here and in package mad.
func AppendHex(dst []byte, v uint64, digits int) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '0', 'x')
	n := 1
	for w := v >> 4; w != 0; w >>= 4 {
		n++
	}
	for ; digits > n; digits-- {
		dst = append(dst, '0')
	}
	for i := n - 1; i >= 0; i-- {
		dst = append(dst, hex[(v>>(4*uint(i)))&0xf])
	}
	return dst
}

// appendUint appends v in decimal.
func appendUint(dst []byte, v uint64) []byte { return strconv.AppendUint(dst, v, 10) }
