package nic_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// mcastGroup is the group of the tests, given as rdma_cm gives it: the
// IPv4-mapped GID of an IPv4 multicast address.
var mcastGroup = netip.MustParseAddr("::ffff:239.5.6.7")

// mcastPorts returns a port free on 127.0.0.1 and 127.0.0.2: multicast
// goes to the group at the device's own port, so two devices of one host
// that share a group share a port, on two loopback addresses.
func mcastPorts(t *testing.T) (netip.AddrPort, netip.AddrPort) {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		c2, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: int(port)})
		c.Close()
		if err == nil {
			c2.Close()
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port), netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), port)
		}
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return netip.AddrPort{}, netip.AddrPort{}
}

// mcastMember is a UD QP in RTS with a CQ of its own and receives posted.
type mcastMember struct {
	qp *nic.QP
	cq *nic.CQ
}

func newMcastMember(t *testing.T, e *end, qkey uint32, recvs int) mcastMember {
	t.Helper()
	cq, err := e.dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	q, err := e.pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{QKey: qkey}); err != nil {
		t.Fatal(err)
	}
	for i := range recvs {
		if err := q.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{e.mr.SGE(4096*(1+int(q.Num()%64)), 512)}}); err != nil {
			t.Fatal(err)
		}
	}
	return mcastMember{q, cq}
}

// TestMulticast: a UD send to a group reaches each QP attached to it on
// each device that joined it (two QPs on one device, one on another), each
// with a receive completion of its own naming the sender, and not a QP
// attached with another Q_Key; a detached QP gets nothing more, the group
// going on without the device whose QPs all left; and a datagram for the
// multicast QPN not sent to a group is dropped and counted
// (mcast_dropped). Loopback must carry multicast: the test
// is skipped where the host cannot join a group on it.
func TestMulticast(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		addrA, addrB := mcastPorts(t)
		a, b := p.end(t, nic.Config{Addr: addrA}), p.end(t, nic.Config{Addr: addrB})
		const qkey = 0x11111111
		other := newMcastMember(t, a, 0x22222222, 2) // attached first: delivered to first
		a1, a2 := newMcastMember(t, a, qkey, 2), newMcastMember(t, a, qkey, 2)
		b1 := newMcastMember(t, b, qkey, 3)
		for _, m := range []mcastMember{other, a1, a2, b1} {
			if err := m.qp.AttachMulticast(mcastGroup); err != nil {
				if errors.Is(err, nic.ErrInvalid) || errors.Is(err, nic.ErrNotSupported) {
					t.Fatal(err)
				}
				t.Skipf("this host cannot join a multicast group on loopback: %v", err)
			}
		}
		sender := newMcastMember(t, b, qkey, 0)
		dest := netip.AddrPortFrom(mcastGroup.Unmap(), addrA.Port())
		sendTo := func(dest netip.AddrPort, qpn uint32) {
			t.Helper()
			wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{b.mr.SGE(0, 100)}, Dest: dest, DestQPN: qpn, QKey: qkey}
			if err := sender.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, sender.cq); wc.Status != verbs.Success {
				t.Fatalf("the send to %v: %v", dest, &wc)
			}
		}
		send := func() { t.Helper(); sendTo(dest, nic.MulticastQPN) }
		got := func(name string, m mcastMember) {
			t.Helper()
			wc := nictest.Wait(t, m.cq)
			if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || wc.ByteLen != 40+100 || wc.SrcQPN != sender.qp.Num() || wc.Src.Addr() != addrB.Addr() {
				t.Errorf("%s: %v, want a receive of 140 bytes from QP %#x at %v", name, &wc, sender.qp.Num(), addrB.Addr())
			}
		}
		none := func(name string, m mcastMember) {
			t.Helper()
			var wcs [1]verbs.WC
			if n, err := m.cq.Poll(wcs[:]); n != 0 || err != nil {
				t.Errorf("%s: %d completions (%v), want none: %v", name, n, err, &wcs[0])
			}
		}
		send()
		got("first QP of the receiving device", a1)
		got("second QP of the receiving device", a2)
		got("QP of the sending device", b1)
		none("QP of another Q_Key", other)

		if err := a2.qp.DetachMulticast(mcastGroup); err != nil {
			t.Fatal(err)
		}
		send()
		got("first QP after the second detached", a1)
		got("QP of the sending device, again", b1)
		none("detached QP", a2)

		for _, m := range []mcastMember{other, a1} {
			if err := m.qp.DetachMulticast(mcastGroup); err != nil {
				t.Fatal(err)
			}
		}
		if p.attached {
			return // the daemon's device counts what it drops
		}
		// Device A left the group: B's QP still gets the group's
		// datagrams; and a datagram for the multicast QPN sent to A's own
		// address, which no QP can be attached to, is dropped there: once
		// the datagram sent after it to a QP of A arrived, it was counted.
		send()
		got("QP of the sending device, the last one attached", b1)
		dropped := counter(t, a.dev, "mcast_dropped")
		if err := a1.qp.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{a.mr.SGE(0, 512)}}); err != nil {
			t.Fatal(err)
		}
		sendTo(addrA, nic.MulticastQPN)
		sendTo(addrA, a1.qp.Num())
		got("first QP, sent to by its number", a1)
		if n := counter(t, a.dev, "mcast_dropped"); n != dropped+1 {
			t.Errorf("mcast_dropped went from %d to %d, want one more", dropped, n)
		}
	})
}

