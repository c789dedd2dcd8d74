//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"cmp"
	"errors"
	"net/netip"
	"runtime/cgo"
	"slices"
	"sync"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// queuePair is the Go side of an ibv_qp, with the scratch space its posts
// convert work requests in.
type queuePair struct {
	q   *nic.QP
	dev *device
	cqs []*cq // its send CQ, and its receive CQ if another, by address

	mu     sync.Mutex
	sends  []verbs.SendWR
	sges   []verbs.SGE
	inline []byte
	binds  []mr.BindRequest
	recv   verbs.RecvWR
}

// qpTypes maps ibv_qp_type to softnic's transports.
var qpTypes = map[C.enum_ibv_qp_type]verbs.Type{C.IBV_QPT_RC: verbs.RC, C.IBV_QPT_UC: verbs.UC, C.IBV_QPT_UD: verbs.UD}

//export snCreateQP
func snCreateQP(pd *C.struct_sn_pd, q *C.struct_sn_qp, a *C.struct_ibv_qp_init_attr) C.int {
	typ, ok := qpTypes[a.qp_type]
	if !ok {
		unsupported("QP types other than RC, UC and UD")
		return C.EOPNOTSUPP
	}
	if a.send_cq == nil {
		return C.EINVAL
	}
	cfg := nic.QPConfig{
		Type: typ, SendCQ: cqOf(a.send_cq).c, MaxSendWR: int(a.cap.max_send_wr), MaxRecvWR: int(a.cap.max_recv_wr),
		MaxSendSGE: int(a.cap.max_send_sge), MaxRecvSGE: int(a.cap.max_recv_sge), MaxInline: int(a.cap.max_inline_data),
		SignalAll: a.sq_sig_all != 0,
	}
	cqs := []*cq{cqOf(a.send_cq)}
	if a.recv_cq != nil {
		cfg.RecvCQ = cqOf(a.recv_cq).c
		if a.recv_cq != a.send_cq {
			// In the order of their addresses, which snDestroyQP locks them in.
			cqs = append(cqs, cqOf(a.recv_cq))
			slices.SortFunc(cqs, func(x, y *cq) int {
				return cmp.Compare(uintptr(unsafe.Pointer(x)), uintptr(unsafe.Pointer(y)))
			})
		}
	}
	if a.srq != nil {
		cfg.SRQ = handleOf[*nic.SRQ]((*C.struct_sn_srq)(unsafe.Pointer(a.srq)).h)
	}
	p := handleOf[*nic.PD](pd.h)
	nq, err := p.CreateQP(cfg)
	if err != nil {
		return errnoOf(err)
	}
	def := func(v *C.uint32_t, d int) {
		if *v == 0 {
			*v = C.uint32_t(d)
		}
	}
	def(&a.cap.max_send_wr, qp.DefaultMaxWR)
	def(&a.cap.max_recv_wr, qp.DefaultMaxWR)
	def(&a.cap.max_send_sge, qp.DefaultMaxSGE)
	def(&a.cap.max_recv_sge, qp.DefaultMaxSGE)
	def(&a.cap.max_inline_data, qp.DefaultMaxInline)
	(*C.struct_ibv_qp)(unsafe.Pointer(q)).qp_num = C.uint32_t(nq.Num())
	d := deviceOf(pd.pd.context)
	q.h = C.uintptr_t(cgo.NewHandle(&queuePair{q: nq, dev: d, cqs: cqs}))
	d.async.addQP(nq, q)
	return 0
}

func cqOf(c *C.struct_ibv_cq) *cq { return handleOf[*cq]((*C.struct_sn_cq)(unsafe.Pointer(c)).h) }

func qpOf(q *C.struct_ibv_qp) *queuePair {
	return handleOf[*queuePair]((*C.struct_sn_qp)(unsafe.Pointer(q)).h)
}

