package mad

import (
	"encoding/binary"
	"net/netip"

	"github.com/softnic/softnic/wire"
)

// rdma_cm, the connection manager of Linux's RDMA stack, connects QPs by IP
// address and port. On top of the IBTA CM it adds two conventions, which
// softnic follows so that it and a Linux peer understand each other's
// requests (Linux drivers/infiniband/core/cma.c; IBTA Annex A11, "RDMA IP
// CM Service", describes the same header):
//   - the service ID of a REQ is the port space and the destination port;
//   - the REQ's private data starts with a CMAHeader carrying the IP
//     addresses and the source port.

// ServiceID identifies the service a REQ asks to connect to; a listener
// matches it. rdma_cm builds it from a port space and a port (see
// RDMACMServiceID).
type ServiceID uint64

// PortSpace is an rdma_cm port space (Linux enum rdma_ucm_port_space): the
// protocol whose port numbers a service ID carries.
type PortSpace uint16

// The rdma_cm port spaces. RDMA_PS_TCP is the one of connected QPs, and so
// of rping, perftest -R and most applications.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013F
)

// String returns "TCP", "UDP", "IPoIB", "IB" or "PortSpace(0x....)".
func (ps PortSpace) String() string { return string(ps.appendName(nil)) }

func (ps PortSpace) appendName(dst []byte) []byte {
	switch ps {
	case PortSpaceIPoIB:
		return append(dst, "IPoIB"...)
	case PortSpaceTCP:
		return append(dst, "TCP"...)
	case PortSpaceUDP:
		return append(dst, "UDP"...)
	case PortSpaceIB:
		return append(dst, "IB"...)
	}
	dst = append(dst, "PortSpace("...)
	return append(wire.AppendHex(dst, uint64(ps), 4), ')')
}

const (
	servicePortSpaceShift = 16
	serviceRDMACMMask     = 0xFFFFFFFF00000000 // zero in an rdma_cm service ID
)

// RDMACMServiceID returns the service ID rdma_cm uses for port in port
// space ps: 0x00000000_PPPP_pppp, e.g. 0x0000000001061c06 for TCP port 7174
// (rping's default).
func RDMACMServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(ps)<<servicePortSpaceShift | ServiceID(port)
}

// RDMACM returns the port space and port of an rdma_cm service ID, and
// false if s is not one: its top 32 bits are not zero or the port space is
// not one of the four rdma_cm defines.
func (s ServiceID) RDMACM() (ps PortSpace, port uint16, ok bool) {
	ps = PortSpace(s >> servicePortSpaceShift)
	switch {
	case s&serviceRDMACMMask != 0:
		return 0, 0, false
	case ps != PortSpaceIPoIB && ps != PortSpaceTCP && ps != PortSpaceUDP && ps != PortSpaceIB:
		return 0, 0, false
	}
	return ps, uint16(s), true
}

// String formats s as 16 hex digits, "0x0000000001061c06".
func (s ServiceID) String() string { return string(wire.AppendHex(nil, uint64(s), 16)) }

// CMAHeaderSize is the length of the rdma_cm header at the start of a REQ's
// private data.
const CMAHeaderSize = 36

// CMAPrivateDataSize is how much private data an rdma_cm application may
// pass to rdma_connect: the REQ's private data after the CMAHeader.
const CMAPrivateDataSize = REQPrivateDataSize - CMAHeaderSize

// CMAHeader is a view of the header rdma_cm puts at the start of a REQ's
// private data (Linux struct cma_hdr; IBTA Annex A11):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Version    | IPV   | Resv  |          Source Port          |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Source IP address (16 bytes)                   |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Destination IP address (16 bytes)                |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Version is 0 (Annex A11 splits it into major and minor nibbles), IPV the
// IP version, 4 or 6. An IPv4 address fills the last 4 bytes of its field
// and the first 12 are zero, as Linux writes it (not the IPv4-mapped form of
// a GID). The destination port is not here: it is in the service ID.
type CMAHeader []byte

