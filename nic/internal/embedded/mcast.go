package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// Multicast, as rxe does it for RoCEv2: UD QPs attach to groups, each an
// IPv4 multicast address (the GID is its IPv4-mapped form). A datagram
// to a group is a UD packet whose BTH names the multicast QPN 0xFFFFFF,
// sent to the group's address at the device's port (4791) through the
// device's own socket, whose bound address picks the interface. The
// device receives a group's packets through a socket of the group's own
// (udp.ListenGroup, which joins it on the device's interface), opened
// with the group's first QP and closed with its last, and hands each to
// every QP attached to the group: each checks its Q_Key and takes a
// receive WR of its own. A packet for the multicast QPN that no QP of
// the device is attached to for its group is dropped and counted
// (McastDropped). The groups live here, not in the QPs, which know
// nothing of them.

// Limits of the multicast groups, rxe's per QP (RXE_MAX_MCAST_QP_ATTACH)
// and fewer groups than rxe's: each group costs the device a socket and
// a reader.
const (
	MaxMcastGroups   = 64
	MaxMcastQPAttach = 56
)

// groups are the device's multicast groups.
type groups struct {
	mu     sync.Mutex // orders attaches and detaches
	conns  map[netip.Addr]*udp.Conn
	closed bool
	// members maps each group to its QPs: a map that is replaced, never
	// changed, under mu, and read without it by the packets' receiver.
	members atomic.Pointer[map[netip.Addr][]*QP]
}

// AttachMulticast attaches q to the multicast group (an IPv4 multicast
// address): the device joins the group with its first QP. Attaching a QP
// twice to a group does nothing, as in rxe.
func (q *QP) AttachMulticast(group netip.Addr) error {
	d := q.dev
	g := &d.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || d.closed() {
		return fmt.Errorf("softnic: attach to %v: the device is closed: %w", group, cm.ErrClosed)
	}
	if !d.local.Addr().Unmap().Is4() {
		return fmt.Errorf("softnic: attach to %v: an IPv6 device has no IPv4 groups: %w", group, mr.ErrNotSupported)
	}
	q.mu.Lock()
	destroyed := q.destroyed
	q.mu.Unlock()
	if destroyed {
		return fmt.Errorf("softnic: attach to %v: the QP was destroyed: %w", group, mr.ErrInvalid)
	}
	old := g.current()
	qps := old[group]
	switch {
	case slices.Contains(qps, q):
		return nil
	case len(qps) >= MaxMcastQPAttach:
		return fmt.Errorf("softnic: group %v has %d QPs attached: %w", group, len(qps), mr.ErrNoMem)
	}
	if g.conns[group] == nil {
		if len(g.conns) >= MaxMcastGroups {
			return fmt.Errorf("softnic: the device is in %d groups: %w", len(g.conns), mr.ErrNoMem)
		}
		c, err := udp.ListenGroup(netip.AddrPortFrom(group, d.local.Port()), d.local.Addr(), d.cfg.UDP)
		if err != nil {
			return fmt.Errorf("softnic: join %v: %w", group, err)
		}
		if g.conns == nil {
			g.conns = make(map[netip.Addr]*udp.Conn)
		}
		g.conns[group] = c
		d.wg.Add(1)
		go d.groupLoop(c)
	}
	g.publish(old, group, append(slices.Clone(qps), q))
	return nil
}

// DetachMulticast detaches q from the group, which the device leaves with
// its last QP. A QP not attached to the group is EINVAL, as in rxe.
func (q *QP) DetachMulticast(group netip.Addr) error {
	g := &q.dev.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.detachLocked(q, group) {
		return fmt.Errorf("softnic: the QP is not attached to %v: %w", group, mr.ErrInvalid)
	}
	return nil
}

// detachAll detaches a QP being destroyed from its groups, as the kernel
// does for a QP destroyed while attached.
func (g *groups) detachAll(q *QP) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for group, qps := range g.current() {
		if slices.Contains(qps, q) {
			g.detachLocked(q, group)
		}
	}
}

// detachLocked detaches q from group and reports whether it was attached.
func (g *groups) detachLocked(q *QP, group netip.Addr) bool {
	old := g.current()
	qps := old[group]
	i := slices.Index(qps, q)
	if i < 0 {
		return false
	}
	qps = slices.Delete(slices.Clone(qps), i, i+1)
	if len(qps) == 0 {
		g.conns[group].Close()
		delete(g.conns, group)
	}
	g.publish(old, group, qps)
	return true
}

// current is the map of groups to their QPs.
func (g *groups) current() map[netip.Addr][]*QP {
	if m := g.members.Load(); m != nil {
		return *m
	}
	return nil
}

// publish replaces the members map old with one where group has qps.
func (g *groups) publish(old map[netip.Addr][]*QP, group netip.Addr, qps []*QP) {
	m := maps.Clone(old)
	if m == nil {
		m = make(map[netip.Addr][]*QP, 1)
	}
	if len(qps) == 0 {
		delete(m, group)
	} else {
		m[group] = qps
	}
	g.members.Store(&m)
}

// close leaves every group; Device.Close calls it.
func (g *groups) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for _, c := range g.conns {
		c.Close()
	}
	clear(g.conns)
	g.members.Store(nil)
}

// groupLoop reads a group's socket until it closes, and processes what it
// reads as the reader does the device's socket, holding the progress role.
func (d *Device) groupLoop(c *udp.Conn) {
	defer d.wg.Done()
	msgs := readBuffers(c.Features().GRO)
	for {
		n, err := c.ReadBatch(msgs)
		if n > 0 {
			d.prog.role.Lock()
			d.process(msgs[:n])
			d.prog.role.Unlock()
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.prog.readErrors.Log(d.log, "softnic: read from a multicast group", slog.Any("group", c.LocalAddr()), slog.Any("error", err))
		}
	}
}

// receiveMulticast hands a decoded packet for the multicast QPN, sent to
// env.Dst, to each QP attached to that group.
func (d *Device) receiveMulticast(env *wire.Envelope, now qp.Time, in *inbound) string {
	qps := d.groups.current()[env.Dst.Addr().Unmap()]
	if len(qps) == 0 {
		d.devc.Inc(McastDropped)
		return "dropped: no QP attached to the group"
	}
	for _, q := range qps {
		d.deliver(q, env, now, in)
	}
	return ""
}
