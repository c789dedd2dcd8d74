package mad

import (
	"strconv"

	"github.com/softnic/softnic/wire"
)

// The formatting helpers of the MAD text, as package wire formats the
// transport headers: hexadecimal with a 0x prefix and zero padding,
// decimal, and 1 or 0 for a flag.

// appendHex appends "0x" and v in lower-case hex, zero-padded to digits.
func appendHex(dst []byte, v uint64, digits int) []byte {
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

// appendBool appends 1 or 0.
func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, '1')
	}
	return append(dst, '0')
}

// appendMTU appends an MTU as wire.MTU.String does: its bytes, or "MTU(n)"
// for an invalid code.
func appendMTU(dst []byte, m wire.MTU) []byte {
	if n := m.Bytes(); n != 0 {
		return appendUint(dst, uint64(n))
	}
	dst = append(dst, "MTU("...)
	return append(appendUint(dst, uint64(m)), ')')
}
