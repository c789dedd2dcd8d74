package qp

import (
	"encoding/binary"

	"github.com/softnic/softnic/wire"
)

// completer is the half of an RC requester that listens: ACKs, NAKs and
// responses complete WQEs in order, and losses send the requester back.
type completer struct {
	psn       wire.PSN // oldest request PSN not yet acknowledged
	retryLeft uint8    // retries left before RETRY_EXC_ERR
	rnrLeft   uint8    // RNR retries left (rnr_retry 7: forever)
	armed     bool     // the local ACK timer runs
	deadline  Time
	// retrying is set while a go-back-N retry is under way: further NAKs or
	// gaps caused by the same loss do not start another one.
	retrying bool
}

// armTimer (re)starts the local ACK timer, if the QP has one.
func (q *QP) armTimer(now Time) {
	if d := ackTimeout(q.attr.Timeout); d > 0 {
		q.comp.armed, q.comp.deadline = true, now.Add(d)
	}
}

// receiveResponse handles an ACK, NAK, READ response or ATOMIC ACK.
func (q *QP) receiveResponse(p *wire.Packet, now Time) {
	psn := p.BTH.PSN()
	if !psn.Before(q.req.maxPSN) {
		// A response to a PSN never sent; rxe drops these too.
		q.cnt.inc(GhostAck)
		return
	}
	switch op := p.OpCode(); {
	case op == wire.OpRCAck:
		syn := p.AETH.Syndrome()
		switch syn.Type() {
		case wire.AckTypeACK:
			q.ackThrough(psn, now)
		case wire.AckTypeRNRNak:
			q.rnrNak(psn, syn.RNRTimer(), now)
		case wire.AckTypeNak:
			q.nak(psn, syn.NakCode(), now)
		default:
			q.cnt.inc(GhostAck)
		}
	case op.IsReadResponse():
		q.readResponse(p, psn, now)
	case op == wire.OpRCAtomicAck:
		q.atomicAck(p, psn, now)
	}
	q.completeInOrder()
}

// ackThrough handles an acknowledgement of every request packet up to and
// including psn. It reports whether it made progress.
func (q *QP) ackThrough(psn wire.PSN, now Time) bool {
	progress := uint32(0)
	for i, end := q.sq.head, q.startedEnd(); i != end; i++ {
		w := q.sq.at(i)
		if w.state != wqePending {
			continue // done, failed or flushed: completeInOrder handles it
		}
		if psn.Before(w.firstPSN) {
			break
		}
		if w.lastPSN.After(psn) {
			// Part of a multi-packet SEND or WRITE is acknowledged.
			if !w.wr.Opcode.isReadOrAtomic() && !psn.Before(q.comp.psn) {
				progress += uint32(psn.Add(1).Sub(q.comp.psn))
				q.comp.psn = psn.Add(1)
			}
			break
		}
		if w.wr.Opcode.isReadOrAtomic() {
			// An ACK passed a READ or ATOMIC whose response never came: an
			// implied NAK (IBTA 9.7.5.1.5). Its response was lost; go back.
			if progress > 0 {
				q.onProgress(progress, now)
			}
			q.retry(now, false)
			return progress > 0
		}
		if w.lastPSN.Add(1).After(q.comp.psn) {
			progress += uint32(w.lastPSN.Add(1).Sub(q.comp.psn))
			q.comp.psn = w.lastPSN.Add(1)
		}
		w.state = wqeDone
	}
	if progress > 0 {
		q.onProgress(progress, now)
		return true
	}
	if psn.Before(q.comp.psn.Add(wire.PSNMask)) {
		q.cnt.inc(DuplicateResponse)
	}
	return false
}

// onProgress is called when n more request PSNs have been acknowledged:
// the retry budget is restored, the timer restarts and the window grows.
func (q *QP) onProgress(n uint32, now Time) {
	q.comp.retryLeft, q.comp.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	q.comp.retrying = false
	if q.comp.psn == q.req.psn {
		q.comp.armed = false
	} else {
		q.armTimer(now)
	}
	q.req.cc.onAck(n)
}

// retry starts a go-back-N retransmission from the oldest unacknowledged
// PSN, or fails the oldest WQE with RETRY_EXC_ERR when retries are spent.
// A retry caused by a NAK or a gap is not repeated for the same loss; a
// timeout always retries.
func (q *QP) retry(now Time, timeout bool) {
	w := q.oldestPending()
	if w == nil {
		q.comp.armed = false
		return
	}
	if q.comp.retrying && !timeout {
		return
	}
	if q.comp.retryLeft == 0 {
		q.cnt.inc(RetryExceededErr)
		q.fail(w, RetryExcErr)
		return
	}
	if q.attr.RetryCnt != 7 {
		q.comp.retryLeft--
	}
	q.cnt.inc(CompleterRetryErr)
	q.comp.retrying = true
	q.req.cc.onLoss(timeout)
	q.goBack()
	q.armTimer(now)
}

