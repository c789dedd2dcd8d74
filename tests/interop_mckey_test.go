package tests

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// mckeyCount is how many datagrams mckey sends, and its receiver waits
// for (its default).
const mckeyCount = 10

// mckeyPairs runs rdmacm-utils' mckey, rdma_cm's UD multicast, through
// libsoftnic on the daemon h against mckey in g2, both ways: the client
// (-s) sends mckeyCount datagrams to a group of 239.0.0.0/8 that the
// server joined first, and the server receives them. Each run captures the group's
// datagrams on g2's bridge port, and mckey_wire then compares the
// datagrams softnic sent with rxe's, header by header.
//
// The lab needs nothing set up for multicast: both ends join the group
// with an IGMP report on the lab's bridge (rdma_cm's join in the guest
// makes its kernel join the group on eth0; the daemon's socket for the
// group joins it on rxbr0, the interface of its address), from which the
// bridge, snooping IGMP as Linux bridges do by default, learns where to
// forward the group; a datagram to the group leaves the daemon's socket,
// bound to 10.77.0.1, through rxbr0 with TTL 64, as rxe's leave eth0.
func (l *rxeLab) mckeyPairs(t *testing.T, h *verbsHost) {
	var sent [2][]golden.Frame // softnic's and rxe's datagrams to the group
	for i, softnicSends := range []bool{true, false} {
		name := "softnic_server/mckey"
		if softnicSends {
			name = "softnic_client/mckey"
		}
		t.Run(name, func(t *testing.T) { sent[i] = l.mckeyPair(t, h, softnicSends) })
	}
	t.Run("mckey_wire", func(t *testing.T) {
		if len(sent[0]) == 0 || len(sent[1]) == 0 {
			t.Skip("needs the datagrams of both mckey runs, one of which failed")
		}
		compareMulticast(t, sent[0][0], sent[1][0])
	})
}

// mckeyPair runs mckey's server and then its client, one through
// libsoftnic and the other in g2, and returns the client's datagrams to
// the group as captured. Both must say 'return status 0', the server
// after 'data transfers complete'; the receiving side must have taken
// every datagram (its rcvd_pkts rose by mckeyCount: rxe's and the
// daemon's count a packet once its headers and ICRC pass), the daemon no
// bad one, and every datagram's ICRC verifies on the wire.
func (l *rxeLab) mckeyPair(t *testing.T, h *verbsHost, softnicSends bool) []golden.Frame {
	from := netip.MustParseAddr(labGuest2)
	if softnicSends {
		from = netip.MustParseAddr(labHost)
	}
	capture := filepath.Join(t.TempDir(), "mckey.pcap")
	var group string
	r := retrying(t, l, func() (*mckeyResult, error) {
		group = newGroup() // a new one each time: the bridge keeps a group's ports for minutes
		return l.mckeyAttempt(h, group, capture, softnicSends)
	})
	delta := func(before, after map[string]uint64, name string) uint64 { return after[name] - before[name] }
	var problems []string
	if softnicSends {
		if n := delta(r.daemonBefore, r.daemonAfter, "sent_pkts"); n != mckeyCount {
			problems = append(problems, fmt.Sprintf("the daemon sent %d packets, want %d", n, mckeyCount))
		}
		if n := delta(r.rxeBefore, r.rxeAfter, "rcvd_pkts"); n != mckeyCount {
			problems = append(problems, fmt.Sprintf("rxe accepted %d packets of softnic's %d", n, mckeyCount))
		}
	} else {
		if n := delta(r.rxeBefore, r.rxeAfter, "sent_pkts"); n != mckeyCount {
			problems = append(problems, fmt.Sprintf("rxe sent %d packets, want %d", n, mckeyCount))
		}
		if n := delta(r.daemonBefore, r.daemonAfter, "rcvd_pkts"); n != mckeyCount {
			problems = append(problems, fmt.Sprintf("the daemon took %d packets of rxe's %d", n, mckeyCount))
		}
		if n := delta(r.daemonBefore, r.daemonAfter, "icrc_ipid_recovered") + delta(r.daemonBefore, r.daemonAfter, "icrc_ipid_verified"); n < mckeyCount {
			problems = append(problems, fmt.Sprintf("the daemon recovered or verified the IP ID of %d of rxe's %d packets", n, mckeyCount))
		}
	}
	for _, name := range []string{"bad_icrc", "malformed", "unknown_qp", "bad_qkey", "mcast_dropped"} {
		if n := delta(r.daemonBefore, r.daemonAfter, name); n != 0 {
			problems = append(problems, fmt.Sprintf("the daemon's %s rose by %d", name, n))
		}
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr(group), 4791)
	var sent []golden.Frame
	for _, fr := range golden.Frames(t, r.capture) {
		if fr.Env.Dst != dst {
			continue
		}
		if fr.Env.Src.Addr() != from || fr.ICRC != wire.ICRCOK {
			problems = append(problems, fmt.Sprintf("frame %d: from %v with ICRC %v; want from %v, ICRC ok", fr.N, fr.Env.Src, fr.ICRC, from))
		}
		sent = append(sent, fr)
	}
	if len(sent) != mckeyCount {
		problems = append(problems, fmt.Sprintf("%d datagrams to %v on the wire, want %d", len(sent), dst, mckeyCount))
	}
	if len(problems) > 0 {
		t.Fatalf("%s\n%s", strings.Join(problems, "\n"), r.report())
	}
	return sent
}

