//go:build linux

package nic_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/wire"
)

// TestExactIPID: with udp.Options.IPIDs and the privilege, a packet
// carrying a non-zero identification, as rxe's do, is checked with the
// identification it carries: accepted when its ICRC was sealed with it
// (icrc_ipid_verified), dropped when sealed with another (bad_icrc), which
// recovering the identification from the ICRC alone would have accepted.
func TestExactIPID(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sealed, sent uint16
		want         string
	}{
		{"as sealed", 0x4d2, 0x4d2, "icrc_ipid_verified"},
		{"another identification", 0x4d2, 0x4d3, "bad_icrc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nictest.CheckLeaks(t)
			e := openEnd(t, nic.Config{RecoverIPID: true, UDP: udp.Options{IPIDs: true}})
			if !e.dev.Features().IPIDs {
				t.Skip("the device has no raw socket for the identifications (CAP_NET_RAW needed)")
			}
			f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xFFFF, DestQP: e.qp.Num(), PSN: 5},
				AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(31)}}
			pkt := make([]byte, f.Len(0))
			if _, err := f.Encode(pkt, nil); err != nil {
				t.Fatal(err)
			}
			src := netip.MustParseAddrPort("127.0.0.1:40999")
			env := wire.Envelope{Src: src, Dst: e.dev.Addr(), IPID: tc.sealed}
			env.Seal(pkt)
			if env.IPID = tc.sent; tc.sent != tc.sealed {
				if id, ok := env.RecoverIPID(pkt); !ok || id != tc.sealed {
					t.Fatalf("recovery alone would not accept the packet (%d, %v): the case shows nothing", id, ok)
				}
			}
			if err := udptest.SendIPv4(src, e.dev.Addr(), tc.sent, pkt); err != nil {
				t.Skipf("no raw socket to send with: %v", err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for n, _ := e.dev.Counter(tc.want); n == 0; n, _ = e.dev.Counter(tc.want) {
				if time.Now().After(deadline) {
					t.Fatalf("%s not counted", tc.want)
				}
				time.Sleep(time.Millisecond)
			}
			if n, _ := e.dev.Counter("icrc_ipid_recovered"); n != 0 {
				t.Errorf("icrc_ipid_recovered %d: the identification the packet carried was known", n)
			}
		})
	}
}
