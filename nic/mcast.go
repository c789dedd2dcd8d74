package nic

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// MulticastQPN is the destination QPN of a datagram to a multicast group:
// a UD send whose Dest is a group's address and whose DestQPN is
// MulticastQPN reaches every QP attached to the group, on every device
// that joined it, whose Q_Key matches the send's.
const MulticastQPN = wire.MulticastQPN

// AttachMulticast attaches the UD QP to a multicast group
// (ibv_attach_mcast), as Linux rxe does for RoCEv2: the group is an IPv4
// multicast address, or its IPv4-mapped form (the GID rdma_cm gives a
// group), which the device joins on its interface when its first QP
// attaches. The QP then takes a receive WR for each datagram sent to the
// group at the device's port (4791) with DestQPN MulticastQPN and its
// Q_Key, besides those sent to it. Sending to the group needs no
// attachment: any UD QP posts a send with Dest the group's address at
// port 4791 and DestQPN MulticastQPN.
//
// A QP attached twice to a group stays attached once. It returns
// ErrInvalid for an address that is not multicast and for a QP that is
// not UD (QP1 included), ErrNotSupported for an IPv6 group, ErrNoMem
// past the device's limits on groups and on QPs per group, and the
// error of joining the group (the interface cannot do multicast).
func (q *QP) AttachMulticast(group netip.Addr) error {
	g, err := q.checkGroup(group)
	if err != nil {
		return err
	}
	return q.prov.AttachMulticast(g)
}

// DetachMulticast detaches the QP from a group it was attached to
// (ibv_detach_mcast); the device leaves the group with its last QP.
// Destroying a QP detaches it from its groups. It returns ErrInvalid for
// a group the QP is not attached to, and AttachMulticast's errors for
// what it refuses.
func (q *QP) DetachMulticast(group netip.Addr) error {
	g, err := q.checkGroup(group)
	if err != nil {
		return err
	}
	return q.prov.DetachMulticast(g)
}

// checkGroup makes the checks of ib_attach_mcast (a multicast address,
// a UD QP) and returns the group as an IPv4 address.
func (q *QP) checkGroup(group netip.Addr) (netip.Addr, error) {
	g := group.Unmap()
	switch {
	case !g.IsMulticast():
		return netip.Addr{}, fmt.Errorf("QP %#x: %v is not a multicast address: %w", q.num, group, ErrInvalid)
	case q.pd == nil || q.Type() != verbs.UD:
		return netip.Addr{}, fmt.Errorf("QP %#x: only a UD QP attaches to a multicast group: %w", q.num, ErrInvalid)
	case !g.Is4():
		return netip.Addr{}, fmt.Errorf("QP %#x: IPv6 multicast group %v: %w", q.num, group, ErrNotSupported)
	}
	return g, nil
}