// snDestroyQP destroys the QP and sets *read to the number of its
// asynchronous events the program has read, whose acknowledgements
// ibv_destroy_qp waits for. As mlx5's provider does, it takes the QP's
// completions out of its CQs: the program polls none after, flushed work
// requests included, whose contexts it may free with the QP (libfabric's
// verbs provider, closing an endpoint, frees the buffers it had posted to
// it). The CQs' polls wait meanwhile, so that none takes a completion
// between the QP's end and the discard.
//
//export snDestroyQP
func snDestroyQP(q *C.struct_sn_qp, read *C.uint32_t) C.int {
	p := handleOf[*queuePair](q.h)
	for _, c := range p.cqs {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	if err := p.q.Destroy(); err != nil {
		return errnoOf(err)
	}
	for _, c := range p.cqs {
		c.c.Discard(p.q.Num())
	}
	*read = p.dev.async.removeQP(p.q)
	cgo.Handle(q.h).Delete()
	return 0
}

// attrMasks maps ibv_qp_attr_mask bits to softnic's; those a softnic QP
// has no use for (port, P_Key index, alternate path, capabilities …) are
// accepted and ignored, as on a device with one port and one partition.
var attrMasks = []struct {
	ibv  C.int
	mask verbs.AttrMask
}{
	{C.IBV_QP_STATE, verbs.AttrState}, {C.IBV_QP_ACCESS_FLAGS, verbs.AttrAccessFlags}, {C.IBV_QP_QKEY, verbs.AttrQKey},
	{C.IBV_QP_AV, verbs.AttrRemote}, {C.IBV_QP_PATH_MTU, verbs.AttrPathMTU}, {C.IBV_QP_TIMEOUT, verbs.AttrTimeout},
	{C.IBV_QP_RETRY_CNT, verbs.AttrRetryCnt}, {C.IBV_QP_RNR_RETRY, verbs.AttrRNRRetry}, {C.IBV_QP_RQ_PSN, verbs.AttrRQPSN},
	{C.IBV_QP_MAX_QP_RD_ATOMIC, verbs.AttrMaxRdAtomic}, {C.IBV_QP_MIN_RNR_TIMER, verbs.AttrMinRNRTimer},
	{C.IBV_QP_SQ_PSN, verbs.AttrSQPSN}, {C.IBV_QP_MAX_DEST_RD_ATOMIC, verbs.AttrMaxDestRdAtomic},
	{C.IBV_QP_DEST_QPN, verbs.AttrDestQPN},
}

//export snModifyQP
func snModifyQP(q *C.struct_ibv_qp, a *C.struct_ibv_qp_attr, ibvMask C.int) C.int {
	p := qpOf(q)
	var mask verbs.AttrMask
	for _, m := range attrMasks {
		if ibvMask&m.ibv != 0 {
			mask |= m.mask
		}
	}
	attr := verbs.Attr{
		State: verbs.State(a.qp_state), AccessFlags: mr.Access(a.qp_access_flags), PKey: 0xFFFF, QKey: uint32(a.qkey),
		Timeout: uint8(a.timeout), RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry),
		MinRNRTimer: uint8(a.min_rnr_timer), RQPSN: wire.PSN(a.rq_psn) & wire.PSNMask, SQPSN: wire.PSN(a.sq_psn) & wire.PSNMask,
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic), DestQPN: uint32(a.dest_qp_num),
	}
	if mask&verbs.AttrPathMTU != 0 {
		attr.PathMTU = wire.MTU(a.path_mtu).Bytes()
	}
	if mask&verbs.AttrRemote != 0 {
		if a.ah_attr.is_global == 0 {
			unsupported("an address vector without a GRH (RoCE addresses peers by GID: set is_global and grh.dgid)")
			return C.EINVAL
		}
		gid := *(*[16]byte)(unsafe.Pointer(&a.ah_attr.grh.dgid))
		peer, ok := p.dev.peerOf(&gid)
		if !ok {
			return C.EINVAL
		}
		attr.Remote, attr.TrafficClass = peer, uint8(a.ah_attr.grh.traffic_class)
	}
	if err := p.q.Modify(&attr, mask); err != nil {
		return errnoOf(err)
	}
	if mask&verbs.AttrState != 0 {
		q.state = a.qp_state
	}
	return 0
}

//export snQueryQP
func snQueryQP(q *C.struct_ibv_qp, a *C.struct_ibv_qp_attr) C.int {
	p := qpOf(q)
	at := p.q.Attr()
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = C.enum_ibv_qp_state(at.State)
	a.cur_qp_state = a.qp_state
	if at.PathMTU != 0 {
		a.path_mtu = mtuEnum(at.PathMTU)
	}
	a.qp_access_flags = C.uint(at.AccessFlags)
	a.qkey = C.uint32_t(at.QKey)
	a.rq_psn = C.uint32_t(at.RQPSN)
	a.sq_psn = C.uint32_t(at.SQPSN)
	a.dest_qp_num = C.uint32_t(at.DestQPN)
	a.timeout = C.uint8_t(at.Timeout)
	a.retry_cnt = C.uint8_t(at.RetryCnt)
	a.rnr_retry = C.uint8_t(at.RNRRetry)
	a.min_rnr_timer = C.uint8_t(at.MinRNRTimer)
	a.max_rd_atomic = C.uint8_t(at.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(at.MaxDestRdAtomic)
	a.port_num = 1
	if at.Remote.IsValid() {
		a.ah_attr.is_global = 1
		a.ah_attr.port_num = 1
		gid := at.Remote.Addr().As16()
		*(*[16]byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)) = gid
		a.ah_attr.grh.traffic_class = C.uint8_t(at.TrafficClass)
	}
	q.state = a.qp_state
	return 0
}

