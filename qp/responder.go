package qp

import (
	"encoding/binary"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp/internal/readpace"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// respKind is what an entry of the responder's output queue sends.
type respKind uint8

const (
	respAck         respKind = iota + 1 // ACKNOWLEDGE with an ACK syndrome
	respNak                             // ACKNOWLEDGE with an RNR NAK or NAK syndrome
	respRead                            // READ RESPONSE packets
	respAtomic                          // ATOMIC ACKNOWLEDGE
	respAtomicWrite                     // READ RESPONSE ONLY without payload: rxe's ACK of an ATOMIC WRITE
)

// response is one entry of the responder's output queue. Entries leave in
// PSN order: an ACK must never overtake the responses of an earlier READ,
// or the requester would take it for an implied NAK.
type response struct {
	kind     respKind
	psn      wire.PSN // the PSN the packet carries; for READ, of the next response packet
	syndrome wire.Syndrome
	msn      uint32
	orig     uint64 // ATOMIC: the original value
	// READ: the request's PSN range, the memory and what is left to send.
	first, last wire.PSN
	span        mr.Span
	off, remain uint64
	// fresh marks the response to a new request, which holds one of the
	// max_dest_rd_atomic resources until sent; replays of duplicates do not.
	fresh bool
}

// resource remembers an executed READ or ATOMIC so that a duplicate of it
// is answered again without executing twice (the IBTA's responder
// resources, max_dest_rd_atomic of them).
type resource struct {
	kind        respKind
	first, last wire.PSN
	rkey        uint32
	va          uint64
	length      uint64
	orig        uint64
}

// msgKind is the multi-packet message a responder is in the middle of.
type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// responder is the receiving half of a QP: it executes each new request
// once, answers duplicates from what it remembers, and queues the ACKs,
// NAKs and responses the QP sends before its own requests. It owns the
// expected PSN and MSN, the message being placed, the READ and atomic
// resources, the output queue and its pacer, and it posts the receive
// completions.
type responder struct {
	q       *QP
	epsn    wire.PSN // expected PSN of the next new request
	msn     uint32   // messages completed, carried in every AETH
	nakSent bool     // a PSN sequence error (or RNR) NAK went out; stay silent until epsn arrives
	dropMsg bool     // UC: drop packets until the next FIRST or ONLY
	msg     msgKind

	// The receive WR a SEND is being placed into.
	rwqe     recvWQE
	haveRWQE bool
	rspans   []mr.Span
	roff     uint64
	rcap     uint64

	// The memory an RDMA WRITE is being placed into.
	wspan mr.Span
	whave bool
	woff  uint64
	wlen  uint64

	res     []resource
	resNext int

	out       []response
	outHead   int
	outCount  int
	rdPending int // responses to new READ/ATOMIC requests in out

	pace readpace.Pacer
}

func (r *responder) init(q *QP) {
	cfg := q.cfg
	r.q = q
	r.rwqe.sgl = make([]verbs.SGE, 0, max(cfg.MaxRecvSGE, maxSGEOf(cfg.SRQ)))
	r.rspans = make([]mr.Span, 0, cap(r.rwqe.sgl))
}

func maxSGEOf(s *SRQ) int {
	if s == nil {
		return 0
	}
	return s.q.maxSGE
}

func (r *responder) reset() {
	r.releaseMessage()
	r.clearOut(false)
	r.epsn, r.msn, r.nakSent, r.dropMsg, r.msg = 0, 0, false, false, msgNone
	r.haveRWQE = false
	r.res = r.res[:0]
}

// start readies the responder for INIT→RTR.
func (r *responder) start(a verbs.Attr) {
	r.pace = readpace.Pacer{}
	r.epsn = a.RQPSN
	n := max(1, int(a.MaxDestRdAtomic))
	r.res = make([]resource, n)
	r.resNext = 0
	r.out = make([]response, 2*n+8)
	r.outHead, r.outCount, r.rdPending = 0, 0, 0
}

func (r *responder) releaseMessage() {
	for i := range r.rspans {
		r.rspans[i].Release()
	}
	r.rspans = r.rspans[:0]
	if r.whave {
		r.wspan.Release()
		r.whave = false
	}
}

// clearOut empties the output queue, keeping ACKs and NAKs when
// keepAnswers is set.
func (r *responder) clearOut(keepAnswers bool) {
	var kept []response // the error path only: it may allocate
	for i := range r.outCount {
		e := &r.out[(r.outHead+i)%len(r.out)]
		if e.kind == respRead {
			e.span.Release()
		}
		if keepAnswers && (e.kind == respNak || e.kind == respAck) {
			kept = append(kept, *e)
		}
		*e = response{}
	}
	r.outHead, r.outCount, r.rdPending = 0, copy(r.out, kept), 0
}

// abort drops the message in progress and every queued response but ACKs
// and NAKs when the QP enters the error state; a half-filled receive WR is
// flushed. An ACK queued is owed for a message whose receive completion
// the program may have polled already, and which may have been the
// peer's last (rxe and a hardware NIC send it before the QP can change
// state); a NAK tells the peer why.
func (r *responder) abort() {
	q := r.q
	r.releaseMessage()
	r.clearOut(true)
	if r.haveRWQE {
		r.haveRWQE = false
		q.pushRecvWC(&verbs.WC{ID: r.rwqe.id, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: q.num})
	}
	r.msg = msgNone
}

// push appends a response; a full queue drops it (the requester's retry
// brings the request back).
func (r *responder) push(e response) {
	if r.outCount == len(r.out) {
		if e.kind == respRead {
			e.span.Release()
		}
		return
	}
	r.out[(r.outHead+r.outCount)%len(r.out)] = e
	r.outCount++
	if e.fresh {
		r.rdPending++
	}
}

// queueAck acknowledges every request up to psn. Consecutive ACKs fold into
// one: a later ACK covers the earlier ones.
func (r *responder) queueAck(psn wire.PSN, cnt *verbs.Counters) {
	if r.outCount > 0 {
		if tail := &r.out[(r.outHead+r.outCount-1)%len(r.out)]; tail.kind == respAck {
			tail.psn, tail.msn = psn, r.msn
			cnt.Inc(verbs.AckDeferred)
			return
		}
	}
	r.push(response{kind: respAck, psn: psn, syndrome: wire.ACKSyndrome(31), msn: r.msn})
}

func (r *responder) queueNak(syn wire.Syndrome, psn wire.PSN) {
	r.push(response{kind: respNak, psn: psn, syndrome: syn, msn: r.msn})
}

// failure says how a request failed: the NAK code the requester gets, the
// status of the responder's own receive completion, and what it counts as.
type failure struct {
	code    wire.NakCode
	status  verbs.WCStatus
	counter verbs.CounterID
}

var (
	invalidRequest = failure{wire.NakInvalidRequest, verbs.RemInvReqErr, verbs.BadRequest}
	lengthError    = failure{wire.NakInvalidRequest, verbs.LocLenErr, verbs.BadRequest}
	badRecvWR      = failure{wire.NakRemoteOperationalError, verbs.LocProtErr, verbs.BadRequest}
	// accessError is every refused R_Key check (see remoteAccess).
	accessError = failure{wire.NakRemoteAccessError, verbs.RemAccessErr, verbs.RemoteAccessErr}
	// misaligned is an atomic whose address is not 8-byte aligned, which
	// the IBTA forbids (rxe: RESPST_ERR_MISALIGNED_ATOMIC); it is refused
	// before its key is looked at.
	misaligned = failure{wire.NakInvalidRequest, verbs.RemInvReqErr, verbs.BadRequest}
)

// outcome of executing one request packet.
type outcome uint8

const (
	executed outcome = iota
	noRecvWR         // needs a receive WR and there is none: RNR NAK (RC) or drop (UC)
	failed
	held // needs an R_Key check and the Guard holds the peer back: dropped unanswered
)

// receive handles a request packet that came at now: RC and UC
// requests, UD datagrams.
func (r *responder) receive(p *wire.Packet, env *wire.Envelope, now Time) {
	switch r.q.cfg.Type {
	case verbs.UD:
		r.receiveDatagram(p, env)
	case verbs.UC:
		r.receiveUC(p)
	default:
		r.receiveRC(p, now)
	}
}

func (r *responder) receiveRC(p *wire.Packet, now Time) {
	q := r.q
	psn := p.BTH.PSN()
	switch d := psn.Sub(r.epsn); {
	case d > 0:
		// Ahead of sequence: NAK once, then drop until epsn arrives.
		q.cnt.Inc(verbs.OutOfSeqRequest)
		if !r.nakSent {
			r.nakSent = true
			r.queueNak(wire.NakSyndrome(wire.NakPSNSequenceError), r.epsn)
		}
		return
	case d < 0:
		q.cnt.Inc(verbs.DuplicateRequest)
		r.duplicate(p, psn, now)
		return
	}
	out, f := r.execute(p)
	switch out {
	case held:
		return // as if lost: the requester's retry brings it back
	case noRecvWR:
		// RNR NAK with our timer; the requester resends this PSN later.
		q.cnt.Inc(verbs.SendRNRErr)
		r.queueNak(wire.RNRNakSyndrome(q.attr.MinRNRTimer), psn)
		r.nakSent = true
		return
	case failed:
		q.cnt.Inc(f.counter)
		r.queueNak(wire.NakSyndrome(f.code), psn)
		// Class C errors: the responder's QP goes to the error state too.
		r.failRecv(f.status)
		return
	}
	r.nakSent = false
	op := p.OpCode()
	if !op.IsReadRequest() {
		r.epsn = psn.Add(1)
	}
	if (op.IsSend() || op.IsWrite()) && p.BTH.AckReq() {
		r.queueAck(psn, q.cnt)
	}
}

func (r *responder) receiveUC(p *wire.Packet) {
	q := r.q
	psn, op := p.BTH.PSN(), p.OpCode()
	if r.dropMsg || psn != r.epsn {
		if !op.IsFirst() && !op.IsOnly() {
			// A gap inside a message: the rest of it is lost.
			if !r.dropMsg {
				q.cnt.Inc(verbs.UCDroppedMsgs)
				r.dropUCMessage()
			}
			r.epsn = psn.Add(1)
			return
		}
		if r.msg != msgNone {
			q.cnt.Inc(verbs.UCDroppedMsgs)
			r.dropUCMessage()
		}
		r.dropMsg = false
	}
	r.epsn = psn.Add(1)
	switch out, f := r.execute(p); {
	case out == failed && f == badRecvWR:
		// A receive WR the QP cannot write into is an error of the QP
		// whatever its transport (class A, as rxe treats it).
		q.cnt.Inc(f.counter)
		r.failRecv(f.status)
	case out != executed:
		q.cnt.Inc(verbs.UCDroppedMsgs)
		r.dropUCMessage()
	}
}

// failRecv completes the receive WR a failed request had taken, if any,
// with status, and moves the QP to ERR.
func (r *responder) failRecv(status verbs.WCStatus) {
	q := r.q
	if r.haveRWQE {
		r.haveRWQE = false
		q.pushRecvWC(&verbs.WC{ID: r.rwqe.id, Status: status, Opcode: verbs.WCRecv, QPN: q.num})
	}
	q.toError(status)
}

// dropUCMessage abandons a UC message; a receive WR it had taken is kept for
// the next message, as rxe does (class D1).
func (r *responder) dropUCMessage() {
	r.releaseMessage()
	r.msg = msgNone
	r.dropMsg = true
	r.roff = 0
}

// execute runs a new, in-sequence request packet of an RC or UC QP.
func (r *responder) execute(p *wire.Packet) (outcome, failure) {
	q := r.q
	op := p.OpCode()
	// The opcode must continue the message in progress, or start one.
	switch r.msg {
	case msgSend:
		if !op.IsSend() || op.IsFirst() || op.IsOnly() {
			return failed, invalidRequest
		}
	case msgWrite:
		if !op.IsWrite() || op.IsFirst() || op.IsOnly() {
			return failed, invalidRequest
		}
	default:
		if op.IsMiddle() || op.IsLast() {
			return failed, invalidRequest
		}
	}
	// The QP must grant the operation (rxe: unsupported opcode, a NAK
	// invalid request).
	acc := q.attr.AccessFlags
	switch {
	case op.IsReadRequest() && acc&mr.RemoteRead == 0,
		(op.IsWrite() || op == wire.OpRCAtomicWrite) && acc&mr.RemoteWrite == 0,
		op.IsAtomic() && acc&mr.RemoteAtomic == 0,
		op == wire.OpRCFlush:
		return failed, invalidRequest
	}
	// Payload sizes against the path MTU (IBTA C9-85/86).
	n := uint32(len(p.Payload))
	switch {
	case op.IsOnly() && n > q.mtu, (op.IsFirst() || op.IsMiddle()) && n != q.mtu,
		op.IsLast() && (n == 0 || n > q.mtu):
		return failed, lengthError
	}
	switch {
	case op.IsSend():
		return r.placeSend(p)
	case op.IsWrite():
		return r.placeWrite(p)
	case op.IsReadRequest():
		return r.executeRead(p)
	case op.IsAtomic():
		return r.executeAtomic(p)
	case op == wire.OpRCAtomicWrite:
		return r.executeAtomicWrite(p)
	}
	return failed, invalidRequest
}

// takeRecvWR pops the next receive WR (from the SRQ if the QP has one) and
// resolves its SGL for local write. A WR kept from a dropped UC message is
// used again, from its start, instead.
func (r *responder) takeRecvWR() (outcome, failure) {
	q := r.q
	if !r.haveRWQE {
		ok := false
		if q.cfg.SRQ != nil {
			ok = q.cfg.SRQ.pop(&r.rwqe)
		} else {
			ok = q.rq.pop(&r.rwqe)
		}
		if !ok {
			return noRecvWR, failure{}
		}
	}
	r.haveRWQE, r.roff, r.rcap = true, 0, 0
	for i := range r.rwqe.sgl {
		sge := &r.rwqe.sgl[i]
		s, err := q.cfg.Memory.Local(sge.LKey, sge.Addr, uint64(sge.Length), mr.LocalWrite, q.cfg.PD)
		if err != nil {
			r.releaseMessage()
			return failed, badRecvWR
		}
		r.rspans = append(r.rspans, s)
		r.rcap += s.Len()
	}
	return executed, failure{}
}

// placeSend copies a SEND packet's payload into the receive WR, taking one
// at the message's first packet, and completes it at the last.
func (r *responder) placeSend(p *wire.Packet) (outcome, failure) {
	q := r.q
	op := p.OpCode()
	if op.IsFirst() || op.IsOnly() {
		if out, f := r.takeRecvWR(); out != executed {
			return out, f
		}
	}
	if r.roff+uint64(len(p.Payload)) > r.rcap {
		return failed, lengthError
	}
	copySpans(r.rspans, r.roff, p.Payload, true)
	r.roff += uint64(len(p.Payload))
	if op.IsFirst() {
		r.msg = msgSend
	}
	if !op.IsLast() && !op.IsOnly() {
		return executed, failure{}
	}
	wc := verbs.WC{ID: r.rwqe.id, Opcode: verbs.WCRecv, QPN: q.num, ByteLen: uint32(r.roff), Flags: solicited(p)}
	if p.ImmDT != nil {
		wc.Flags |= verbs.WCWithImm
		wc.Imm = p.ImmDT.Imm()
	}
	if p.IETH != nil {
		rkey := p.IETH.RKey()
		if err := q.cfg.Memory.Invalidate(rkey, r.peer(p)); err != nil {
			return failed, invalidRequest
		}
		wc.Flags |= verbs.WCWithInv
		wc.InvalidatedRKey = rkey
	}
	r.finishRecv(&wc)
	return executed, failure{}
}

// finishRecv completes the receive WR of a finished message.
func (r *responder) finishRecv(wc *verbs.WC) {
	r.releaseMessage()
	r.haveRWQE = false
	r.msg = msgNone
	r.msn++
	r.q.pushRecvWC(wc)
}

// solicited is WCSolicited if p, the last packet of a message, asks for a
// solicited event (the BTH's SE bit), else 0.
func solicited(p *wire.Packet) verbs.WCFlags {
	if p.BTH.SE() {
		return verbs.WCSolicited
	}
	return 0
}

// peer returns who asks for the memory a request p touches: the QP, its
// protection domain and the packet's P_Key.
func (r *responder) peer(p *wire.Packet) mr.Requester {
	q := r.q
	return mr.Requester{PD: q.cfg.PD, QPN: q.num, PKey: p.BTH.PKey()}
}

// placeWrite writes an RDMA WRITE packet's payload; the first packet's RETH
// is checked for the whole message.
func (r *responder) placeWrite(p *wire.Packet) (outcome, failure) {
	q := r.q
	op := p.OpCode()
	n := uint64(len(p.Payload))
	if op.IsFirst() || op.IsOnly() {
		va, rkey, length := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
		switch {
		case length > MaxMessageSize,
			op.IsOnly() && n != length,
			op.IsFirst() && length <= uint64(q.mtu):
			return failed, lengthError
		}
		r.woff, r.wlen = 0, length
		if length > 0 { // a zero-length WRITE needs no valid rkey (IBTA 9.4.1.1)
			s, out, f := r.remoteAccess(p, rkey, va, length, mr.RemoteWrite)
			if out != executed {
				return out, f
			}
			r.wspan, r.whave = s, true
		}
	}
	end := r.woff + n
	if end > r.wlen || ((op.IsLast() || op.IsOnly()) && end != r.wlen) {
		return failed, lengthError
	}
	if p.ImmDT != nil && !r.haveRWQE {
		// WRITE with immediate consumes a receive WR at its last packet;
		// without one, RNR before any byte of this packet is placed.
		if out, f := r.takeRecvWR(); out != executed {
			if op.IsOnly() {
				r.releaseMessage() // the retry resolves the rkey again
			}
			return out, f
		}
	}
	if n > 0 {
		r.wspan.WriteAt(p.Payload, r.woff)
	}
	r.woff = end
	if op.IsFirst() {
		r.msg = msgWrite
	}
	if !op.IsLast() && !op.IsOnly() {
		return executed, failure{}
	}
	if p.ImmDT != nil {
		r.finishRecv(&verbs.WC{ID: r.rwqe.id, Opcode: verbs.WCRecvWriteImm, QPN: q.num, ByteLen: uint32(r.wlen),
			Flags: verbs.WCWithImm | solicited(p), Imm: p.ImmDT.Imm()})
		return executed, failure{}
	}
	r.releaseMessage()
	r.msg = msgNone
	r.msn++
	return executed, failure{}
}

// rdAtomicFull reports that the requester already has max_dest_rd_atomic
// READ/ATOMIC requests waiting for their responses (IBTA: NAK invalid
// request; rxe recycles the oldest resource instead).
func (r *responder) rdAtomicFull() bool {
	return r.rdPending >= int(r.q.attr.MaxDestRdAtomic)
}

func (r *responder) newResource(e resource) {
	r.res[r.resNext] = e
	r.resNext = (r.resNext + 1) % len(r.res)
}

// findResource returns the remembered READ/ATOMIC whose PSNs hold psn.
func (r *responder) findResource(psn wire.PSN) *resource {
	for i := range r.res {
		e := &r.res[i]
		if e.kind != 0 && !psn.Before(e.first) && !psn.After(e.last) {
			return e
		}
	}
	return nil
}

func (r *responder) executeRead(p *wire.Packet) (outcome, failure) {
	q := r.q
	if r.rdAtomicFull() {
		return failed, invalidRequest
	}
	va, rkey, length := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
	if length > MaxMessageSize {
		return failed, lengthError
	}
	var span mr.Span
	if length > 0 {
		s, out, f := r.remoteAccess(p, rkey, va, length, mr.RemoteRead)
		if out != executed {
			return out, f
		}
		span = s
	}
	npkts := max(1, uint32((length+uint64(q.mtu)-1)/uint64(q.mtu)))
	psn := p.BTH.PSN()
	last := psn.Add(npkts - 1)
	r.msn++ // a READ counts as completed when it is accepted (C9-148), as in rxe
	r.pace.Progress()
	r.newResource(resource{kind: respRead, first: psn, last: last, rkey: rkey, va: va, length: length})
	r.push(response{kind: respRead, psn: psn, first: psn, last: last, span: span, remain: length, msn: r.msn, fresh: true})
	r.epsn = last.Add(1)
	return executed, failure{}
}

func (r *responder) executeAtomic(p *wire.Packet) (outcome, failure) {
	if r.rdAtomicFull() {
		return failed, invalidRequest
	}
	a := p.AtomicETH
	if a.VA()%8 != 0 {
		return failed, misaligned
	}
	s, out, f := r.remoteAccess(p, a.RKey(), a.VA(), 8, mr.RemoteAtomic)
	if out != executed {
		return out, f
	}
	var orig uint64
	if p.OpCode() == wire.OpRCCompareSwap {
		orig = s.CompareSwap(a.Compare(), a.SwapAdd())
	} else {
		orig = s.FetchAdd(a.SwapAdd())
	}
	s.Release()
	psn := p.BTH.PSN()
	r.msn++
	r.newResource(resource{kind: respAtomic, first: psn, last: psn, orig: orig})
	r.push(response{kind: respAtomic, psn: psn, orig: orig, msn: r.msn, fresh: true})
	return executed, failure{}
}

func (r *responder) executeAtomicWrite(p *wire.Packet) (outcome, failure) {
	if r.rdAtomicFull() {
		return failed, invalidRequest
	}
	if p.RETH.DMALen() != 8 || len(p.Payload) != 8 {
		return failed, lengthError
	}
	if p.RETH.VA()%8 != 0 {
		return failed, misaligned
	}
	s, out, f := r.remoteAccess(p, p.RETH.RKey(), p.RETH.VA(), 8, mr.RemoteWrite)
	if out != executed {
		return out, f
	}
	if !s.IsWord() {
		// An aligned address on memory that is not (a zero-based or iov
		// region): refused like any other R_Key check.
		s.Release()
		r.refused()
		return failed, accessError
	}
	s.Store(binary.NativeEndian.Uint64(p.Payload))
	s.Release()
	psn := p.BTH.PSN()
	r.msn++
	r.newResource(resource{kind: respAtomicWrite, first: psn, last: psn})
	r.push(response{kind: respAtomicWrite, psn: psn, msn: r.msn, fresh: true})
	return executed, failure{}
}

// duplicate answers a request whose PSN was already executed: SEND and
// WRITE are acknowledged again (C9-105), READ is replayed from the PSN asked
// for with its rkey checked again (unless its responses from that PSN on
// are still queued), ATOMIC gets its saved result: nothing executes twice.
func (r *responder) duplicate(p *wire.Packet, psn wire.PSN, now Time) {
	q := r.q
	op := p.OpCode()
	switch {
	case op.IsSend() || op.IsWrite():
		r.queueAck(r.epsn.Add(wire.PSNMask), q.cnt)
	case op.IsReadRequest():
		res := r.findResource(psn)
		if res == nil || res.kind != respRead {
			return // forgotten (resources are recycled): drop, as rxe does
		}
		off := uint64(psn.Sub(res.first)) * uint64(q.mtu)
		va, length := p.RETH.VA(), uint64(p.RETH.DMALen())
		if p.RETH.RKey() != res.rkey || va != res.va+off || off+length != res.length {
			return // not a retry of the same READ
		}
		if e := r.queuedRead(res.first); e != nil && !psn.Before(e.psn) {
			// None of the responses asked for has left yet: a go-back-N
			// asks again for every READ after a lost response, and a
			// requester that timed out while this side was slow asks
			// again for what is still queued. They leave as queued, and
			// the request says nothing of loss to the pacer, which would
			// otherwise cut its window once a round for as long as the
			// go-back-N lasts.
			return
		}
		var span mr.Span
		if length > 0 {
			s, out, f := r.remoteAccess(p, res.rkey, va, length, mr.RemoteRead)
			switch out {
			case held:
				return
			case failed:
				q.cnt.Inc(f.counter)
				r.queueNak(wire.NakSyndrome(f.code), psn)
				q.toError(f.status)
				return
			}
			span = s
		}
		r.pace.Lost(time.Duration(now), psn)
		if e := r.queuedRead(res.first); e != nil {
			// Still sending this READ: restart it at the PSN asked for.
			e.span.Release()
			e.psn, e.span, e.off, e.remain = psn, span, 0, length
			return
		}
		r.push(response{kind: respRead, psn: psn, first: res.first, last: res.last, span: span, remain: length, msn: r.msn})
	case op.IsAtomic() || op == wire.OpRCAtomicWrite:
		res := r.findResource(psn)
		if res == nil || res.first != psn || res.kind == respRead {
			return
		}
		r.push(response{kind: res.kind, psn: psn, orig: res.orig, msn: r.msn})
	}
}

// timer returns when the pacer lets the next READ response go, if one
// waits at the head of the queue.
func (r *responder) timer() (Time, bool) {
	if r.outCount > 0 && r.out[r.outHead].kind == respRead {
		at, ok := r.pace.Next()
		return Time(at), ok
	}
	return 0, false
}

// queuedRead returns the queued READ response of the READ starting at first.
func (r *responder) queuedRead(first wire.PSN) *response {
	for i := 0; i < r.outCount; i++ {
		if e := &r.out[(r.outHead+i)%len(r.out)]; e.kind == respRead && e.first == first {
			return e
		}
	}
	return nil
}

// next encodes the next queued response into buf, unless it is a
// READ response the pacer holds back at now.
func (r *responder) next(buf []byte, now Time) int {
	q := r.q
	if r.outCount == 0 {
		return 0
	}
	e := &r.out[r.outHead]
	if e.kind == respRead {
		if !r.pace.Allow(time.Duration(now)) {
			return 0
		}
		r.pace.SentAt(time.Duration(now), e.psn)
	}
	f := &q.fields
	*f = wire.Fields{}
	f.BTH.PKey, f.BTH.DestQP, f.BTH.PSN = q.attr.PKey, q.attr.DestQPN, e.psn
	f.AETH = wire.AETHFields{Syndrome: e.syndrome, MSN: e.msn}
	payload := 0
	done := true
	switch e.kind {
	case respAck, respNak:
		f.BTH.OpCode = wire.OpRCAck
	case respAtomic:
		f.BTH.OpCode = wire.OpRCAtomicAck
		f.AETH.Syndrome = wire.ACKSyndrome(31)
		f.AtomicAckETH = wire.AtomicAckETHFields{OrigData: e.orig}
	case respAtomicWrite:
		f.BTH.OpCode = wire.OpRCReadResponseOnly
		f.AETH.Syndrome = wire.ACKSyndrome(31)
	case respRead:
		f.AETH.Syndrome = wire.ACKSyndrome(31)
		payload = int(min(uint64(q.mtu), e.remain))
		switch {
		case e.first == e.last:
			f.BTH.OpCode = wire.OpRCReadResponseOnly
		case e.psn == e.first:
			f.BTH.OpCode = wire.OpRCReadResponseFirst
		case e.psn == e.last:
			f.BTH.OpCode = wire.OpRCReadResponseLast
		default:
			f.BTH.OpCode = wire.OpRCReadResponseMiddle
		}
		done = e.psn == e.last
	}
	hdr, err := f.EncodeHeaders(buf, payload)
	if err != nil {
		q.cnt.Inc(verbs.SendErr)
		r.pop()
		return 0
	}
	if payload > 0 {
		e.span.ReadAt(buf[hdr:hdr+payload], e.off)
		e.off += uint64(payload)
		e.remain -= uint64(payload)
	}
	e.psn = e.psn.Add(1)
	if done {
		r.pop()
	}
	return f.Len(payload)
}

func (r *responder) pop() {
	e := &r.out[r.outHead]
	if e.kind == respRead {
		e.span.Release()
	}
	if e.fresh {
		r.rdPending--
	}
	*e = response{}
	r.outHead = (r.outHead + 1) % len(r.out)
	r.outCount--
}

// receiveDatagram delivers a UD SEND into the next receive WR, behind the
// GRH-sized header every UD receive buffer starts with.
func (r *responder) receiveDatagram(p *wire.Packet, env *wire.Envelope) {
	q := r.q
	if p.DETH.QKey() != q.attr.QKey {
		q.cnt.Inc(verbs.BadQKey)
		return
	}
	out, f := r.takeRecvWR()
	switch out {
	case noRecvWR:
		q.cnt.Inc(verbs.UDDropped)
		return
	case failed:
		q.cnt.Inc(f.counter)
		r.failRecv(f.status)
		return
	}
	wc := verbs.WC{ID: r.rwqe.id, Opcode: verbs.WCRecv, QPN: q.num, Flags: verbs.WCGRH | solicited(p), SrcQPN: p.DETH.SrcQP(), Src: env.Src}
	if wire.GRHSize+uint64(len(p.Payload)) > r.rcap {
		wc.Status = verbs.LocLenErr
	} else {
		var grh [wire.GRHSize]byte
		env.PutGRH(grh[:], len(p.Raw))
		copySpans(r.rspans, 0, grh[:], true)
		copySpans(r.rspans, wire.GRHSize, p.Payload, true)
		wc.ByteLen = wire.GRHSize + uint32(len(p.Payload))
		if p.ImmDT != nil {
			wc.Flags |= verbs.WCWithImm
			wc.Imm = p.ImmDT.Imm()
		}
	}
	r.releaseMessage()
	r.haveRWQE = false
	if wc.Status == verbs.Success {
		q.traffic.RcvdMsgs++
	}
	q.pushRecvWC(&wc)
}
