package udp

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestListenGroup: two Conns joined to one group at one port (two devices
// of a host) each get a datagram sent to the group, with the group as its
// Local address, and the sender's own unicast socket at that port does not;
// once a Conn is closed the other still gets the group's datagrams.
func TestListenGroup(t *testing.T) {
	s := listen(t, "127.0.0.1:0", Options{})
	group := netip.AddrPortFrom(netip.MustParseAddr("239.7.7.7"), s.LocalAddr().Port())
	lo := netip.MustParseAddr("127.0.0.1")
	var gs [2]*Conn
	for i := range gs {
		g, err := ListenGroup(group, lo, Options{DisableGRO: true})
		if err != nil {
			t.Skipf("this host cannot join a multicast group on loopback: %v", err)
		}
		t.Cleanup(func() { g.Close() })
		gs[i] = g
	}
	send := func() {
		t.Helper()
		if _, err := s.WriteBatch([]Message{{Buf: []byte("hello"), Addr: group}}); err != nil {
			t.Skipf("this host cannot send to a multicast group from loopback: %v", err)
		}
	}
	read := func(c *Conn) Message {
		t.Helper()
		msgs := []Message{{Buf: make([]byte, 64)}}
		timer := time.AfterFunc(watchdog, func() { c.Close() })
		defer timer.Stop()
		if _, err := c.ReadBatch(msgs); err != nil {
			t.Fatalf("read on %v: %v", c.LocalAddr(), err)
		}
		return msgs[0]
	}
	send()
	for _, g := range gs {
		m := read(g)
		if string(m.Buf[:m.N]) != "hello" || m.Local != group.Addr() || m.Addr != s.LocalAddr() {
			t.Errorf("%v read %q to %v from %v, want \"hello\" to %v from %v", g.LocalAddr(), m.Buf[:m.N], m.Local, m.Addr, group.Addr(), s.LocalAddr())
		}
	}
	if n, err := s.TryReadBatch([]Message{{Buf: make([]byte, 64)}}); n != 0 || err != nil {
		t.Errorf("the unicast socket at the group's port read %d datagrams (%v), want none", n, err)
	}
	gs[0].Close()
	send()
	if m := read(gs[1]); string(m.Buf[:m.N]) != "hello" {
		t.Errorf("after the other left, read %q", m.Buf[:m.N])
	}
}

func TestListenGroupRefuses(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for _, c := range []struct {
		name   string
		group  string
		ifAddr netip.Addr
	}{
		{"unicast address", "127.0.0.1:4791", lo},
		{"IPv6 group", "[ff02::1]:4791", lo},
		{"IPv6 interface", "239.1.1.1:4791", netip.IPv6Loopback()},
		{"no interface address", "239.1.1.1:4791", netip.Addr{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if g, err := ListenGroup(netip.MustParseAddrPort(c.group), c.ifAddr, Options{}); !errors.Is(err, syscall.EINVAL) {
				if err == nil {
					g.Close()
				}
				t.Errorf("ListenGroup(%s, %v): %v, want EINVAL", c.group, c.ifAddr, err)
			}
		})
	}
}
