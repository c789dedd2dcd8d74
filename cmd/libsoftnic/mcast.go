//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"net/netip"
	"unsafe"

	"github.com/softnic/softnic/nic"
)

// Multicast, as rxe and librdmacm do it on RoCEv2: ibv_attach_mcast and
// ibv_detach_mcast are package nic's QP.AttachMulticast and
// DetachMulticast, the GID the group's IPv4-mapped address and the LID
// ignored (RoCE has none). rdma_join_multicast on an id of UD QPs (the
// UDP port space's) needs no subnet administrator: the group is the IP
// address's, its GID the IPv4-mapped address, its Q_Key RDMA_UDP_QKEY;
// the id's QP is attached (not for a send-only member), and
// RDMA_CM_EVENT_MULTICAST_JOIN brings in param.ud the group's address
// vector, the multicast QPN and the Q_Key, with the program's context as
// private_data. rdma_leave_multicast detaches the QP.

// mcJoin is a group an id joined.
type mcJoin struct {
	group    netip.Addr
	sendOnly bool // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: the QP is not attached
}

// snMcast is ibv_attach_mcast (attach) or ibv_detach_mcast of the GID gid.
//
//export snMcast
func snMcast(q *C.struct_sn_qp, gid *C.uint8_t, attach C.int) C.int {
	p := handleOf[*queuePair](q.h)
	g := netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(gid)))
	if attach != 0 {
		return errnoOf(p.q.AttachMulticast(g))
	}
	return errnoOf(p.q.DetachMulticast(g))
}

// snJoinMulticast joins the id to the group at addr, as a send-only member
// if sendOnly, and tells the program with MULTICAST_JOIN (or
// MULTICAST_ERROR if its QP cannot be attached), whose private_data is
// context. An id of another QP type than UD, or not bound to the device
// yet (rdma_bind_addr, rdma_resolve_addr), is EINVAL, as in Linux.
//
//export snJoinMulticast
func snJoinMulticast(c *C.struct_sn_cm_id, addr *C.struct_sn_addr, sendOnly C.int, context unsafe.Pointer) C.int {
	id := idOf(c)
	group := addrOf(addr).Addr()
	id.mu.Lock()
	bound := id.local.IsValid()
	id.mu.Unlock()
	if id.dev == nil || !bound || !id.ud() || !group.IsMulticast() {
		return C.EINVAL
	}
	if !group.Is4() {
		unsupported("rdma_join_multicast of an IPv6 group")
		return C.EOPNOTSUPP
	}
	ev := cmEvent{typ: C.RDMA_CM_EVENT_MULTICAST_JOIN, ud: true, qpn: nic.MulticastQPN, qkey: nic.RDMAUDPQKey,
		peer: group, context: context}
	if c.id.qp != nil && sendOnly == 0 {
		if err := qpOf(c.id.qp).q.AttachMulticast(group); err != nil {
			if id.ch.Load() == nil {
				return errnoOf(err)
			}
			ev = cmEvent{typ: C.RDMA_CM_EVENT_MULTICAST_ERROR, ud: true, status: -errnoOf(err), context: context}
		}
	}
	id.mu.Lock()
	id.groups = append(id.groups, mcJoin{group: group, sendOnly: sendOnly != 0})
	id.mu.Unlock()
	if id.ch.Load() != nil {
		id.post(ev)
	}
	return 0
}

// snLeaveMulticast leaves a group the id joined, detaching its QP:
// EADDRNOTAVAIL for a group it did not join, as librdmacm.
//
//export snLeaveMulticast
func snLeaveMulticast(c *C.struct_sn_cm_id, addr *C.struct_sn_addr) C.int {
	id := idOf(c)
	group := addrOf(addr).Addr()
	id.mu.Lock()
	i := -1
	for j, g := range id.groups {
		if g.group == group {
			i = j
			break
		}
	}
	var j mcJoin
	if i >= 0 {
		j = id.groups[i]
		id.groups = append(id.groups[:i], id.groups[i+1:]...)
	}
	id.mu.Unlock()
	if i < 0 {
		return C.EADDRNOTAVAIL
	}
	if c.id.qp != nil && !j.sendOnly {
		qpOf(c.id.qp).q.DetachMulticast(group) // as librdmacm, whatever it answers
	}
	return 0
}
