//go:build linux && !softnic_portable

package main

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/wire"
)

// TestServeTakesRxePackets: softnic serve takes packets that carry a
// non-zero IPv4 identification, as Linux rxe's do, and (with the
// privilege for a raw socket) checks their ICRC with the identification
// they carry: a packet sealed with another is dropped. The packets are
// for a QP the daemon does not have, which it counts once the ICRC passed.
func TestServeTakesRxePackets(t *testing.T) {
	for _, strict := range []bool{false, true} {
		args := []string{"--region", "mem:4k"}
		if strict {
			args = append(args, "--strict-icrc")
		}
		d := startDaemon(t, args...)
		var info control.Info
		d.inspect(t, "info", &info)
		f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xFFFF, DestQP: 0x999, PSN: 5},
			AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(31)}}
		send := func(sealed, sent uint16) {
			t.Helper()
			pkt := make([]byte, f.Len(0))
			if _, err := f.Encode(pkt, nil); err != nil {
				t.Fatal(err)
			}
			src, dst := netip.MustParseAddrPort("127.0.0.1:40998"), netip.MustParseAddrPort(d.ready.Listen)
			env := wire.Envelope{Src: src, Dst: dst, IPID: sealed}
			env.Seal(pkt)
			if err := udptest.SendIPv4(src, dst, sent, pkt); err != nil {
				t.Skipf("no raw socket to send rxe's packets with: %v", err)
			}
		}
		send(0x1234, 0x1234)
		if !waitFor(5*time.Second, func() bool { return d.counter(t, "unknown_qp") == 1 }) {
			t.Fatalf("strict %v: an rxe packet was not taken: unknown_qp %d, bad_icrc %d", strict, d.counter(t, "unknown_qp"), d.counter(t, "bad_icrc"))
		}
		if n := d.counter(t, "icrc_ipid_verified"); n != 1 || info.ICRC == "" {
			t.Errorf("strict %v: icrc_ipid_verified %d (info says %q), want 1", strict, n, info.ICRC)
		}
		send(0x1234, 0x1235)
		if !waitFor(5*time.Second, func() bool { return d.counter(t, "bad_icrc") == 1 }) || d.counter(t, "unknown_qp") != 1 {
			t.Errorf("strict %v: a packet sealed with another identification than it carries: bad_icrc %d, unknown_qp %d; want 1 and 1",
				strict, d.counter(t, "bad_icrc"), d.counter(t, "unknown_qp"))
		}
	}
}

// TestServeStrictICRCWithoutRawSocket: a daemon without CAP_NET_RAW does
// not see the identifications IPv4 packets carry. By default it takes
// Linux rxe's packets anyway, recovering the identification from the ICRC
// (icrc_ipid_recovered); with --strict-icrc it drops them as bad ICRCs and
// takes softnic's (identification 0) alone. The daemon runs in a child
// process whose capabilities lack CAP_NET_RAW (setpriv); the packets are
// sent with a real IPv4 header through a raw socket of the test's.
func TestServeStrictICRCWithoutRawSocket(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) to start a daemon without CAP_NET_RAW")
	}
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict=", strict), func(t *testing.T) {
			args := []string{"--region", "mem:4k"}
			if strict {
				args = append(args, "--strict-icrc")
			}
			cd := startChildDaemon(t, []string{childNoRawEnv + "=1"}, args...)
			d := &testDaemon{control: cd.control, ready: cd.ready}
			var info control.Info
			d.inspect(t, "info", &info)
			if !strings.Contains(info.ICRC, "CAP_NET_RAW") {
				t.Fatalf("the daemon has a raw socket after all: info says %q", info.ICRC)
			}
			f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xFFFF, DestQP: 0x999, PSN: 5},
				AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(31)}}
			send := func(id uint16) {
				t.Helper()
				pkt := make([]byte, f.Len(0))
				if _, err := f.Encode(pkt, nil); err != nil {
					t.Fatal(err)
				}
				src, dst := netip.MustParseAddrPort("127.0.0.1:40997"), netip.MustParseAddrPort(d.ready.Listen)
				env := wire.Envelope{Src: src, Dst: dst, IPID: id}
				env.Seal(pkt)
				if err := udptest.SendIPv4(src, dst, id, pkt); err != nil {
					t.Skipf("no raw socket to send rxe's packets with: %v", err)
				}
			}
			// softnic's packet, identification 0, is taken either way:
			// it reaches the check for its QP (unknown_qp).
			send(0)
			if !waitFor(5*time.Second, func() bool { return d.counter(t, "unknown_qp") == 1 }) {
				t.Fatalf("a packet of identification 0 was not taken: unknown_qp %d, bad_icrc %d", d.counter(t, "unknown_qp"), d.counter(t, "bad_icrc"))
			}
			send(0x1234) // rxe's
			want, wantQP, wantRecovered := "icrc_ipid_recovered", uint64(2), uint64(1)
			if strict {
				want, wantQP, wantRecovered = "bad_icrc", 1, 0
			}
			if !waitFor(5*time.Second, func() bool { return d.counter(t, want) == 1 }) {
				t.Fatalf("rxe's packet: %s not counted", want)
			}
			if n, r := d.counter(t, "unknown_qp"), d.counter(t, "icrc_ipid_recovered"); n != wantQP || r != wantRecovered {
				t.Errorf("rxe's packet: unknown_qp %d, icrc_ipid_recovered %d; want %d and %d", n, r, wantQP, wantRecovered)
			}
			if n := d.counter(t, "icrc_ipid_verified"); n != 0 {
				t.Errorf("icrc_ipid_verified %d without a raw socket", n)
			}
		})
	}
}