//export snCreateAH
func snCreateAH(pd *C.struct_sn_pd, ah *C.struct_sn_ah, a *C.struct_ibv_ah_attr) C.int {
	if a.is_global == 0 {
		unsupported("an address handle without a GRH (RoCE addresses peers by GID: set is_global and grh.dgid)")
		return C.EINVAL
	}
	gid := *(*[16]byte)(unsafe.Pointer(&a.grh.dgid))
	peer, ok := deviceOf(pd.pd.context).peerOf(&gid)
	if !ok {
		return C.EINVAL
	}
	ip := peer.Addr().As16()
	*(*[16]byte)(unsafe.Pointer(&ah.ip)) = ip
	ah.port = C.uint16_t(peer.Port())
	ah.traffic_class = a.grh.traffic_class
	return 0
}

//export snCreateSRQ
func snCreateSRQ(pd *C.struct_sn_pd, s *C.struct_sn_srq, a *C.struct_ibv_srq_init_attr) C.int {
	wr, sge := int(a.attr.max_wr), int(a.attr.max_sge)
	if sge == 0 {
		sge = qp.DefaultMaxSGE
	}
	srq, err := handleOf[*nic.PD](pd.h).CreateSRQ(wr, sge)
	if err != nil {
		return errnoOf(err)
	}
	a.attr.max_sge = C.uint32_t(sge)
	s.h = C.uintptr_t(cgo.NewHandle(srq))
	deviceOf(pd.pd.context).async.addSRQ(srq, s)
	return 0
}

// snDestroySRQ destroys the SRQ and sets *read to the number of its
// asynchronous events the program has read, whose acknowledgements
// ibv_destroy_srq waits for.
//
//export snDestroySRQ
func snDestroySRQ(s *C.struct_sn_srq, read *C.uint32_t) C.int {
	srq := handleOf[*nic.SRQ](s.h)
	if err := srq.Destroy(); err != nil {
		return errnoOf(err)
	}
	*read = deviceOf(s.srq.context).async.removeSRQ(srq)
	cgo.Handle(s.h).Delete()
	return 0
}

// snModifySRQ is ibv_modify_srq: IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT, the
// only bits of ibv_srq_attr_mask; any other is EINVAL.
//
//export snModifySRQ
func snModifySRQ(s *C.struct_sn_srq, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	if mask&^(C.IBV_SRQ_MAX_WR|C.IBV_SRQ_LIMIT) != 0 {
		return C.EINVAL
	}
	var m verbs.SRQAttrMask
	if mask&C.IBV_SRQ_MAX_WR != 0 {
		m |= verbs.SRQMaxWR
	}
	if mask&C.IBV_SRQ_LIMIT != 0 {
		m |= verbs.SRQLimit
	}
	attr := verbs.SRQAttr{MaxWR: int(a.max_wr), Limit: int(a.srq_limit)}
	return errnoOf(handleOf[*nic.SRQ](s.h).Modify(&attr, m))
}

// snQuerySRQ is ibv_query_srq: the SRQ's attributes as they are now, its
// limit 0 once reached.
//
//export snQuerySRQ
func snQuerySRQ(s *C.struct_sn_srq, a *C.struct_ibv_srq_attr) {
	attr := handleOf[*nic.SRQ](s.h).Attr()
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(attr.MaxWR), C.uint32_t(attr.MaxSGE), C.uint32_t(attr.Limit)
}