// goBack rewinds the requester to the oldest unacknowledged PSN, in the
// middle of a message if need be: a SEND or WRITE restarts with the packet
// at that PSN, a READ is asked again for the bytes not yet received.
func (q *QP) goBack() {
	q.req.psn = q.comp.psn
	q.req.sinceAck = 0
	q.req.pkt = 0
	for i, end := q.sq.head, q.startedEnd(); i != end; i++ {
		w := q.sq.at(i)
		if w.state != wqePending {
			continue
		}
		q.sq.next = i
		if d := q.comp.psn.Sub(w.firstPSN); d > 0 {
			q.req.pkt = uint32(d)
		}
		return
	}
}

// startedEnd returns one past the newest WQE the requester has started:
// the WQE at sq.next counts once its first packet is out.
func (q *QP) startedEnd() uint32 {
	if q.sq.next != q.sq.tail && q.sq.at(q.sq.next).state == wqePending {
		return q.sq.next + 1
	}
	return q.sq.next
}

// oldestPending returns the oldest WQE still waiting for its response.
func (q *QP) oldestPending() *sendWQE {
	for i, end := q.sq.head, q.startedEnd(); i != end; i++ {
		if w := q.sq.at(i); w.state == wqePending {
			return w
		}
	}
	return nil
}

// pendingAt returns the started WQE whose PSN range holds psn.
func (q *QP) pendingAt(psn wire.PSN) *sendWQE {
	for i, end := q.sq.head, q.startedEnd(); i != end; i++ {
		w := q.sq.at(i)
		if w.state == wqePending && !psn.Before(w.firstPSN) && !psn.After(w.lastPSN) {
			return w
		}
	}
	return nil
}

// rnrNak: the responder had no receive WR for the request at psn. Wait the
// timer the NAK names, then resend from psn; rnr_retry bounds how often.
func (q *QP) rnrNak(psn wire.PSN, timer uint8, now Time) {
	q.cnt.inc(RcvdRNRErr)
	if psn.After(q.comp.psn) {
		q.ackThrough(psn.Add(wire.PSNMask), now)
	}
	w := q.pendingAt(psn)
	if w == nil || psn != q.comp.psn {
		return // stale: about a PSN already dealt with
	}
	if q.comp.rnrLeft == 0 {
		q.cnt.inc(RetryRNRExceededErr)
		q.fail(w, RNRRetryExcErr)
		return
	}
	if q.attr.RNRRetry != 7 {
		q.comp.rnrLeft--
	}
	q.req.rnrWait, q.req.rnrUntil, q.req.rnrPSN = true, now.Add(wire.RNRTimeout(timer)), psn
	q.comp.armed = false
	q.comp.retrying = false
	q.goBack()
}

// nak handles a NAK for the request at psn; the NAK acknowledges every
// packet before it.
func (q *QP) nak(psn wire.PSN, code wire.NakCode, now Time) {
	if psn.After(q.comp.psn) {
		q.ackThrough(psn.Add(wire.PSNMask), now)
	}
	if code == wire.NakPSNSequenceError {
		q.cnt.inc(RcvdSeqErr)
		if q.req.rnrWait && psn == q.req.rnrPSN {
			return // the responder NAKs what followed the RNR-NAKed packet; the RNR wait covers it
		}
		if psn == q.comp.psn {
			q.retry(now, false)
		}
		return
	}
	w := q.pendingAt(psn)
	if w == nil || w != q.oldestPending() {
		// Stale, or an earlier READ/ATOMIC is being retried first: the
		// responder will NAK this request again when it comes round.
		return
	}
	status := RemOpErr
	switch code {
	case wire.NakInvalidRequest:
		status = RemInvReqErr
	case wire.NakRemoteAccessError:
		status = RemAccessErr
	case wire.NakInvalidRDRequest:
		status = RemInvRDReqErr
	}
	q.fail(w, status)
}

// fail completes w with an error status; the QP then goes to ERR and the
// WQEs after it are flushed.
func (q *QP) fail(w *sendWQE, status WCStatus) {
	w.state, w.status = wqeError, status
	q.req.halted = true
	q.comp.armed = false
	q.completeInOrder()
}