// mckeyResult is what one mckey run left behind.
type mckeyResult struct {
	serverCmd, serverOut, clientCmd, clientOut string
	capture                                    string // the run's pcap
	rxeBefore, rxeAfter                        map[string]uint64
	daemonBefore, daemonAfter                  map[string]uint64
}

func (r *mckeyResult) report() string {
	return fmt.Sprintf("server %s:\n%s\nclient %s:\n%s", r.serverCmd, r.serverOut, r.clientCmd, r.clientOut)
}

// mckeyAttempt runs mckey's server and client once, capturing into the
// file capture, and fails unless both end saying 'return status 0'.
func (l *rxeLab) mckeyAttempt(h *verbsHost, group, capture string, softnicSends bool) (*mckeyResult, error) {
	r := &mckeyResult{capture: capture}
	var err error
	if r.rxeBefore, err = l.rxeCounters("g2"); err != nil {
		return nil, err
	}
	if r.daemonBefore, err = h.counters(); err != nil {
		return nil, err
	}
	if out, err := l.sh(30*time.Second, "cap-start", r.capture, "udp port 4791"); err != nil {
		return nil, fmt.Errorf("lab.sh cap-start: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	guest := fmt.Sprintf("mckey -m %s -b %s", group, labGuest2)
	host := []string{"mckey", "-m", group, "-b", labHost}
	var runErr error
	if softnicSends {
		r.serverCmd, r.clientCmd = guest, strings.Join(host, " ")+" -s"
		runErr = l.mckeyToGuest(ctx, h, group, r)
	} else {
		r.serverCmd, r.clientCmd = strings.Join(host, " "), guest+" -s"
		runErr = l.mckeyFromGuest(ctx, h, host, r)
	}
	if out, err := l.sh(30*time.Second, "cap-stop"); err != nil && runErr == nil {
		runErr = fmt.Errorf("lab.sh cap-stop: %v\n%s", err, out)
	}
	if runErr != nil {
		return nil, fmt.Errorf("%v\n%s", runErr, r.report())
	}
	for _, out := range []string{r.serverOut, r.clientOut} {
		if !strings.Contains(out, "return status 0") {
			return nil, fmt.Errorf("both mckeys must say 'return status 0'\n%s", r.report())
		}
	}
	if !strings.Contains(r.serverOut, "data transfers complete") {
		return nil, fmt.Errorf("mckey's server did not receive its %d datagrams\n%s", mckeyCount, r.report())
	}
	if r.rxeAfter, err = l.rxeCounters("g2"); err != nil {
		return nil, err
	}
	if r.daemonAfter, err = h.counters(); err != nil {
		return nil, err
	}
	return r, nil
}

// mckeyToGuest runs mckey's server in g2 and, once it joined the group,
// the client through libsoftnic. The server has joined (its output, a
// file, says so only when it ends) once the bridge has learnt g2's port
// for the group from the IGMP report of rdma_cm's join, without which the
// bridge would not forward the group there, and rxe has attached the QP
// to the group, after the join: a datagram that comes before is dropped,
// and the server waits for it for ever. rxe's attach adds the group's
// GID, mapped as an IPv6 multicast address is, to eth0's link-layer
// addresses (33:33 and the GID's last four bytes).
func (l *rxeLab) mckeyToGuest(ctx context.Context, h *verbsHost, group string, r *mckeyResult) error {
	out, err := l.sh(30*time.Second, "spawn", "g2", r.serverCmd)
	if err != nil {
		return fmt.Errorf("lab.sh spawn: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	g := netip.MustParseAddr(group).As4()
	attached := fmt.Sprintf("33:33:%02x:%02x:%02x:%02x", g[0], g[1], g[2], g[3])
	joined := waitFor(60*time.Second, func() bool {
		mdb, err := hostCmd(10*time.Second, "ip", "netns", "exec", labNS, "bridge", "mdb", "show", "dev", "rxbr0")
		return err == nil && strings.Contains(mdb, "port rxtap2 grp "+group+" ")
	}) && waitFor(60*time.Second, func() bool {
		maddr, err := l.sh(20*time.Second, "exec", "g2", "ip maddr show dev eth0", "15")
		return err == nil && strings.Contains(maddr, attached)
	})
	if joined {
		cmd := h.program(ctx, strings.Fields(r.clientCmd)...)
		b, cerr := cmd.CombinedOutput()
		r.clientOut = string(b)
		err = cerr
	} else {
		err = fmt.Errorf("g2's mckey did not join %s: no port for it on the bridge (bridge mdb show) or no %s on eth0 (ip maddr)", group, attached)
	}
	r.serverOut, _ = l.sh(time.Minute, "wait", "g2", id, "40")
	if !strings.Contains(r.serverOut, "return status") {
		l.sh(20*time.Second, "kill", "g2", id)
	}
	return err
}

// mckeyFromGuest runs mckey's server through libsoftnic and, once it says
// it joined the group, the client in g2.
func (l *rxeLab) mckeyFromGuest(ctx context.Context, h *verbsHost, server []string, r *mckeyResult) error {
	var buf lockedBuffer
	cmd := h.program(ctx, append([]string{"stdbuf", "-oL"}, server...)...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	if waitFor(30*time.Second, func() bool { return strings.Contains(buf.String(), "mckey: joined dgid") }) {
		r.clientOut, err = l.sh(90*time.Second, "exec", "g2", r.clientCmd, "60")
	} else {
		err = fmt.Errorf("softnic's mckey did not join")
	}
	select {
	case serr := <-done:
		if err == nil {
			err = serr
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		if err == nil {
			err = fmt.Errorf("softnic's mckey did not end")
		}
	}
	r.serverOut = buf.String()
	return err
}

// compareMulticast compares a datagram softnic sent to a group with one
// rxe sent to another, header by header. What the protocol leaves to
// neither sender must be equal: the IPv4 header's TOS, flags (DF), TTL
// and protocol, the UDP destination port, the whole BTH (opcode, the
// multicast QPN, P_Key, AckReq, PSN, pad, reserved bits), the DETH's
// Q_Key and reserved byte, the sizes. What each sender picks for itself is left
// out: the addresses, the IPv4 identification (rxe counts, softnic's
// socket sends 0), the UDP source port (rxe's hash of the QPNs, softnic's
// socket's 4791), the UDP checksum (rxe leaves it 0, the host's kernel
// fills it in for softnic's socket; the ICRC masks it, receivers ignore
// it), the source QP and the payload.
func compareMulticast(t *testing.T, softnic, rxe golden.Frame) {
	ip := func(fr golden.Frame) [5]uint16 {
		h := fr.IPUDP
		return [5]uint16{uint16(h[1]), binary.BigEndian.Uint16(h[6:]), uint16(h[8]), uint16(h[9]), binary.BigEndian.Uint16(h[22:])}
	}
	if s, r := ip(softnic), ip(rxe); s != r {
		t.Errorf("IPv4 TOS, flags, TTL, protocol and UDP destination port: softnic's %v, rxe's %v", s, r)
	}
	var sp, rp wire.Packet
	if err := sp.Decode(softnic.Payload); err != nil {
		t.Fatalf("softnic's datagram: %v", err)
	}
	if err := rp.Decode(rxe.Payload); err != nil {
		t.Fatalf("rxe's datagram: %v", err)
	}
	var sf, rf wire.Fields
	sp.Fields(&sf)
	rp.Fields(&rf)
	if sf.BTH != rf.BTH {
		t.Errorf("BTH: softnic's %+v, rxe's %+v", sf.BTH, rf.BTH)
	}
	if sf.BTH.DestQP != wire.MulticastQPN {
		t.Errorf("BTH DestQP %#x, want the multicast QPN %#x", sf.BTH.DestQP, wire.MulticastQPN)
	}
	if sf.DETH.QKey != rf.DETH.QKey || sf.DETH.Resv8 != rf.DETH.Resv8 {
		t.Errorf("DETH: softnic's %+v, rxe's %+v", sf.DETH, rf.DETH)
	}
	if len(softnic.Data) != len(rxe.Data) || len(sp.Payload) != len(rp.Payload) {
		t.Errorf("softnic's frame has %d bytes (payload %d), rxe's %d (%d)", len(softnic.Data), len(sp.Payload), len(rxe.Data), len(rp.Payload))
	}
	t.Logf("softnic %v → %v: IPv4 ID %#04x, UDP source port %d; rxe %v → %v: IPv4 ID %#04x, UDP source port %d; both TTL %d, BTH %+v, Q_Key %#x",
		softnic.Env.Src.Addr(), softnic.Env.Dst, softnic.Env.IPID, softnic.Env.Src.Port(),
		rxe.Env.Src.Addr(), rxe.Env.Dst, rxe.Env.IPID, rxe.Env.Src.Port(), rxe.IPUDP[8], rf.BTH, rf.DETH.QKey)
}