// sgl converts an ibv_sge list into dst's storage.
func sgl(dst []verbs.SGE, list *C.struct_ibv_sge, n C.int) []verbs.SGE {
	if n <= 0 || list == nil {
		return dst[:0]
	}
	for _, s := range unsafe.Slice(list, n) {
		dst = append(dst, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
	}
	return dst
}

// wrOpcodes maps ibv_wr_opcode to softnic's work request opcodes.
var wrOpcodes = map[C.enum_ibv_wr_opcode]verbs.WROpcode{
	C.IBV_WR_RDMA_WRITE: verbs.WRWrite, C.IBV_WR_RDMA_WRITE_WITH_IMM: verbs.WRWriteImm, C.IBV_WR_SEND: verbs.WRSend,
	C.IBV_WR_SEND_WITH_IMM: verbs.WRSendImm, C.IBV_WR_RDMA_READ: verbs.WRRead, C.IBV_WR_ATOMIC_CMP_AND_SWP: verbs.WRCompareSwap,
	C.IBV_WR_ATOMIC_FETCH_AND_ADD: verbs.WRFetchAdd, C.IBV_WR_LOCAL_INV: verbs.WRLocalInv, C.IBV_WR_BIND_MW: verbs.WRBindMW,
	C.IBV_WR_SEND_WITH_INV: verbs.WRSendInv, C.IBV_WR_ATOMIC_WRITE: verbs.WRAtomicWrite,
}

// snPostSend is ops.post_send (ibv_post_send): the list is converted, then
// posted in one go; *bad is the first work request not posted.
//
//export snPostSend
func snPostSend(q *C.struct_ibv_qp, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	p := qpOf(q)
	p.mu.Lock()
	defer p.mu.Unlock()
	failed, rc := p.convertSends(wr)
	n, err := p.q.PostSends(p.sends)
	if err != nil {
		rc = errnoOf(err)
		failed = nth(wr, n)
	}
	if rc != 0 && bad != nil {
		*bad = failed
	}
	return rc
}

// snPostSendBatch posts the list as ibv_wr_complete does (abi/verbs_ex.c): all
// of it or, with an error, none; a send queue without room for it all is
// ENOSPC, as rxe's builders say.
//
//export snPostSendBatch
func snPostSendBatch(q *C.struct_ibv_qp, wr *C.struct_ibv_send_wr) C.int {
	p := qpOf(q)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, rc := p.convertSends(wr); rc != 0 {
		return rc
	}
	switch err := p.q.PostSendBatch(p.sends); {
	case errors.Is(err, nic.ErrNoMem):
		return C.ENOSPC
	default:
		return errnoOf(err)
	}
}

// convertSends converts the list into p.sends, up to the first work
// request it cannot (EINVAL: an opcode softnic lacks), which it returns.
// p.mu is held.
func (p *queuePair) convertSends(wr *C.struct_ibv_send_wr) (failed *C.struct_ibv_send_wr, rc C.int) {
	p.sends, p.sges, p.inline, p.binds = p.sends[:0], p.sges[:0], p.inline[:0], p.binds[:0]
	failed = wr
	for w := wr; w != nil; w = w.next {
		op, ok := wrOpcodes[w.opcode]
		if !ok {
			rc = C.EINVAL
			failed = w
			break
		}
		s := verbs.SendWR{ID: uint64(w.wr_id), Opcode: op}
		f := uint(w.send_flags)
		if f&C.IBV_SEND_SIGNALED != 0 {
			s.Flags |= verbs.Signaled
		}
		if f&C.IBV_SEND_FENCE != 0 {
			s.Flags |= verbs.Fence
		}
		if f&C.IBV_SEND_SOLICITED != 0 {
			s.Flags |= verbs.Solicited
		}
		// The SGL and inline bytes go into scratch arrays reused from call
		// to call. A slice taken before an array grows keeps the old array,
		// which keeps its contents.
		first := len(p.sges)
		p.sges = sgl(p.sges, w.sg_list, w.num_sge)
		s.SGL = p.sges[first:len(p.sges):len(p.sges)]
		if f&C.IBV_SEND_INLINE != 0 && op != verbs.WRRead && op != verbs.WRCompareSwap && op != verbs.WRFetchAdd {
			s.Flags |= verbs.Inline
			start := len(p.inline)
			for _, e := range s.SGL {
				if e.Length > 0 {
					p.inline = append(p.inline, unsafe.Slice((*byte)(cptr(e.Addr)), e.Length)...)
				}
			}
			s.Inline, s.SGL = p.inline[start:len(p.inline):len(p.inline)], nil
		}
		imm := *(*uint32)(unsafe.Pointer(&w.anon0))
		switch op {
		case verbs.WRWriteImm, verbs.WRSendImm:
			s.Imm = htobe32(imm)
		case verbs.WRSendInv, verbs.WRLocalInv:
			s.InvalidateRKey = imm
		}
		switch {
		case op == verbs.WRCompareSwap || op == verbs.WRFetchAdd:
			a := (*C.struct_sn_wr_atomic)(unsafe.Pointer(&w.wr))
			s.RemoteAddr, s.RKey, s.CompareAdd, s.Swap = uint64(a.remote_addr), uint32(a.rkey), uint64(a.compare_add), uint64(a.swap)
		case op == verbs.WRBindMW:
			b := (*C.struct_sn_wr_bind)(unsafe.Pointer(&w.anon1))
			p.binds = append(p.binds, bindRequest(b.mw.rkey, b.rkey, &b.info))
			s.Bind = &p.binds[len(p.binds)-1]
		case p.q.Type() == verbs.UD:
			u := (*C.struct_sn_wr_ud)(unsafe.Pointer(&w.wr))
			if u.ah != nil {
				ah := (*C.struct_sn_ah)(unsafe.Pointer(u.ah))
				ip := *(*[16]byte)(unsafe.Pointer(&ah.ip))
				s.Dest = netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(ah.port))
				s.TrafficClass = uint8(ah.traffic_class)
			}
			s.DestQPN, s.QKey = uint32(u.remote_qpn), uint32(u.remote_qkey)
		default:
			r := (*C.struct_sn_wr_rdma)(unsafe.Pointer(&w.wr))
			s.RemoteAddr, s.RKey = uint64(r.remote_addr), uint32(r.rkey)
		}
		p.sends = append(p.sends, s)
	}
	return failed, rc
}

