package qp

import (
	"encoding/binary"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// requester is the sending half of a QP: it turns send WQEs into request
// packets, PSN by PSN, as far as the congestion window (QP.cc) lets it.
// It owns the send PSNs, its place in the send queue, the READs and
// atomics in flight and the RNR wait. The completer, which hears what
// came back, sends it back (goBack, waitRNR) or stops it (stop); nothing
// else moves it.
type requester struct {
	q        *QP
	psn      wire.PSN // PSN of the next request packet
	maxPSN   wire.PSN // one past the newest PSN ever sent: responses beyond it are ghosts
	pkt      uint32   // next packet of the WQE at sq.next (on a resend, where it restarts)
	sinceAck int      // packets sent since the last one with AckReq
	rdAtomic int      // READ/ATOMIC WQEs started and not completed
	halted   bool     // a WQE failed (or the QP is in ERR): nothing more is sent
	full     bool     // the window filled up: READ requests wait for room (fits)
	rnrWait  bool     // waiting out an RNR NAK's timer
	rnrUntil Time
	rnrPSN   wire.PSN
}

// begin readies the requester for RTR→RTS: its first request has PSN psn.
func (r *requester) begin(psn wire.PSN) { r.psn, r.maxPSN = psn, psn }

// stop ends sending: a WQE failed, or the QP is in the error state.
func (r *requester) stop() { r.halted, r.rnrWait = true, false }

// waitRNR waits until until before it resends from psn, the request an RNR
// NAK refused.
func (r *requester) waitRNR(until Time, psn wire.PSN) {
	r.rnrWait, r.rnrUntil, r.rnrPSN = true, until, psn
	r.goBack(psn)
}

// waitsRNR reports whether the requester waits out an RNR NAK of psn.
func (r *requester) waitsRNR(psn wire.PSN) bool { return r.rnrWait && psn == r.rnrPSN }

// timer returns when the RNR wait ends, if one runs.
func (r *requester) timer() (Time, bool) { return r.rnrUntil, r.rnrWait }

// tick ends an RNR wait that is over at now.
func (r *requester) tick(now Time) {
	if r.rnrWait && now >= r.rnrUntil {
		r.rnrWait = false
	}
}

// retire forgets w, which completes: a WQE finished before the requester
// got back to it (a late response overtook a go-back-N) is passed over,
// and a READ or atomic no longer counts against max_rd_atomic.
func (r *requester) retire(w *sendWQE) {
	if r.q.sq.next == r.q.sq.head {
		r.passOver(w)
	}
	if w.wr.Opcode.IsReadOrAtomic() && w.npkts > 0 {
		r.rdAtomic--
	}
}

// next encodes the next request packet into buf.
func (r *requester) next(buf []byte, now Time) (int, Route) {
	q := r.q
	r.catchUp(q.comp.psn)
	for !r.halted && !r.rnrWait && q.sq.next != q.sq.tail {
		w := q.sq.at(q.sq.next)
		switch w.state {
		case wqeDone, wqeError, wqeFlushed:
			// Finished already: a local operation met again by go-back-N,
			// or a WQE whose response overtook the go-back-N.
			r.passOver(w)
			continue
		case wqePosted:
			if !r.start(w) {
				return 0, Route{}
			}
			if w.state != wqePending {
				q.sq.next++
				q.comp.completeInOrder()
				continue
			}
		}
		if q.cfg.Type == verbs.RC && !r.fits(w) {
			return 0, Route{}
		}
		return r.encode(w, buf, now)
	}
	return 0, Route{}
}

// fits reports whether the congestion window lets w's next packet leave.
// Once the window has filled up, a READ request waits until it has room
// for an ACK's worth of PSNs (ackEvery), and then READ requests leave
// until it is full again: READ responses open the window one PSN at a
// time, and a request sent as soon as it fits would leave in a send of
// its own every few responses, where a WRITE's window opens by an ACK's
// worth at a time and its packets leave together.
func (r *requester) fits(w *sendWQE) bool {
	cc, inFlight := &r.q.cc, r.psn.Sub(r.q.comp.psn)
	if !cc.MaySend(inFlight) {
		r.full = true
		return false
	}
	if r.full && w.wr.Opcode == verbs.WRRead {
		r.full = !cc.MaySend(inFlight + int32(cc.AckEvery()) - 1)
		return !r.full
	}
	return true
}

// start begins a posted WQE: it checks the ordering rules, executes
// local operations, resolves the SGL and assigns PSNs. It reports false
// when the WQE has to wait.
func (r *requester) start(w *sendWQE) bool {
	q := r.q
	op := w.wr.Opcode
	switch {
	case q.attr.State == verbs.SQD:
		return false // draining: finish what was started, start nothing new
	case w.wr.Flags&verbs.Fence != 0 && r.rdAtomic > 0:
		return false
	case op.IsLocal():
		r.executeLocal(w)
		return true
	case op.IsReadOrAtomic() && r.rdAtomic >= int(q.attr.MaxRdAtomic):
		return false
	}
	if err := w.resolve(q.cfg.Memory, q.cfg.PD); err != nil {
		w.state, w.status = wqeError, verbs.LocProtErr
		r.halted = true
		return true
	}
	w.npkts = 1
	switch {
	case op.IsAtomic() || op == verbs.WRAtomicWrite:
	case w.length > 0:
		w.npkts = (w.length + q.mtu - 1) / q.mtu
	}
	w.firstPSN = r.psn
	w.lastPSN = r.psn.Add(w.npkts - 1)
	w.state = wqePending
	r.pkt = 0
	if op.IsReadOrAtomic() {
		r.rdAtomic++
	}
	return true
}

// executeLocal runs LOCAL_INV and BIND_MW, which need no packet: the WQE is
// done (or failed) at once and completes in order behind earlier WQEs.
func (r *requester) executeLocal(w *sendWQE) {
	q := r.q
	var err error
	who := mr.Requester{PD: q.cfg.PD, QPN: q.num, PKey: q.attr.PKey}
	switch w.wr.Opcode {
	case verbs.WRLocalInv:
		err = q.cfg.Memory.Invalidate(w.wr.InvalidateRKey, who)
		w.status = verbs.LocQPOpErr // rxe's status for a failed local invalidate
	case verbs.WRBindMW:
		err = q.cfg.Memory.BindWindow(w.wr.Bind, who)
		w.status = verbs.MWBindErr
	}
	if err != nil {
		w.state = wqeError
		r.halted = true
		return
	}
	w.state, w.status = wqeDone, verbs.Success
}

// segmentOpcode picks the opcode of packet i of n of a SEND or WRITE and
// says whether it is the message's last.
func segmentOpcode(t verbs.Type, op verbs.WROpcode, i, n uint32) (wire.OpCode, bool) {
	if t == verbs.UD {
		if op == verbs.WRSendImm {
			return wire.OpUDSendOnlyImm, true
		}
		return wire.OpUDSendOnly, true
	}
	base := wire.OpRCSendFirst
	if t == verbs.UC {
		base = wire.OpUCSendFirst
	}
	// Offsets within the RC and UC opcode blocks (IBTA table 38).
	const (
		sendFirst, sendMiddle, sendLast, sendLastImm, sendOnly, sendOnlyImm       = 0, 1, 2, 3, 4, 5
		writeFirst, writeMiddle, writeLast, writeLastImm, writeOnly, writeOnlyImm = 6, 7, 8, 9, 10, 11
	)
	only, last := n == 1, i == n-1
	switch {
	case op.IsWrite() && only && op == verbs.WRWriteImm:
		return base + writeOnlyImm, true
	case op.IsWrite() && only:
		return base + writeOnly, true
	case op.IsWrite() && i == 0:
		return base + writeFirst, false
	case op.IsWrite() && last && op == verbs.WRWriteImm:
		return base + writeLastImm, true
	case op.IsWrite() && last:
		return base + writeLast, true
	case op.IsWrite():
		return base + writeMiddle, false
	case op == verbs.WRSendInv && only:
		return wire.OpRCSendOnlyInv, true
	case op == verbs.WRSendInv && last:
		return wire.OpRCSendLastInv, true
	case only && op == verbs.WRSendImm:
		return base + sendOnlyImm, true
	case only:
		return base + sendOnly, true
	case i == 0:
		return base + sendFirst, false
	case last && op == verbs.WRSendImm:
		return base + sendLastImm, true
	case last:
		return base + sendLast, true
	}
	return base + sendMiddle, false
}

// encode builds packet r.pkt of WQE w into buf and advances the
// requester.
func (r *requester) encode(w *sendWQE, buf []byte, now Time) (int, Route) {
	q := r.q
	op := w.wr.Opcode
	i := r.pkt
	psn := w.firstPSN.Add(i)
	off := uint64(i) * uint64(q.mtu)
	f := &q.fields
	*f = wire.Fields{}
	f.BTH.PKey, f.BTH.DestQP, f.BTH.PSN = q.attr.PKey, q.attr.DestQPN, psn
	dst := q.route()
	payload := 0
	psns := uint32(1)
	last := true
	switch {
	case op == verbs.WRRead:
		// A READ request asks for the rest of the message from packet i on
		// and reserves one PSN per response packet.
		f.BTH.OpCode = wire.OpRCReadRequest
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, DMALen: w.length - uint32(off)}
		psns = w.npkts - i
	case op == verbs.WRCompareSwap:
		f.BTH.OpCode = wire.OpRCCompareSwap
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
	case op == verbs.WRFetchAdd:
		f.BTH.OpCode = wire.OpRCFetchAdd
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	case op == verbs.WRAtomicWrite:
		f.BTH.OpCode = wire.OpRCAtomicWrite
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: 8}
		payload = 8
	default:
		payload = int(min(q.mtu, w.length-uint32(off)))
		f.BTH.OpCode, last = segmentOpcode(q.cfg.Type, op, i, w.npkts)
		if op.IsWrite() && i == 0 {
			f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
		}
		if last {
			f.ImmDT = w.wr.Imm
			f.IETH = w.wr.InvalidateRKey
			f.BTH.SE = w.wr.Flags&verbs.Solicited != 0
		}
		if q.cfg.Type == verbs.UD {
			qkey := w.wr.QKey
			if qkey&0x80000000 != 0 {
				qkey = q.attr.QKey
			}
			f.DETH = wire.DETHFields{QKey: qkey, SrcQP: q.num}
			f.BTH.DestQP = w.wr.DestQPN
			dst = Route{Dst: w.wr.Dest, TrafficClass: w.wr.TrafficClass}
		}
	}
	switch q.cfg.Type {
	case verbs.RC:
		f.BTH.AckReq = last || r.sinceAck+1 >= q.cc.AckEvery()
	case verbs.UD:
		// Nothing acknowledges UC or UD, and rxe asks for nothing there:
		// its UC and UD packets carry no AckReq (ibv_uc_pingpong, udaddy
		// and mckey between the rxe lab's guests), but its GSI QP's MADs
		// do (rping.pcap), and so do QP1's here.
		f.BTH.AckReq = q.num == wire.GSIQPN
	}
	hdr, err := f.EncodeHeaders(buf, payload)
	if err != nil {
		// Only a QP bug can get here; fail the WR rather than send garbage.
		q.cnt.Inc(verbs.SendErr)
		w.state, w.status = wqeError, verbs.LocQPOpErr
		r.halted = true
		return 0, Route{}
	}
	if op == verbs.WRAtomicWrite {
		binary.NativeEndian.PutUint64(buf[hdr:], w.wr.Swap)
	} else if payload > 0 {
		w.gather(buf[hdr:hdr+payload], off)
	}

	if psn.Before(r.maxPSN) {
		q.cnt.Inc(verbs.RetransmittedPkts)
	}
	r.psn = psn.Add(psns)
	if r.psn.After(r.maxPSN) {
		r.maxPSN = r.psn
	}
	if f.BTH.AckReq {
		r.sinceAck = 0
	} else {
		r.sinceAck++
	}
	if last {
		r.pkt = 0
		q.sq.next++
		if q.cfg.Type != verbs.RC {
			w.state = wqeDone // UC and UD complete once sent
			q.comp.completeInOrder()
		}
	} else {
		r.pkt++
	}
	if q.cfg.Type == verbs.RC {
		q.comp.onSend(now)
	}
	return f.Len(payload), dst
}

