package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// RecoverIPID finds the IPv4 identification under which pkt, a whole packet
// from the BTH through the ICRC sent from e.Src to e.Dst, has a right ICRC.
// It returns e.IPID and true if the ICRC verifies as it is, the one other
// identification that makes it verify and true if there is one, and false
// otherwise: pkt is shorter than a BTH and an ICRC or too long for a UDP
// datagram, or no identification makes the ICRC right. An IPv6 envelope
// has no identification: RecoverIPID then reports whether the ICRC
// verifies, with id 0. It does not allocate.
//
// # Why
//
// rxe sends each datagram with its own non-zero IPv4 identification, and
// the ICRC covers it (see Envelope), but a UDP socket does not show the
// receiver the IP header. Without RecoverIPID a receiver could check an
// rxe packet's ICRC only through a raw socket.
//
// # How
//
// CRC-32 is linear over GF(2): for two messages of the same length, the
// CRCs differ by the CRC (without pre- and post-conditioning) of the bits
// in which the messages differ. Changing the identification by δ (16 bits,
// at a fixed offset in the IPv4 header) changes the ICRC by T(δ)·x^(8d) mod
// P, where T(δ) is the CRC of the two bytes of δ, d the number of bytes
// after them, and P the CRC-32 polynomial. RecoverIPID computes the ICRC
// with e.IPID, multiplies its difference from the packet's ICRC by
// x^(-8d) mod P (O(log d) products with precomputed powers, as zlib's
// crc32_combine shifts a CRC over a run of zero bytes), and solves T(δ) =
// that product with a Gaussian elimination of the 32×16 system T, done
// once at start-up. T has rank 16, so at most one δ solves it; the
// remaining 16 equations are the check.
//
// # What it costs
//
// The ICRC keeps 32 bits of check, and recovery spends 16 of them on
// finding the identification: of the 2^32 ways a packet's ICRC can be off,
// 2^16 now pass as "another identification". A packet corrupted at random
// is accepted with probability 2^-16 (1 in 65,536) instead of 2^-32
// (TestRecoverIPIDFalseAccept measures it). Short errors are not spread
// evenly. Every single-bit error up to 26,766 bytes after the
// identification is still caught, which covers any RoCE packet; but
// CRC-32's guarantee for double-bit errors and bursts is gone (14 of the
// 288,420 double-bit errors of a 96-byte packet pass; TestRecoverIPIDBits),
// and 15 of the 255 ways to corrupt byte 93 of the UDP payload pass, as do
// 21 of the 1,049,325 single-byte errors of a 4 KiB READ response
// (TestRecoverIPIDSingleByte).
//
// Packets that verify as they are (softnic's peers send identification 0)
// keep the full 32-bit check: count the packets accepted only through
// RecoverIPID. A receiver that remembers a sender's last identification
// can narrow the odds further, since Linux numbers the datagrams to one
// destination in increasing order. Ethernet's FCS still protects every hop, and
// a raw socket, which shows the real header, avoids the trade altogether.
func (e *Envelope) RecoverIPID(pkt []byte) (id uint16, ok bool) {
	if len(pkt) < BTHSize+ICRCSize || len(pkt) > maxUDPPayload {
		return 0, false
	}
	n := len(pkt) - ICRCSize
	syndrome := e.ICRC(pkt[:n]) ^ binary.LittleEndian.Uint32(pkt[n:])
	if !e.is4() {
		return 0, syndrome == 0
	}
	if syndrome == 0 {
		return e.IPID, true
	}
	// The ICRC covers 8 bytes of ones, the IPv4 header, whose
	// identification ends at byte 6, the UDP header and pkt[:n].
	after := ipv4HeaderSize - ipv4IDEnd + udpHeaderSize + n
	delta, ok := ipidSolver.solve(shiftBack(syndrome, after))
	if !ok {
		return 0, false
	}
	return e.IPID ^ delta, true
}

// ipv4IDEnd is the offset of the end of the identification in an IPv4
// header.
const ipv4IDEnd = 6

// Polynomials over GF(2) modulo P, the CRC-32 polynomial, are held as the
// CRC holds them: bit-reflected, bit 31 the coefficient of x^0 and bit 0
// that of x^31.
const (
	gf2One    = 1 << 31 // the polynomial 1
	gf2X      = 1 << 30 // x
	ieeePoly  = crc32.IEEE
	invPowLen = 16 // x^(-8·2^k) for k < 16: more than a UDP datagram
)