// TestMulticastErrors: what AttachMulticast and DetachMulticast refuse, as
// ib_attach_mcast and rxe do.
func TestMulticastErrors(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := p.end(t, nic.Config{})
		ud := newMcastMember(t, e, 0x11111111, 0)
		for _, c := range []struct {
			name   string
			qp     *nic.QP
			group  string
			detach bool
			want   error
		}{
			{name: "unicast IPv4-mapped GID", qp: ud.qp, group: "::ffff:10.0.0.1", want: nic.ErrInvalid},
			{name: "unicast IPv4 address", qp: ud.qp, group: "192.0.2.1", want: nic.ErrInvalid},
			{name: "an RC QP", qp: e.qp, group: "239.1.2.3", want: nic.ErrInvalid},
			{name: "IPv6 group", qp: ud.qp, group: "ff0e::1", want: nic.ErrNotSupported},
			{name: "detach from a group never attached to", qp: ud.qp, group: "239.1.2.3", detach: true, want: nic.ErrInvalid},
			{name: "detach an RC QP", qp: e.qp, group: "239.1.2.3", detach: true, want: nic.ErrInvalid},
		} {
			t.Run(c.name, func(t *testing.T) {
				call := c.qp.AttachMulticast
				if c.detach {
					call = c.qp.DetachMulticast
				}
				if err := call(netip.MustParseAddr(c.group)); !errors.Is(err, c.want) {
					t.Errorf("%v, want %v", err, c.want)
				}
			})
		}
		// Attached twice, a QP is attached once (rxe): its second detach
		// is EINVAL.
		if err := ud.qp.AttachMulticast(mcastGroup); err != nil {
			t.Skipf("this host cannot join a multicast group on loopback: %v", err)
		}
		for i, call := range []func(netip.Addr) error{ud.qp.AttachMulticast, ud.qp.DetachMulticast, ud.qp.DetachMulticast} {
			if err := call(mcastGroup); (i == 2) != errors.Is(err, nic.ErrInvalid) {
				t.Errorf("call %d after attaching: %v", i+1, err)
			}
		}
	})
}

