package mad

import (
	"strconv"

	"github.com/softnic/softnic/wire"
)

// The MAD text is formatted as package wire formats the transport
// headers: hexadecimal with a 0x prefix and zero padding (wire.AppendHex),
// decimal, and 1 or 0 for a flag.

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