// gf2Mul returns a·b mod P.
func gf2Mul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(gf2One); m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		b = b>>1 ^ -(b&1)&ieeePoly // b·x: x^31 wraps round as P - x^32
	}
	return p
}

// gf2XInv is x^-1 mod P: P - 1 = x·Q for Q = (P - 1)/x, so Q·x = 1 mod P.
// In the reflected form, Q is P's coefficients moved one place towards x^0,
// with x^32's coefficient as the new x^31.
const gf2XInv = ieeePoly<<1&0xffffffff | 1

// invPow8 holds x^(-8·2^k) mod P: multiplying a CRC difference by
// invPow8[k] undoes 2^k zero bytes.
var invPow8 = func() (t [invPowLen]uint32) {
	p := uint32(gf2XInv)
	for range 3 { // x^-8
		p = gf2Mul(p, p)
	}
	for k := range t {
		t[k] = p
		p = gf2Mul(p, p)
	}
	return t
}()

// invPow8Nibbles[k][i][v] is invPow8[k]·(v in bits 4i to 4i+3).
// Multiplying by a constant is linear, so c·invPow8[k] is the XOR of eight
// lookups, one per nibble of c: 8 KiB of tables, each 64-byte row one cache
// line, instead of 32 shift-and-add steps.
var invPow8Nibbles = func() *[invPowLen][8][16]uint32 {
	t := new([invPowLen][8][16]uint32)
	for k := range t {
		for i := range t[k] {
			for v := range t[k][i] {
				t[k][i][v] = gf2Mul(uint32(v)<<(4*i), invPow8[k])
			}
		}
	}
	return t
}()

// shiftBack returns c·x^(-8n) mod P: the difference at a message's end, c,
// moved back to where it was n bytes earlier. n < 2^invPowLen.
func shiftBack(c uint32, n int) uint32 {
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			t := &invPow8Nibbles[k]
			c = t[0][c&0xf] ^ t[1][c>>4&0xf] ^ t[2][c>>8&0xf] ^ t[3][c>>12&0xf] ^
				t[4][c>>16&0xf] ^ t[5][c>>20&0xf] ^ t[6][c>>24&0xf] ^ t[7][c>>28]
		}
	}
	return c
}

// ipidSolver inverts T, the map from a 16-bit identification difference to
// the CRC difference it makes right after the identification's two bytes.
var ipidSolver = newIPIDSolver()

// solver16 solves T(δ) = r for δ by a Gaussian elimination done in advance:
// row j has its pivot at bit pivot[j], which no other row has, and is
// T(combo[j]).
type solver16 struct {
	pivot [16]uint32 // a single bit each
	row   [16]uint32
	combo [16]uint16
}

func newIPIDSolver() *solver16 {
	var s solver16
	for i := range 16 {
		d := uint16(1) << i
		row, combo := crcOfID(d), d
		for j := range i { // eliminate the earlier pivots from the new row
			if row&s.pivot[j] != 0 {
				row ^= s.row[j]
				combo ^= s.combo[j]
			}
		}
		pivot := row & -row // lowest set bit; T has rank 16, so row != 0
		for j := range i {  // and the new pivot from the earlier rows
			if s.row[j]&pivot != 0 {
				s.row[j] ^= row
				s.combo[j] ^= combo
			}
		}
		s.pivot[i], s.row[i], s.combo[i] = pivot, row, combo
	}
	return &s
}

// crcOfID returns T(d): the CRC register, from 0, after the two bytes of d.
func crcOfID(d uint16) uint32 {
	var r uint32
	for _, b := range [2]byte{byte(d >> 8), byte(d)} {
		r = crc32.IEEETable[byte(r)^b] ^ r>>8
	}
	return r
}

// solve returns the δ with T(δ) = r, and false if there is none.
func (s *solver16) solve(r uint32) (uint16, bool) {
	var d uint16
	for j := range s.row {
		if r&s.pivot[j] != 0 {
			r ^= s.row[j]
			d ^= s.combo[j]
		}
	}
	return d, r == 0
}
