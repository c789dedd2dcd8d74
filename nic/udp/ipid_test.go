package udp

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// ipv4Copy builds what the raw socket of Options.IPIDs reads of a datagram:
// an IPv4 header (with options of optWords 4-byte words), the UDP header
// and the start of the payload.
func ipv4Copy(src netip.AddrPort, id uint16, optWords int, payload []byte) []byte {
	ihl := 20 + 4*optWords
	b := make([]byte, ihl+8+min(len(payload), ipidHead))
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[4:], id)
	b[9] = 17
	copy(b[12:], src.Addr().AsSlice())
	binary.BigEndian.PutUint16(b[ihl:], src.Port())
	binary.BigEndian.PutUint16(b[ihl+4:], uint16(8+len(payload)))
	copy(b[ihl+8:], payload)
	return b
}

func TestIPIDTable(t *testing.T) {
	t.Run("found by sender, length and first bytes", func(t *testing.T) {
		tb := newIPIDs(rawIPSocket{})
		a := netip.MustParseAddrPort("10.0.0.1:49152")
		b := netip.MustParseAddrPort("10.0.0.2:49152")
		p1 := []byte("0123456789abcdef-and-the-rest")
		p2 := []byte("0123456789abcdeF-and-the-rest")
		tb.record(ipv4Copy(a, 7, 0, p1))
		tb.record(ipv4Copy(a, 8, 1, p2)) // with an IP option
		tb.record(ipv4Copy(b, 9, 0, p1))
		any := func(uint16) bool { return true }
		for _, tc := range []struct {
			src     netip.AddrPort
			p       []byte
			want    uint16
			wantHas bool
		}{
			{a, p1, 7, true},
			{a, p2, 8, true},
			{b, p1, 9, true},
			{a, p1, 0, false},             // taken
			{a, p1[:len(p1)-1], 0, false}, // another length
			{netip.MustParseAddrPort("10.0.0.1:49153"), p2, 0, false},
		} {
			id, known, ok := tb.take(tc.src, tc.p, any)
			if id != tc.want || ok != tc.wantHas || known != tc.wantHas {
				t.Errorf("take(%v, %q) = %d, %v, %v; want %d, %v", tc.src, tc.p, id, known, ok, tc.want, tc.wantHas)
			}
		}
	})
	t.Run("equal datagrams: the one the check accepts", func(t *testing.T) {
		tb := newIPIDs(rawIPSocket{})
		src := netip.MustParseAddrPort("10.0.0.1:4791")
		p := []byte("a retransmitted packet")
		for id := uint16(1); id <= ipidsPerKey+2; id++ {
			tb.record(ipv4Copy(src, id, 0, p))
		}
		if id, known, ok := tb.take(src, p, func(id uint16) bool { return id == 3 }); id != 3 || !known || !ok {
			t.Errorf("take = %d, %v, %v; want 3", id, known, ok)
		}
		if id, known, ok := tb.take(src, p, func(id uint16) bool { return id == ipidsPerKey+1 }); ok || !known {
			t.Errorf("an identification beyond the %d kept per datagram: %d, %v, %v", ipidsPerKey, id, known, ok)
		}
		if _, known, ok := tb.take(src, p, func(uint16) bool { return false }); ok || !known {
			t.Error("a check that accepts none: the identifications are forgotten or accepted")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		tb := newIPIDs(rawIPSocket{})
		srcOf := func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 4791)
		}
		for i := range 3 * ipidKeys {
			tb.record(ipv4Copy(srcOf(i), uint16(i|1), 0, []byte("x")))
		}
		if len(tb.ids) > ipidKeys {
			t.Errorf("%d datagrams recorded, want at most %d", len(tb.ids), ipidKeys)
		}
		if _, _, ok := tb.take(srcOf(3*ipidKeys-1), []byte("x"), func(uint16) bool { return true }); !ok {
			t.Error("the newest datagram is not recorded")
		}
	})
	t.Run("garbage", func(t *testing.T) {
		tb := newIPIDs(rawIPSocket{})
		good := ipv4Copy(netip.MustParseAddrPort("10.0.0.1:1"), 1, 0, []byte("p"))
		for n := range len(good) {
			tb.record(good[:n]) // cut anywhere
		}
		bad := append([]byte(nil), good...)
		bad[0] = 0x41 // header length 4 bytes
		tb.record(bad)
		if len(tb.ids) != 0 {
			t.Errorf("%d records from truncated or malformed copies", len(tb.ids))
		}
	})
}

// FuzzIPIDRecord: no copy the raw socket reads makes record panic, and the
// table stays bounded.
func FuzzIPIDRecord(f *testing.F) {
	f.Add(ipv4Copy(netip.MustParseAddrPort("10.0.0.1:4791"), 7, 0, []byte("0123456789abcdef")))
	f.Add(ipv4Copy(netip.MustParseAddrPort("10.0.0.1:4791"), 7, 10, nil))
	tb := newIPIDs(rawIPSocket{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tb.record(b)
		if len(tb.ids) > ipidKeys {
			t.Fatalf("%d records", len(tb.ids))
		}
	})
}
