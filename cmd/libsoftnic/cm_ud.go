//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"context"
	"errors"
	"time"
	"unsafe"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire/mad"
)

// rdma_cm's UDP port space (RDMA_PS_UDP) over package nic's service ID
// resolution: a listening UDP id takes resolutions (Device.ListenUD), each
// a CONNECT_REQUEST answered by rdma_accept with the id's UD QP
// (Request.AcceptUD) or refused by rdma_reject; rdma_connect resolves the
// peer's port (Device.Resolve) and ends in ESTABLISHED with the peer's
// QPN, Q_Key and address handle attributes in param.ud, as librdmacm's
// do, or in UNREACHABLE: with the SIDR_REP's status, or -ETIMEDOUT.

// ud reports whether the id's QP is UD: all of the UDP port space's are,
// those of the IB port space that were made so (rdma_getaddrinfo's
// ai_qp_type).
func (id *cmID) ud() bool { return id.cid.id.qp_type == C.IBV_QPT_UD }

// portSpace is the id's port space, which the service IDs of its
// connection or resolution carry.
func (id *cmID) portSpace() nic.PortSpace { return nic.PortSpace(id.cid.id.ps) }

// listenUDLocked listens for resolutions, held if asked; id.mu is held.
func (id *cmID) listenUDLocked(backlog C.int, held bool) C.int {
	l, err := id.dev.dev.ListenUD(id.local.Port(), nic.ListenUDOptions{Backlog: max(int(backlog), 0), PortSpace: id.portSpace(), Held: held})
	if err != nil {
		if errors.Is(err, nic.ErrBusy) {
			return C.EADDRINUSE
		}
		return errnoOf(err)
	}
	id.listening(l)
	return 0
}

// acceptUD answers the id's resolution with the UD QP q. No event
// follows: the requester's ESTABLISHED is the requester's alone.
func (id *cmID) acceptUD(q *nic.QP, private []byte) C.int {
	id.mu.Lock()
	r := id.req
	id.mu.Unlock()
	if r == nil {
		return C.EINVAL
	}
	if err := r.AcceptUD(q, private); err != nil {
		return errnoOf(err)
	}
	id.mu.Lock()
	id.req = nil // answered: rdma_destroy_id has nothing to reject
	id.mu.Unlock()
	return 0
}

// resolveUD resolves the peer's port: a synchronous id waits for it, an
// id with a channel is told with an event.
func (id *cmID) resolveUD(private []byte) C.int {
	id.mu.Lock()
	peer, rport := id.peer, id.rport
	if !peer.IsValid() || id.cancel != nil {
		id.mu.Unlock()
		return C.EINVAL
	}
	ctx, cancel := context.WithCancel(context.Background())
	id.cancel = cancel
	id.mu.Unlock()
	result := func() cmEvent {
		var p *nic.UDPeer
		var err error
		deadline := time.Now().Add(listenGrace)
		for {
			// Resolve again while nothing listens on the port yet, as
			// dialListening does.
			p, err = id.dev.dev.Resolve(ctx, peer, rport, nic.ResolveOptions{PrivateData: private, PortSpace: id.portSpace()})
			var sidr *nic.SIDRError
			if err == nil || !errors.As(err, &sidr) || sidr.Status != mad.SIDRUnsupported || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		id.mu.Lock()
		id.cancel = nil
		id.mu.Unlock()
		return resolvedEvent(p, err)
	}
	if id.ch.Load() == nil {
		return result().errno(C.RDMA_CM_EVENT_ESTABLISHED)
	}
	go func() { id.post(result()) }()
	return 0
}

// resolvedEvent is the event that ends a resolution, as Linux's rdma_cm
// has it: ESTABLISHED, or UNREACHABLE with the SIDR_REP's status or
// -ETIMEDOUT.
func resolvedEvent(p *nic.UDPeer, err error) cmEvent {
	var sidr *nic.SIDRError
	switch {
	case err == nil:
		return cmEvent{typ: C.RDMA_CM_EVENT_ESTABLISHED, ud: true, private: p.PrivateData, qpn: p.QPN, qkey: p.QKey, peer: p.Addr.Addr()}
	case errors.As(err, &sidr):
		return cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, ud: true, status: C.int(sidr.Status), private: sidr.PrivateData}
	case errors.Is(err, nic.ErrTimedOut):
		return cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, ud: true, status: -C.ETIMEDOUT}
	}
	return cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_ERROR, ud: true, status: -errnoOf(err)}
}

// fillUDEvent writes the rdma_ud_param of an event: the private data (a
// multicast join's context) and, for a resolution or a join, the peer's
// QP (the multicast QPN), Q_Key and an address vector with its GID (the
// group's), which ibv_create_ah takes.
func fillUDEvent(ev *C.struct_sn_cm_event, e *cmEvent) {
	p := (*C.struct_rdma_ud_param)(unsafe.Pointer(&ev.ev.param))
	if n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev.private_data)), len(ev.private_data)), e.private); n > 0 {
		p.private_data = unsafe.Pointer(&ev.private_data)
		p.private_data_len = C.uint8_t(n)
	}
	if e.context != nil {
		p.private_data = e.context
	}
	p.qp_num, p.qkey = C.uint32_t(e.qpn), C.uint32_t(e.qkey)
	if !e.peer.IsValid() {
		return
	}
	p.ah_attr.is_global = 1
	p.ah_attr.port_num = 1
	p.ah_attr.grh.hop_limit = 64
	p.ah_attr.grh.traffic_class = C.uint8_t(idOf(e.id).tosOf())
	*(*[16]byte)(unsafe.Pointer(&p.ah_attr.grh.dgid)) = e.peer.As16()
}