// readResponse places a READ response's payload; responses come in PSN
// order, and a gap means some were lost.
func (q *QP) readResponse(p *wire.Packet, psn wire.PSN, now Time) {
	w := q.pendingAt(psn)
	if w == nil || (w.wr.Opcode != WRRead && w.wr.Opcode != WRAtomicWrite) {
		q.cnt.inc(DuplicateResponse)
		return
	}
	if p.AETH != nil && p.AETH.Syndrome().Type() != wire.AckTypeACK {
		q.cnt.inc(GhostAck)
		return
	}
	if w.firstPSN.After(q.comp.psn) {
		// The response acknowledges everything before its READ.
		q.ackThrough(w.firstPSN.Add(wire.PSNMask), now)
	}
	if psn != q.comp.psn {
		if psn.After(q.comp.psn) {
			q.retry(now, false) // responses before this one were lost
		} else {
			q.cnt.inc(DuplicateResponse)
		}
		return
	}
	idx := uint32(psn.Sub(w.firstPSN))
	off := uint64(idx) * uint64(q.mtu)
	isLast := psn == w.lastPSN
	n := uint64(len(p.Payload))
	want := min(uint64(q.mtu), uint64(w.length)-off)
	if w.wr.Opcode == WRAtomicWrite {
		want = 0
	}
	if n != want {
		// A response of the wrong size: rxe completes the READ with an
		// error; softnic does the same rather than place bad data.
		q.fail(w, BadRespErr)
		return
	}
	if n > 0 {
		w.scatter(p.Payload, off)
	}
	q.comp.psn = psn.Add(1)
	if isLast {
		w.state = wqeDone
	}
	q.onProgress(1, now)
}

// atomicAck stores an ATOMIC's original value and completes it.
func (q *QP) atomicAck(p *wire.Packet, psn wire.PSN, now Time) {
	w := q.pendingAt(psn)
	if w == nil || !w.wr.Opcode.isAtomic() {
		q.cnt.inc(DuplicateResponse)
		return
	}
	if p.AETH.Syndrome().Type() != wire.AckTypeACK {
		q.cnt.inc(GhostAck)
		return
	}
	if psn.After(q.comp.psn) {
		q.ackThrough(psn.Add(wire.PSNMask), now)
	}
	if psn != q.comp.psn {
		return
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH.OrigData())
	w.scatter(orig[:], 0)
	q.comp.psn = psn.Add(1)
	w.state = wqeDone
	q.onProgress(1, now)
}

// completeInOrder completes the WQEs at the head of the send queue that
// are finished, in posting order, as the IBTA requires of one QP.
func (q *QP) completeInOrder() {
	for q.sq.head != q.sq.tail {
		w := q.sq.at(q.sq.head)
		status := Success
		switch w.state {
		case wqeDone:
		case wqeError:
			status = w.status
		case wqeFlushed:
			status = WRFlushErr
		default:
			return
		}
		if q.sq.next == q.sq.head {
			// Finished before the requester got back to it: a late
			// response overtook a go-back-N.
			q.passOver(w)
		}
		if w.wr.Opcode.isReadOrAtomic() && w.npkts > 0 {
			q.req.rdAtomic--
		}
		q.countCompletion(w.wr.Opcode, status)
		if status != Success || q.cfg.SignalAll || w.wr.Flags&Signaled != 0 {
			wc := WC{ID: w.wr.ID, Status: status, Opcode: wcOpcodeOf(w.wr.Opcode), QPN: q.num, ByteLen: w.length}
			if w.wr.Opcode == WRWriteImm || w.wr.Opcode == WRSendImm {
				wc.Flags = WCWithImm
			}
			q.pushSendWC(&wc)
		}
		w.release()
		w.state = wqePosted
		q.sq.head++
		if status != Success && status != WRFlushErr {
			q.toError(status)
		}
	}
}

// countCompletion counts a send WR of opcode op completed with status: in
// the QP's traffic if it succeeded, and as rxe's rdma_sends if it is a
// SEND that was not flushed (rxe counts those its completer finishes).
func (q *QP) countCompletion(op WROpcode, status WCStatus) {
	if status == Success {
		q.traffic.SentMsgs++
	}
	if status != WRFlushErr && (op == WRSend || op == WRSendImm || op == WRSendInv) {
		q.cnt.inc(RdmaSends)
	}
}

// passOver moves the requester past w, the WQE at sq.next, which needs no
// (more) sending: its PSNs, if it has any, are not used again.
func (q *QP) passOver(w *sendWQE) {
	if w.npkts > 0 && w.lastPSN.Add(1).After(q.req.psn) {
		q.req.psn = w.lastPSN.Add(1)
	}
	q.sq.next++
	q.req.pkt = 0
}

// catchUp moves the requester forward when acknowledgements overtake a
// go-back-N (a late ACK or response for packets it was about to resend):
// what the responder has acknowledged is not sent again.
func (q *QP) catchUp() {
	for q.req.psn.Before(q.comp.psn) && q.sq.next != q.sq.tail {
		w := q.sq.at(q.sq.next)
		switch w.state {
		case wqeDone, wqeError, wqeFlushed:
			q.passOver(w)
		case wqePending:
			if !q.comp.psn.After(w.lastPSN) {
				q.req.pkt = uint32(q.comp.psn.Sub(w.firstPSN))
				q.req.psn = q.comp.psn
			}
			return
		default:
			return
		}
	}
}
