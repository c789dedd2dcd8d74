package mad

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/softnic/softnic/wire"
)

func TestServiceID(t *testing.T) {
	tests := []struct {
		name string
		ps   PortSpace
		port uint16
		want ServiceID
	}{
		{"rping's REQ in rping.pcap: TCP port 7174", PortSpaceTCP, 7174, 0x0000000001061c06},
		{"UDP port 1", PortSpaceUDP, 1, 0x0000000001110001},
		{"IPoIB port 0", PortSpaceIPoIB, 0, 0x0000000000020000},
		{"IB port 65535", PortSpaceIB, 0xffff, 0x00000000013fffff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RDMACMServiceID(tt.ps, tt.port)
			if got != tt.want {
				t.Fatalf("RDMACMServiceID = %v, want %v", got, tt.want)
			}
			ps, port, ok := got.RDMACM()
			if !ok || ps != tt.ps || port != tt.port {
				t.Errorf("RDMACM() = %v, %d, %v", ps, port, ok)
			}
		})
	}
	for _, s := range []ServiceID{
		0x0100000001061c06, // an IBTA service ID with the top bits set
		0x0000000100061c06, // bit 32
		0x0000000000050001, // unknown port space 5
		0,
	} {
		if ps, port, ok := s.RDMACM(); ok || ps != 0 || port != 0 {
			t.Errorf("%v.RDMACM() = %v, %d, %v; want not rdma_cm's", s, ps, port, ok)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	tests := []struct {
		name    string
		src     netip.AddrPort
		dst     netip.Addr
		hex     string
		version uint8
		wantSrc netip.AddrPort // what decoding gives, if not src
	}{
		{
			name: "IPv4, the REQ of rping.pcap",
			src:  netip.MustParseAddrPort("10.77.0.12:40910"), dst: netip.MustParseAddr("10.77.0.11"),
			hex:     rpingREQPrivate,
			version: 4,
		},
		{
			name: "IPv6",
			src:  netip.MustParseAddrPort("[fd00::1]:5000"), dst: netip.MustParseAddr("fd00::2"),
			hex:     "00601388" + "fd000000000000000000000000000001" + "fd000000000000000000000000000002",
			version: 6,
		},
		{
			name: "IPv4-mapped IPv6 stays IPv6, as from an AF_INET6 socket",
			src:  netip.MustParseAddrPort("[::ffff:10.0.0.1]:1"), dst: netip.MustParseAddr("::ffff:10.0.0.2"),
			hex:     "00600001" + "00000000000000000000ffff0a000001" + "00000000000000000000ffff0a000002",
			version: 6,
		},
		{
			name: "IPv4 to IPv6 is IPv6",
			src:  netip.MustParseAddrPort("10.0.0.1:7174"), dst: netip.MustParseAddr("fd00::2"),
			hex:     "00601c06" + "00000000000000000000ffff0a000001" + "fd000000000000000000000000000002",
			version: 6,
			wantSrc: netip.MustParseAddrPort("[::ffff:10.0.0.1]:7174"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			f := NewCMAHeader(tt.src, tt.dst)
			got := make(CMAHeader, CMAHeaderSize)
			got.Encode(&f)
			if !bytes.Equal(got, want) {
				t.Errorf("encoded\n%x\nwant\n%x", []byte(got), want)
			}
			h, err := DecodeCMAHeader(append(want, 0xaa, 0xbb)) // consumer data follows
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != CMAHeaderSize || h.IPVersion() != tt.version || h.Version() != 0 {
				t.Errorf("view of %d bytes, IP version %d, version %d", len(h), h.IPVersion(), h.Version())
			}
			if !tt.wantSrc.IsValid() {
				tt.wantSrc = tt.src
			}
			if h.Src() != tt.wantSrc || h.Dst() != tt.dst || h.SrcPort() != tt.src.Port() {
				t.Errorf("decoded %v -> %v, want %v -> %v", h.Src(), h.Dst(), tt.wantSrc, tt.dst)
			}
			if f.Src = tt.wantSrc.Addr(); h.Fields() != f {
				t.Errorf("Fields() = %+v, want %+v", h.Fields(), f)
			}
		})
	}
}

func TestCMAHeaderErrors(t *testing.T) {
	valid := unhex(t, rpingREQPrivate)
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"one byte short", valid[:CMAHeaderSize-1], wire.ErrTruncated},
		{"empty", nil, wire.ErrTruncated},
		{"version 1", append([]byte{0x01}, valid[1:]...), ErrBadCMAHeader},
		{"major version 1 (Annex A11 nibbles)", append([]byte{0x10}, valid[1:]...), ErrBadCMAHeader},
		{"IP version 5", append([]byte{0, 0x50}, valid[2:]...), ErrBadCMAHeader},
		{"IP version 0", append([]byte{0, 0x04}, valid[2:]...), ErrBadCMAHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := DecodeCMAHeader(tt.b)
			if !errors.Is(err, tt.want) || h != nil {
				t.Errorf("DecodeCMAHeader = %x, %v; want %v", []byte(h), err, tt.want)
			}
		})
	}
}

// TestCMAHeaderReserved: the low nibble of the IP version byte round-trips,
// and an invalid address encodes as :: without panicking.
func TestCMAHeaderReserved(t *testing.T) {
	f := CMAHeaderFields{Resv4: 0x0a, SrcPort: 9, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	h := make(CMAHeader, CMAHeaderSize)
	h.Encode(&f)
	if h[1] != 0x4a || h.Fields() != f {
		t.Errorf("byte 1 %#x, fields %+v, want %+v", h[1], h.Fields(), f)
	}
	h.Encode(&CMAHeaderFields{})
	if want := append([]byte{0, 0x60}, make([]byte, CMAHeaderSize-2)...); !bytes.Equal(h, want) {
		t.Errorf("zero fields encode as %x", []byte(h))
	}
}
