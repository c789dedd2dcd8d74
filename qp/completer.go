package qp

import (
	"encoding/binary"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// completer is the half of an RC requester that listens: ACKs, NAKs and
// responses complete WQEs in order, and losses send the requester back.
// It owns the oldest unacknowledged PSN, the retry budgets and the local
// ACK timer, and it posts the send completions (of UC, UD and local
// operations too, which finish without a response).
type completer struct {
	q         *QP
	psn       wire.PSN // oldest request PSN not yet acknowledged
	retryLeft uint8    // retries left before RETRY_EXC_ERR
	rnrLeft   uint8    // RNR retries left (rnr_retry 7: forever)
	armed     bool     // the local ACK timer runs
	due       Time     // when the ACK timer expires
	// retrying is set while a go-back-N retry is under way: further NAKs or
	// gaps caused by the same loss do not start another one.
	retrying bool
}

// armTimer (re)starts the local ACK timer, if the QP has one.
func (c *completer) armTimer(now Time) {
	if d := ackTimeout(c.q.attr.Timeout); d > 0 {
		c.armed, c.due = true, now.Add(d)
	}
}

// begin readies the completer for RTR→RTS: nothing is outstanding before
// the first PSN, and the retry budgets are full.
func (c *completer) begin(psn wire.PSN) {
	c.psn = psn
	c.retryLeft, c.rnrLeft = c.q.attr.RetryCnt, c.q.attr.RNRRetry
}

// onSend notes that a request went out at now: the ACK timer runs, if it
// was not running already.
func (c *completer) onSend(now Time) {
	if !c.armed {
		c.armTimer(now)
	}
}

// timer returns when the ACK timer expires, if it runs.
func (c *completer) timer() (Time, bool) { return c.due, c.armed }

// tick runs the ACK timer: expired, it starts a retry.
func (c *completer) tick(now Time) {
	if c.armed && now >= c.due {
		c.armed = false
		c.retry(now, true)
	}
}

// receive handles an ACK, NAK, READ response or ATOMIC ACK.
func (c *completer) receive(p *wire.Packet, now Time) {
	q := c.q
	psn := p.BTH.PSN()
	if !psn.Before(q.req.maxPSN) {
		// A response to a PSN never sent; rxe drops these too.
		q.cnt.Inc(verbs.GhostAck)
		return
	}
	switch op := p.OpCode(); {
	case op == wire.OpRCAck:
		syn := p.AETH.Syndrome()
		switch syn.Type() {
		case wire.AckTypeACK:
			c.ackThrough(psn, now)
		case wire.AckTypeRNRNak:
			c.rnrNak(psn, syn.RNRTimer(), now)
		case wire.AckTypeNak:
			c.nak(psn, syn.NakCode(), now)
		default:
			q.cnt.Inc(verbs.GhostAck)
		}
	case op.IsReadResponse():
		c.readResponse(p, psn, now)
	case op == wire.OpRCAtomicAck:
		c.atomicAck(p, psn, now)
	}
	c.completeInOrder()
}

// ackThrough handles an acknowledgement of every request packet up to and
// including psn. It reports whether it made progress.
func (c *completer) ackThrough(psn wire.PSN, now Time) bool {
	q := c.q
	progress := uint32(0)
	for i, end := q.sq.head, q.sq.startedEnd(); i != end; i++ {
		w := q.sq.at(i)
		if w.state != wqePending {
			continue // done, failed or flushed: completeInOrder handles it
		}
		if psn.Before(w.firstPSN) {
			break
		}
		if w.lastPSN.After(psn) {
			// Part of a multi-packet SEND or WRITE is acknowledged.
			if !w.wr.Opcode.IsReadOrAtomic() && !psn.Before(c.psn) {
				progress += uint32(psn.Add(1).Sub(c.psn))
				c.psn = psn.Add(1)
			}
			break
		}
		if w.wr.Opcode.IsReadOrAtomic() {
			// An ACK passed a READ or ATOMIC whose response never came: an
			// implied NAK (IBTA 9.7.5.1.5). Its response was lost; go back.
			if progress > 0 {
				c.onProgress(progress, now)
			}
			c.retry(now, false)
			return progress > 0
		}
		if w.lastPSN.Add(1).After(c.psn) {
			progress += uint32(w.lastPSN.Add(1).Sub(c.psn))
			c.psn = w.lastPSN.Add(1)
		}
		w.state = wqeDone
	}
	if progress > 0 {
		c.onProgress(progress, now)
		return true
	}
	if psn.Before(c.psn.Add(wire.PSNMask)) {
		q.cnt.Inc(verbs.DuplicateResponse)
	}
	return false
}

// onProgress is called when n more request PSNs have been acknowledged:
// the retry budget is restored, the timer restarts and the window grows.
func (c *completer) onProgress(n uint32, now Time) {
	q := c.q
	c.retryLeft, c.rnrLeft = q.attr.RetryCnt, q.attr.RNRRetry
	c.retrying = false
	if c.psn == q.req.psn {
		c.armed = false
	} else {
		c.armTimer(now)
	}
	q.cc.OnAck(n)
	if c.psn.After(q.req.psn) {
		// Acknowledged past what the go-back-N has sent again: the
		// originals arrived, and the timeout that started it was spurious.
		q.cc.Undo()
	}
}

// retry starts a go-back-N retransmission from the oldest unacknowledged
// PSN, or fails the oldest WQE with RETRY_EXC_ERR when retries are spent.
// A retry caused by a NAK or a gap is not repeated for the same loss; a
// timeout always retries.
func (c *completer) retry(now Time, timeout bool) {
	q := c.q
	w := q.sq.oldestPending()
	if w == nil {
		c.armed = false
		return
	}
	if c.retrying && !timeout {
		return
	}
	if c.retryLeft == 0 {
		q.cnt.Inc(verbs.RetryExceededErr)
		c.fail(w, verbs.RetryExcErr)
		return
	}
	if q.attr.RetryCnt != 7 {
		c.retryLeft--
	}
	q.cnt.Inc(verbs.CompleterRetryErr)
	q.cc.OnLoss(timeout, c.retrying)
	c.retrying = true
	q.req.goBack(c.psn)
	c.armTimer(now)
}

// rnrNak: the responder had no receive WR for the request at psn. Wait the
// timer the NAK names, then resend from psn; rnr_retry bounds how often.
func (c *completer) rnrNak(psn wire.PSN, timer uint8, now Time) {
	q := c.q
	q.cnt.Inc(verbs.RcvdRNRErr)
	if psn.After(c.psn) {
		c.ackThrough(psn.Add(wire.PSNMask), now)
	}
	w := q.sq.pendingAt(psn)
	if w == nil || psn != c.psn {
		return // stale: about a PSN already dealt with
	}
	if c.rnrLeft == 0 {
		q.cnt.Inc(verbs.RetryRNRExceededErr)
		c.fail(w, verbs.RNRRetryExcErr)
		return
	}
	if q.attr.RNRRetry != 7 {
		c.rnrLeft--
	}
	c.armed = false
	c.retrying = false
	q.req.waitRNR(now.Add(wire.RNRTimeout(timer)), psn)
}

// nak handles a NAK for the request at psn; the NAK acknowledges every
// packet before it.
func (c *completer) nak(psn wire.PSN, code wire.NakCode, now Time) {
	q := c.q
	if psn.After(c.psn) {
		c.ackThrough(psn.Add(wire.PSNMask), now)
	}
	if code == wire.NakPSNSequenceError {
		q.cnt.Inc(verbs.RcvdSeqErr)
		if q.req.waitsRNR(psn) {
			return // the responder NAKs what followed the RNR-NAKed packet; the RNR wait covers it
		}
		if psn == c.psn {
			c.retry(now, false)
		}
		return
	}
	w := q.sq.pendingAt(psn)
	if w == nil || w != q.sq.oldestPending() {
		// Stale, or an earlier READ/ATOMIC is being retried first: the
		// responder will NAK this request again when it comes round.
		return
	}
	status := verbs.RemOpErr
	switch code {
	case wire.NakInvalidRequest:
		status = verbs.RemInvReqErr
	case wire.NakRemoteAccessError:
		status = verbs.RemAccessErr
	case wire.NakInvalidRDRequest:
		status = verbs.RemInvRDReqErr
	}
	c.fail(w, status)
}

// fail completes w with an error status; the QP then goes to ERR and the
// WQEs after it are flushed.
func (c *completer) fail(w *sendWQE, status verbs.WCStatus) {
	w.state, w.status = wqeError, status
	c.q.req.stop()
	c.armed = false
	c.completeInOrder()
}

// readResponse places a READ response's payload; responses come in PSN
// order, and a gap means some were lost.
func (c *completer) readResponse(p *wire.Packet, psn wire.PSN, now Time) {
	q := c.q
	w := q.sq.pendingAt(psn)
	if w == nil || (w.wr.Opcode != verbs.WRRead && w.wr.Opcode != verbs.WRAtomicWrite) {
		q.cnt.Inc(verbs.DuplicateResponse)
		return
	}
	if p.AETH != nil && p.AETH.Syndrome().Type() != wire.AckTypeACK {
		q.cnt.Inc(verbs.GhostAck)
		return
	}
	if w.firstPSN.After(c.psn) {
		// The response acknowledges everything before its READ.
		c.ackThrough(w.firstPSN.Add(wire.PSNMask), now)
	}
	if psn != c.psn {
		if psn.After(c.psn) {
			c.retry(now, false) // responses before this one were lost
		} else {
			q.cnt.Inc(verbs.DuplicateResponse)
		}
		return
	}
	idx := uint32(psn.Sub(w.firstPSN))
	off := uint64(idx) * uint64(q.mtu)
	isLast := psn == w.lastPSN
	n := uint64(len(p.Payload))
	want := min(uint64(q.mtu), uint64(w.length)-off)
	if w.wr.Opcode == verbs.WRAtomicWrite {
		want = 0
	}
	if n != want {
		// A response of the wrong size: rxe completes the READ with an
		// error; softnic does the same rather than place bad data.
		c.fail(w, verbs.BadRespErr)
		return
	}
	if n > 0 {
		w.scatter(p.Payload, off)
	}
	c.psn = psn.Add(1)
	if isLast {
		w.state = wqeDone
	}
	c.onProgress(1, now)
}

// atomicAck stores an ATOMIC's original value and completes it.
func (c *completer) atomicAck(p *wire.Packet, psn wire.PSN, now Time) {
	q := c.q
	w := q.sq.pendingAt(psn)
	if w == nil || !w.wr.Opcode.IsAtomic() {
		q.cnt.Inc(verbs.DuplicateResponse)
		return
	}
	if p.AETH.Syndrome().Type() != wire.AckTypeACK {
		q.cnt.Inc(verbs.GhostAck)
		return
	}
	if psn.After(c.psn) {
		c.ackThrough(psn.Add(wire.PSNMask), now)
	}
	if psn != c.psn {
		return
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH.OrigData())
	w.scatter(orig[:], 0)
	c.psn = psn.Add(1)
	w.state = wqeDone
	c.onProgress(1, now)
}

// completeInOrder completes the WQEs at the head of the send queue that
// are finished, in posting order, as the IBTA requires of one QP.
func (c *completer) completeInOrder() {
	q := c.q
	for q.sq.head != q.sq.tail {
		w := q.sq.at(q.sq.head)
		status := verbs.Success
		switch w.state {
		case wqeDone:
		case wqeError:
			status = w.status
		case wqeFlushed:
			status = verbs.WRFlushErr
		default:
			return
		}
		q.req.retire(w)
		c.countCompletion(w.wr.Opcode, status)
		if status != verbs.Success || q.cfg.SignalAll || w.wr.Flags&verbs.Signaled != 0 {
			wc := verbs.WC{ID: w.wr.ID, Status: status, Opcode: verbs.WCOpcodeOf(w.wr.Opcode), QPN: q.num, ByteLen: w.length}
			if w.wr.Opcode == verbs.WRWriteImm || w.wr.Opcode == verbs.WRSendImm {
				wc.Flags = verbs.WCWithImm
			}
			q.pushSendWC(&wc)
		}
		w.release()
		w.state = wqePosted
		q.sq.head++
		if status != verbs.Success && status != verbs.WRFlushErr {
			q.toError(status)
		}
	}
}

// countCompletion counts a send WR of opcode op completed with status: in
// the QP's traffic if it succeeded, and as rxe's rdma_sends if it is a
// SEND that was not flushed (rxe counts those its completer finishes).
func (c *completer) countCompletion(op verbs.WROpcode, status verbs.WCStatus) {
	q := c.q
	if status == verbs.Success {
		q.traffic.SentMsgs++
	}
	if status != verbs.WRFlushErr && (op == verbs.WRSend || op == verbs.WRSendImm || op == verbs.WRSendInv) {
		q.cnt.Inc(verbs.RdmaSends)
	}
}