const (
	cmaVersion      = 0
	cmaIPVersion    = 1
	cmaSrcPort      = 2
	cmaSrcAddr      = 4
	cmaDstAddr      = 20
	cmaIPv4Offset   = 12 // of the IPv4 address in a 16-byte address field
	cmaIPVersionShf = 4
)

// CMAHeaderFields holds the fields of a CMAHeader. The IP version is not a
// field: it is 4 when both addresses are IPv4 (not IPv4-mapped IPv6), and 6
// otherwise.
type CMAHeaderFields struct {
	Version uint8 // 0
	Resv4   uint8 // the low nibble of the IP version byte
	SrcPort uint16
	Src     netip.Addr
	Dst     netip.Addr
}

// NewCMAHeader returns the header rdma_cm sends for a connection from src
// to dst (whose port travels in the service ID).
func NewCMAHeader(src netip.AddrPort, dst netip.Addr) CMAHeaderFields {
	return CMAHeaderFields{SrcPort: src.Port(), Src: src.Addr(), Dst: dst}
}

// DecodeCMAHeader returns the CMAHeader at the start of b, a REQ's private
// data. It returns ErrTruncated if b is shorter than CMAHeaderSize, and
// ErrBadCMAHeader if the version is not 0 or the IP version neither 4 nor 6
// (Linux rejects such a REQ).
func DecodeCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderSize {
		return nil, wire.ErrTruncated
	}
	h := CMAHeader(b[:CMAHeaderSize:CMAHeaderSize])
	if v := h.IPVersion(); h.Version() != 0 || v != 4 && v != 6 {
		return nil, ErrBadCMAHeader
	}
	return h, nil
}

// Version returns the header version.
func (h CMAHeader) Version() uint8 { return h[cmaVersion] }

// IPVersion returns the IP version of the addresses, 4 or 6.
func (h CMAHeader) IPVersion() uint8 { return h[cmaIPVersion] >> cmaIPVersionShf }

// SrcPort returns the requester's port.
func (h CMAHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(h[cmaSrcPort:]) }

// Src returns the requester's address and port.
func (h CMAHeader) Src() netip.AddrPort {
	return netip.AddrPortFrom(h.addr(cmaSrcAddr), h.SrcPort())
}

// Dst returns the address the requester connects to.
func (h CMAHeader) Dst() netip.Addr { return h.addr(cmaDstAddr) }

// addr returns the address field at off in the header's IP version.
func (h CMAHeader) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+cmaIPv4Offset : off+cmaIPv4Offset+4]))
	}
	return netip.AddrFrom16([16]byte(h[off : off+16]))
}

// Fields returns the fields of the header.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{
		Version: h.Version(),
		Resv4:   bitfield(h[cmaIPVersion], 0, 4),
		SrcPort: h.SrcPort(),
		Src:     h.addr(cmaSrcAddr),
		Dst:     h.addr(cmaDstAddr),
	}
}

// Encode writes f into the header. An invalid (zero) address is written as
// the IPv6 address ::.
func (h CMAHeader) Encode(f *CMAHeaderFields) {
	h[cmaVersion] = f.Version
	v := uint8(6)
	if f.Src.Is4() && f.Dst.Is4() {
		v = 4
	}
	h[cmaIPVersion] = v<<cmaIPVersionShf | f.Resv4&0x0f
	binary.BigEndian.PutUint16(h[cmaSrcPort:], f.SrcPort)
	putCMAAddr(h[cmaSrcAddr:cmaDstAddr], f.Src, v == 4)
	putCMAAddr(h[cmaDstAddr:CMAHeaderSize], f.Dst, v == 4)
}

// putCMAAddr writes a into the 16-byte address field b: in its last four
// bytes after twelve zeros if v4, else as an IPv6 address.
func putCMAAddr(b []byte, a netip.Addr, v4 bool) {
	if v4 {
		clear(b[:cmaIPv4Offset])
		a4 := a.As4()
		copy(b[cmaIPv4Offset:], a4[:])
		return
	}
	a16 := a.As16()
	copy(b, a16[:])
}
