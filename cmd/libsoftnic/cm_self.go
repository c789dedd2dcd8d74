//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"cmp"
	"unsafe"

	"github.com/softnic/softnic/nic"
)

// A QP the program connects itself, which rdma_cm did not make: the id has
// no QP, and rdma_connect and rdma_accept name the program's QP by
// conn_param's qp_num (package nic's SelfConnect). rdma_init_qp_attr gives
// the RTR and RTS attributes the handshake negotiated, the acceptor's from
// the request (before rdma_accept, as rping -q asks), the dialer's from
// the REP, which arrives as RDMA_CM_EVENT_CONNECT_RESPONSE rather than
// ESTABLISHED; rdma_establish then sends the dialer's RTU, with no event
// after, as librdmacm's.

// snSetAckTimeout is rdma_set_option's RDMA_OPTION_ID_ACK_TIMEOUT: the
// local ACK timeout exponent of the QP the id connects, for rdma_connect,
// rdma_accept and rdma_init_qp_attr's RTS, as in Linux for an RC id; 0
// takes the default back (a connection's QP has no infinite timeout
// here). It fails with EINVAL past 31 or on a UD id.
//
//export snSetAckTimeout
func snSetAckTimeout(c *C.struct_sn_cm_id, timeout C.uint8_t) C.int {
	id := idOf(c)
	if timeout > 31 || id.ud() {
		return C.EINVAL
	}
	id.mu.Lock()
	id.ackTimeout = uint8(timeout)
	id.mu.Unlock()
	return 0
}

// snSetTOS is rdma_set_option's RDMA_OPTION_ID_TOS: the type of service,
// the IP header's DSCP and ECN byte, of the connection rdma_connect makes
// (which goes in the REQ's path, and the acceptor's QP takes it from
// there, as in Linux) and of the address vectors of the id's UD events.
//
//export snSetTOS
func snSetTOS(c *C.struct_sn_cm_id, tos C.uint8_t) {
	id := idOf(c)
	id.mu.Lock()
	id.tos = uint8(tos)
	id.mu.Unlock()
}

// tosOf is the type of service snSetTOS set, 0 if none.
func (id *cmID) tosOf() uint8 {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.tos
}

// ackTimeoutOf is the timeout snSetAckTimeout set, 0 if none.
func (id *cmID) ackTimeoutOf() uint8 {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ackTimeout
}

// params are the negotiated attributes of the id's connection: the
// dialer's once the REP came, else the acceptor's of its request.
func (id *cmID) params() *nic.ConnParams {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.conn != nil {
		return id.conn.Params()
	}
	if id.req != nil {
		return id.req.Params()
	}
	return nil
}

// snInitQPAttr fills the attributes of RTR or RTS (attr.qp_state) and
// their mask.
//
//export snInitQPAttr
func snInitQPAttr(c *C.struct_sn_cm_id, a *C.struct_ibv_qp_attr, mask *C.int) C.int {
	id := idOf(c)
	p := id.params()
	if p == nil {
		return C.EINVAL
	}
	o := &p.Options
	switch a.qp_state {
	case C.IBV_QPS_RTR:
		a.ah_attr = C.struct_ibv_ah_attr{is_global: 1, port_num: 1}
		a.ah_attr.grh.hop_limit = 64
		a.ah_attr.grh.traffic_class = C.uint8_t(o.TrafficClass)
		*(*[16]byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)) = p.Remote.Addr().As16()
		a.path_mtu = mtuEnum(o.MTU)
		a.dest_qp_num = C.uint32_t(p.RemoteQPN)
		a.rq_psn = C.uint32_t(o.RemotePSN)
		a.max_dest_rd_atomic = C.uint8_t(o.MaxDestRdAtomic)
		a.min_rnr_timer = C.uint8_t(o.MinRNRTimer)
		*mask = C.IBV_QP_STATE | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_DEST_QPN | C.IBV_QP_RQ_PSN |
			C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_MIN_RNR_TIMER
	case C.IBV_QPS_RTS:
		a.sq_psn = C.uint32_t(o.LocalPSN)
		a.timeout = C.uint8_t(cmp.Or(id.ackTimeoutOf(), o.Timeout))
		a.retry_cnt = C.uint8_t(o.RetryCnt)
		a.rnr_retry = C.uint8_t(o.RNRRetry)
		a.max_rd_atomic = C.uint8_t(o.MaxRdAtomic)
		*mask = C.IBV_QP_STATE | C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_SQ_PSN |
			C.IBV_QP_MAX_QP_RD_ATOMIC
	default:
		return C.EINVAL
	}
	return 0
}

// snEstablish sends the RTU of a connection whose QP the program has
// connected.
//
//export snEstablish
func snEstablish(c *C.struct_sn_cm_id) C.int {
	id := idOf(c)
	id.mu.Lock()
	conn := id.conn
	id.mu.Unlock()
	if conn == nil {
		return C.EINVAL
	}
	return errnoOf(conn.Establish())
}