// TestMulticastLimits: past the QPs a group may have and the groups a
// device may join, as Device.Query says them (rxe's 56 QPs a group; 64
// groups, each a socket and a reader), AttachMulticast is ErrNoMem, and a
// detach makes room again.
func TestMulticastLimits(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := p.end(t, nic.Config{})
		attr := e.dev.Query()
		perGroup, groups := attr.MaxMcastQPAttach, attr.MaxMcastGrp
		if perGroup != 56 || groups != 64 || attr.MaxTotalMcastQPAttach != perGroup*groups {
			t.Fatalf("max_mcast_qp_attach %d, max_mcast_grp %d, max_total_mcast_qp_attach %d; want 56, 64, their product",
				perGroup, groups, attr.MaxTotalMcastQPAttach)
		}
		qps := make([]*nic.QP, perGroup+1)
		for i := range qps {
			qps[i] = newMcastMember(t, e, 0x11111111, 0).qp
		}
		for i, q := range qps[:perGroup] {
			if err := q.AttachMulticast(mcastGroup); err != nil {
				if i == 0 && !errors.Is(err, nic.ErrNoMem) {
					t.Skipf("this host cannot join a multicast group on loopback: %v", err)
				}
				t.Fatalf("QP %d: %v", i+1, err)
			}
		}
		if err := qps[perGroup].AttachMulticast(mcastGroup); !errors.Is(err, nic.ErrNoMem) {
			t.Errorf("QP %d of a group: %v, want ErrNoMem", perGroup+1, err)
		}
		if err := qps[0].DetachMulticast(mcastGroup); err != nil {
			t.Fatal(err)
		}
		if err := qps[perGroup].AttachMulticast(mcastGroup); err != nil {
			t.Errorf("QP %d once the first left: %v", perGroup+1, err)
		}
		for i := range groups - 1 {
			if err := qps[0].AttachMulticast(netip.AddrFrom4([4]byte{239, 5, 7, byte(i)})); err != nil {
				t.Fatalf("group %d: %v", i+2, err)
			}
		}
		if err := qps[0].AttachMulticast(netip.MustParseAddr("239.5.8.1")); !errors.Is(err, nic.ErrNoMem) {
			t.Errorf("group %d: %v, want ErrNoMem", groups+1, err)
		}
	})
}

// TestMulticastIPv6Device: a device on IPv6 has no IPv4 groups.
func TestMulticastIPv6Device(t *testing.T) {
	e := openEnd(t, nic.Config{Addr: netip.MustParseAddrPort("[::1]:0")})
	ud := newMcastMember(t, e, 0x11111111, 0)
	if err := ud.qp.AttachMulticast(mcastGroup); !errors.Is(err, nic.ErrNotSupported) {
		t.Errorf("%v, want ErrNotSupported", err)
	}
}

// TestMulticastLeavesGroup: the device is a member of a group (the
// kernel's /proc/net/igmp counts its socket) while a QP is attached to the
// group, one membership however many QPs, and leaves the group when the
// last QP detaches or is destroyed.
func TestMulticastLeavesGroup(t *testing.T) {
	group := netip.MustParseAddr("::ffff:239.5.9.9") // this test's alone
	e := openEnd(t, nic.Config{})
	a, b := newMcastMember(t, e, 0x11111111, 0), newMcastMember(t, e, 0x11111111, 0)
	members := func() int {
		t.Helper()
		n, err := groupMembers(group)
		if err != nil {
			t.Skipf("no multicast memberships to read: %v", err)
		}
		return n
	}
	if n := members(); n != 0 {
		t.Fatalf("%v has %d members before the test", group, n)
	}
	if err := a.qp.AttachMulticast(group); err != nil {
		t.Skipf("this host cannot join a multicast group on loopback: %v", err)
	}
	if err := b.qp.AttachMulticast(group); err != nil {
		t.Fatal(err)
	}
	if n := members(); n != 1 {
		t.Errorf("%d memberships of the group with two QPs attached, want 1 (one socket)", n)
	}
	if err := a.qp.DetachMulticast(group); err != nil {
		t.Fatal(err)
	}
	if n := members(); n != 1 {
		t.Errorf("%d memberships of the group with one QP left in it, want 1", n)
	}
	if err := b.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n := members(); n != 0 {
		t.Errorf("%d memberships of the group once its last QP was destroyed, want 0", n)
	}
}

// groupMembers returns how many sockets of the host are members of the
// IPv4 group (IPv4-mapped), from Linux's /proc/net/igmp, whose groups are
// the addresses' bytes in host order (little-endian here) in hex.
func groupMembers(group netip.Addr) (int, error) {
	b, err := os.ReadFile("/proc/net/igmp")
	if err != nil {
		return 0, err
	}
	g := group.Unmap().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X", g[3], g[2], g[1], g[0])
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == want {
			users, err := strconv.Atoi(f[1])
			if err != nil {
				return 0, fmt.Errorf("/proc/net/igmp: %q: %w", line, err)
			}
			n += users
		}
	}
	return n, nil
}