func nth(wr *C.struct_ibv_send_wr, i int) *C.struct_ibv_send_wr {
	for ; i > 0 && wr != nil; i-- {
		wr = wr.next
	}
	return wr
}

// bindRequest describes a bind of the window whose key is key to the new
// key newKey.
func bindRequest(key, newKey C.uint32_t, b *C.struct_ibv_mw_bind_info) mr.BindRequest {
	r := mr.BindRequest{WindowKey: uint32(key), NewKey: uint32(newKey), Addr: uint64(b.addr), Length: uint64(b.length),
		Access: mr.Access(b.mw_access_flags)}
	if b.mr != nil {
		r.RegionKey = uint32(b.mr.lkey)
	}
	return r
}

// snBindMW is ops.bind_mw (ibv_bind_mw, type 1 windows): a BIND_MW work
// request with the window's next key, which it returns.
//
//export snBindMW
func snBindMW(q *C.struct_ibv_qp, w *C.struct_ibv_mw, b *C.struct_ibv_mw_bind, newKey C.uint32_t) C.int {
	p := qpOf(q)
	req := bindRequest(w.rkey, newKey, &b.bind_info)
	s := verbs.SendWR{ID: uint64(b.wr_id), Opcode: verbs.WRBindMW, Bind: &req}
	if uint(b.send_flags)&C.IBV_SEND_SIGNALED != 0 {
		s.Flags |= verbs.Signaled
	}
	return errnoOf(p.q.PostSend(&s))
}

// cptr is the address a (of the program's memory) as a pointer.
func cptr(a uint64) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

//export snPostRecv
func snPostRecv(q *C.struct_ibv_qp, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	p := qpOf(q)
	p.mu.Lock()
	defer p.mu.Unlock()
	return postRecvs(wr, bad, &p.recv, &p.sges, p.q.PostRecv)
}

//export snPostSRQRecv
func snPostSRQRecv(s *C.struct_ibv_srq, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	srq := handleOf[*nic.SRQ]((*C.struct_sn_srq)(unsafe.Pointer(s)).h)
	var r verbs.RecvWR
	var sges []verbs.SGE
	return postRecvs(wr, bad, &r, &sges, srq.PostRecv)
}

// postRecvs posts each receive work request of the list with post.
func postRecvs(wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr, r *verbs.RecvWR, sges *[]verbs.SGE, post func(*verbs.RecvWR) error) C.int {
	for w := wr; w != nil; w = w.next {
		*sges = sgl((*sges)[:0], w.sg_list, w.num_sge)
		r.ID, r.SGL = uint64(w.wr_id), *sges
		if err := post(r); err != nil {
			if bad != nil {
				*bad = w
			}
			return errnoOf(err)
		}
	}
	return 0
}