// goBack rewinds the requester to the oldest unacknowledged PSN, in the
// middle of a message if need be: a SEND or WRITE restarts with the packet
// at that PSN, a READ is asked again for the bytes not yet received.
func (r *requester) goBack(acked wire.PSN) {
	q := r.q
	r.psn = acked
	r.sinceAck = 0
	r.pkt = 0
	for i, end := q.sq.head, q.sq.startedEnd(); i != end; i++ {
		w := q.sq.at(i)
		if w.state != wqePending {
			continue
		}
		q.sq.next = i
		if d := acked.Sub(w.firstPSN); d > 0 {
			r.pkt = uint32(d)
		}
		return
	}
}

// passOver moves the requester past w, the WQE at sq.next, which needs no
// (more) sending: its PSNs, if it has any, are not used again.
func (r *requester) passOver(w *sendWQE) {
	if w.npkts > 0 && w.lastPSN.Add(1).After(r.psn) {
		r.psn = w.lastPSN.Add(1)
	}
	r.q.sq.next++
	r.pkt = 0
}

// catchUp moves the requester forward when acknowledgements overtake a
// go-back-N (a late ACK or response for packets it was about to resend):
// what the responder has acknowledged is not sent again.
func (r *requester) catchUp(acked wire.PSN) {
	q := r.q
	for r.psn.Before(acked) && q.sq.next != q.sq.tail {
		w := q.sq.at(q.sq.next)
		switch w.state {
		case wqeDone, wqeError, wqeFlushed:
			r.passOver(w)
		case wqePending:
			if !acked.After(w.lastPSN) {
				r.pkt = uint32(acked.Sub(w.firstPSN))
				r.psn = acked
			}
			return
		default:
			return
		}
	}
}
