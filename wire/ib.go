package wire

import "net/netip"

// What the transport shares with InfiniBand management: QP1, GIDs and MTU
// codes. Management datagrams (MADs) travel as the payload of UD SEND
// packets to and from QP1, the General Services Interface (GSI); package
// wire/mad codes them.
const (
	// GSIQPN is the QP number of the General Services Interface.
	GSIQPN = 1
	// GSIQKey is the well-known Q_Key of QP1.
	GSIQKey = 0x80010000
)

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 a port's GID is
// one of its IP addresses: an IPv6 address, or an IPv4 address in the
// IPv4-mapped form ::ffff:a.b.c.d (rxe's GID index 1 in the golden
// captures).
type GID [16]byte

// GIDFromAddr returns the GID of an IP address, mapping IPv4 into IPv6.
func GIDFromAddr(a netip.Addr) GID { return a.As16() }

// Addr returns the GID as an IP address, IPv4 if it is IPv4-mapped.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats the GID as its IP address, "10.77.0.12" or "fe80::1".
func (g GID) String() string { return g.Addr().String() }

// MTU is an InfiniBand MTU code, the 4-bit encoding of path MTUs in a REQ
// and in the subnet administrator's PathRecord (Linux's enum ib_mtu).
type MTU uint8

// The MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// mtuShift turns a code into bytes: 128 << code.
const mtuShift = 7

// MTUFromBytes returns the code of an MTU of n bytes, and false if n is not
// 256, 512, 1024, 2048 or 4096.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 1 << (mtuShift + int(m))
}

// String returns the MTU in bytes, "1024", or "MTU(n)" for an invalid code.
func (m MTU) String() string { return string(m.appendName(nil)) }

func (m MTU) appendName(dst []byte) []byte {
	if n := m.Bytes(); n != 0 {
		return appendUint(dst, uint64(n))
	}
	dst = append(dst, "MTU("...)
	return append(appendUint(dst, uint64(m)), ')')
}
