package ladder

import (
	"fmt"
	"time"

	"github.com/softnic/softnic/wire"
)

// stream follows one RC requester's PSN space: its requests, and the
// responses and ACKs its responder sends back. It keeps two views: what
// the requester saw (the responses that reached it) and what the responder
// did (the requests that reached it, and everything it sent).
type stream struct {
	started bool
	first   wire.PSN // the first PSN seen
	next    wire.PSN // the PSN after the last the requester sent
	// spanOpen: the last new request was a READ of a length not yet known
	// in PSNs (the path MTU was not seen), so the next one may skip PSNs.
	spanOpen bool
	reqs     []request // the latest requests, by PSN, oldest first

	// The requester's view.
	bad     int     // responses that could not reach it, in all
	pending pending // what the next resend answers
	burst   burst   // the resend under way

	// The responder's view.
	expected      wire.PSN // the PSN it expects next
	expectedKnown bool
	oosNAKed      bool // it answered a gap with a NAK and waits for the resend
	lastAck       wire.PSN
	lastMSN       uint32
	lastAckSeq    int // the arrow of its last AETH; 0 if none yet
	lastAckLost   bool
	highResp      wire.PSN // the highest PSN of a READ response it sent
	hasResp       bool
}

// request is one request packet as the requester last sent it.
type request struct {
	psn wire.PSN
	op  wire.OpCode
	// span is how many PSNs it takes: 1, or a READ's response packets; 0
	// for a READ while the path MTU is unknown.
	span uint32
	seq  int           // the arrow of its latest sending
	time time.Duration // and when
	bad  int           // stream.bad then
	// answered: a READ response or ATOMIC ACKNOWLEDGE for it reached the
	// requester. orig is the original value of the first ATOMIC
	// ACKNOWLEDGE the responder sent for it, in arrow origSeq.
	answered bool
	orig     uint64
	origSeq  int
}

// pending is a reason for the requester to resend, not yet acted on.
type pending struct {
	cause Cause
	psn   wire.PSN      // where the resend starts
	seq   int           // the arrow that gave the reason
	time  time.Duration // when
	timer uint8         // an RNR NAK's timer code
}

// burst is a go-back-N resend under way.
type burst struct {
	cause Cause
	next  wire.PSN // the PSN that continues it
}

// maxRequests bounds the requests a stream remembers.
const maxRequests = 4096

// copyWindow is how soon a resend with nothing to cause it counts as a
// copy made on the way rather than a retransmission when the ACK timeout is
// unknown: below the smallest timeout in use (rxe and softnic default to
// 67 ms, perftest's -u 8 is 1 ms).
const copyWindow = time.Millisecond

func streamOf(fromA bool) int {
	if fromA {
		return 0
	}
	return 1
}

// rc follows an RC packet: a request in its sender's stream, a response
// in its receiver's.
func (c *conv) rc(a *Arrow, p *wire.Packet) {
	op := a.OpCode
	if (op.IsFirst() || op.IsMiddle()) && len(p.Payload) > 0 {
		c.mtu = len(p.Payload) // First and Middle packets carry exactly the path MTU
	}
	if op.IsRequest() {
		c.streams[streamOf(a.FromA)].request(c, a, p)
	} else {
		c.streams[streamOf(!a.FromA)].response(c, a, p)
	}
}

// reaches reports whether the arrow's packet reached its receiver.
func (a *Arrow) reaches() bool { return !a.Lost && a.ICRC != wire.ICRCBad }

func (s *stream) start(psn wire.PSN) {
	if !s.started {
		s.started, s.first, s.next, s.expected, s.expectedKnown = true, psn, psn, psn, true
	}
}

// sent reports whether the requester has sent psn.
func (s *stream) sent(psn wire.PSN) bool {
	return s.started && !psn.Before(s.first) && psn.Before(s.next)
}

// find returns the request that psn belongs to, or nil.
func (s *stream) find(psn wire.PSN) *request {
	for i := len(s.reqs) - 1; i >= 0; i-- {
		if r := &s.reqs[i]; psn.InWindow(r.psn, max(r.span, 1)) {
			return r
		}
	}
	return nil
}

// request follows a request packet. A PSN before the next one is a
// retransmission (resend), or the original arriving late (Delayed).
func (s *stream) request(c *conv, a *Arrow, p *wire.Packet) {
	psn := a.PSN
	s.start(psn)
	copied := false
	if d := psn.Sub(s.next); d >= 0 {
		if last := len(s.reqs) - 1; s.spanOpen {
			if last >= 0 && s.reqs[last].span == 0 {
				s.reqs[last].span = uint32(psn.Sub(s.reqs[last].psn))
			}
		} else if d > 0 {
			a.note(Missing, 0, s.next, fmt.Sprintf("missing: %s not seen before PSN %v: lost on the way, held back, or not captured",
				psnRange(s.next, psn.Add(wire.PSNMask)), psn))
		}
		s.pending, s.burst = pending{}, burst{}
		span := uint32(1)
		if a.OpCode.IsReadRequest() {
			span = c.readSpan(p)
		}
		if len(s.reqs) == maxRequests {
			s.reqs = append(s.reqs[:0], s.reqs[1:]...)
		}
		s.reqs = append(s.reqs, request{psn: psn, op: a.OpCode, span: span, seq: a.Seq, time: a.Time, bad: s.bad})
		s.next, s.spanOpen = psn.Add(max(span, 1)), span == 0
	} else if a.Delayed == 0 { // a late original is for arrive to name
		copied = s.resend(c, a)
	}
	if a.reaches() {
		s.arrive(a, copied)
	}
}

// readSpan returns how many response packets, and so PSNs, a READ request
// takes: its length in path MTUs, at least 1; 0 if the MTU is unknown.
func (c *conv) readSpan(p *wire.Packet) uint32 {
	n := p.RETH.DMALen()
	switch {
	case n == 0:
		return 1
	case c.mtu == 0:
		return 0
	}
	return (n + uint32(c.mtu) - 1) / uint32(c.mtu)
}

// resend names why the requester sent a PSN again, and reports whether it
// is a copy made on the way rather than a retransmission.
func (s *stream) resend(c *conv, a *Arrow) (copied bool) {
	psn := a.PSN
	r := s.find(psn)
	switch {
	case s.burst.cause != 0 && psn == s.burst.next:
		a.note(Retransmission, s.burst.cause, psn, fmt.Sprintf("retransmission (%v): go-back-N goes on with PSN %v", s.burst.cause, psn))
	case s.pending.cause != 0:
		s.burst.cause = s.pending.cause
		a.note(Retransmission, s.pending.cause, psn, s.pending.explain(a, psn))
		s.pending = pending{}
	case r != nil && a.Time-r.time < c.copyWindow():
		a.note(Duplicate, 0, psn, fmt.Sprintf("duplicate: a second copy of PSN %v, %s after the first (arrow %d), "+
			"with nothing that makes a requester resend: copied on the way", psn, Duration(a.Time-r.time), r.seq))
		s.burst = burst{}
		return true
	default:
		s.burst.cause = CauseTimeout
		a.note(Retransmission, CauseTimeout, psn, s.timeout(c, a, r))
	}
	s.burst.next = psn.Add(1)
	if r != nil {
		r.seq, r.time, r.bad = a.Seq, a.Time, s.bad
	}
	return false
}

// copyWindow is how soon after the first a resend with no cause is a copy.
func (c *conv) copyWindow() time.Duration {
	if c.ACKTimeout > 0 {
		return c.ACKTimeout / 2
	}
	return copyWindow
}

// explain says why a pending cause made the requester resend from psn.
func (p *pending) explain(a *Arrow, psn wire.PSN) string {
	switch p.cause {
	case CauseNAK:
		return fmt.Sprintf("retransmission (NAK): the PSN sequence error NAK of arrow %d asked for PSN %v again; go-back-N resends from there", p.seq, p.psn)
	case CauseRNR:
		return fmt.Sprintf("retransmission (RNR NAK): PSN %v resent %s after the RNR NAK of arrow %d, whose timer asks for at least %s",
			psn, Duration(a.Time-p.time), p.seq, Duration(wire.RNRTimeout(p.timer)))
	default:
		return fmt.Sprintf("retransmission (implied NAK): the response of arrow %d passed PSN %v, which got none; the requester sends it again", p.seq, p.psn)
	}
}

// timeout explains a resend with no NAK before it.
func (s *stream) timeout(c *conv, a *Arrow, r *request) string {
	text := fmt.Sprintf("retransmission (timeout): PSN %v resent", a.PSN)
	if r != nil {
		wait := a.Time - r.time
		text += fmt.Sprintf(" %s after it was last sent (arrow %d) with no ACK for it", Duration(wait), r.seq)
		if n := s.bad - r.bad; n > 0 {
			text += fmt.Sprintf("; the %d %s meanwhile could not reach the requester (bad ICRC or lost)", n, plural(n, "response", "responses"))
		}
		if c.ACKTimeout > 0 {
			text += "; the ACK timeout is " + Duration(c.ACKTimeout)
		} else if exp := suggestedExponent(wait); exp > 0 {
			text += fmt.Sprintf("; the ACK timeout it suggests is 4.096 µs × 2^%d = %s", exp, Duration(ACKTimeout(exp)))
		}
	}
	return text
}

// suggestedExponent returns the ACK timeout exponent a resend after a
// wait of d suggests: the largest whose timeout is at most d, since a timer
// fires at its deadline or later, with a tenth of slack for the capture's
// clock (rxe's resends come a little under 67.1 ms after the packet they
// repeat); 0 if none fits.
func suggestedExponent(d time.Duration) uint8 {
	exp := uint8(0)
	for e := uint8(1); e < 32 && ACKTimeout(e) <= d+d/10; e++ {
		exp = e
	}
	return exp
}

// arrive follows a request that reached the responder.
func (s *stream) arrive(a *Arrow, copied bool) {
	psn := a.PSN
	if !s.expectedKnown {
		s.expected, s.expectedKnown = psn, true
	}
	switch d := psn.Sub(s.expected); {
	case d == 0:
		s.oosNAKed = false
		span := uint32(1)
		if a.OpCode.IsReadRequest() {
			if r := s.find(psn); r != nil {
				span = r.span
			}
		}
		s.expected, s.expectedKnown = psn.Add(span), span != 0
	case d > 0:
		missing := psnRange(s.expected, psn.Add(wire.PSNMask))
		if s.oosNAKed {
			a.note(OutOfSequence, 0, s.expected, fmt.Sprintf("out of sequence: the responder still waits for PSN %v and drops PSN %v", s.expected, psn))
		} else {
			a.note(OutOfSequence, 0, s.expected, fmt.Sprintf("out of sequence: %s did not arrive before PSN %v; "+
				"the responder answers with a PSN sequence error NAK and drops what follows until PSN %v", missing, psn, s.expected))
			s.oosNAKed = true
		}
	default:
		text := fmt.Sprintf("duplicate: the responder has PSN %v already; ", psn)
		if a.Delayed > 0 {
			text = fmt.Sprintf("duplicate: PSN %v, held back %s on the way, arrives after the requester sent it again; the responder has it already; ",
				psn, Duration(a.Delayed))
		}
		switch {
		case a.OpCode.IsAtomic():
			text += "it sends back the original value it saved, without executing the atomic again"
		case a.OpCode.IsReadRequest():
			text += "it reads the memory again and sends the response again"
		default:
			text += "it acknowledges it again, without writing or delivering it twice"
		}
		if copied { // one anomaly for the copy and what the responder does with it
			an := &a.Anomalies[len(a.Anomalies)-1]
			an.Text += "; " + text[len("duplicate: "):]
			return
		}
		a.note(Duplicate, 0, psn, text)
	}
}

// response follows a response or ACK, sent by the responder to the
// requester of stream s.
func (s *stream) response(c *conv, a *Arrow, p *wire.Packet) {
	psn := a.PSN
	if !s.started { // the capture began after the request
		s.start(psn)
		s.next = psn.Add(1)
	}
	op := a.OpCode
	switch {
	case op.IsReadResponse():
		s.readResponse(a)
	case op == wire.OpRCAtomicAck:
		s.atomicAck(a, p.AtomicAckETH.OrigData())
	}
	if a.AETH {
		switch syn := a.Syndrome; syn.Type() {
		case wire.AckTypeACK:
			s.ack(a)
		case wire.AckTypeRNRNak:
			a.note(RNRWait, 0, psn, fmt.Sprintf("RNR NAK: the receiver of PSN %v had no receive buffer posted; "+
				"the requester waits at least %s (RNR timer %d) and sends it again", psn, Duration(wire.RNRTimeout(syn.RNRTimer())), syn.RNRTimer()))
			s.expected, s.oosNAKed = psn, false
			if a.reaches() {
				s.pending = pending{cause: CauseRNR, psn: psn, seq: a.Seq, time: a.Time, timer: syn.RNRTimer()}
			}
		case wire.AckTypeNak:
			a.note(NAK, 0, psn, nakText(syn.NakCode(), psn))
			if syn.NakCode() == wire.NakPSNSequenceError {
				// The responder expected psn when it sent the NAK; what
				// the ladder drew after a gap did not move its expected
				// PSN. Requests drawn between the gap and the NAK that
				// the responder took after sending it (a capture of
				// both ends orders such events as it may) already did.
				if a.reaches() {
					s.pending = pending{cause: CauseNAK, psn: psn, seq: a.Seq, time: a.Time}
				}
			}
		}
		s.lastAck, s.lastMSN, s.lastAckSeq, s.lastAckLost = psn, a.MSN, a.Seq, !a.reaches()
	}
	if a.reaches() {
		s.impliedNAK(a)
	} else {
		s.bad++
	}
}

// readResponse marks the READ a response answers, and names a response
// sent again.
func (s *stream) readResponse(a *Arrow) {
	psn := a.PSN
	if s.hasResp && !psn.After(s.highResp) {
		a.note(Duplicate, 0, psn, fmt.Sprintf("duplicate: the READ response for PSN %v again, answering the READ sent again", psn))
	}
	if !s.hasResp || psn.After(s.highResp) {
		s.highResp, s.hasResp = psn, true
	}
	r := s.find(psn)
	if r == nil { // a READ whose span is unknown: the latest before psn
		for i := len(s.reqs) - 1; i >= 0; i-- {
			if q := &s.reqs[i]; q.op.IsReadRequest() && !psn.Before(q.psn) {
				r = q
				break
			}
		}
	}
	if r == nil || !r.op.IsReadRequest() {
		return
	}
	r.answered = r.answered || a.reaches()
	if op := a.OpCode; op == wire.OpRCReadResponseLast || op == wire.OpRCReadResponseOnly {
		r.span = uint32(psn.Sub(r.psn)) + 1
		if s.spanOpen && r == &s.reqs[len(s.reqs)-1] {
			s.next, s.spanOpen = psn.Add(1), false
		}
	}
}

// atomicAck marks the atomic an ATOMIC ACKNOWLEDGE answers, and names one
// sent again: the same original value means the responder answered from
// the result it saved, a different one that it executed the atomic twice.
func (s *stream) atomicAck(a *Arrow, orig uint64) {
	r := s.find(a.PSN)
	if r == nil || !r.op.IsAtomic() {
		return
	}
	r.answered = r.answered || a.reaches()
	switch {
	case r.origSeq == 0:
		r.orig, r.origSeq = orig, a.Seq
	case orig == r.orig:
		a.note(Duplicate, 0, a.PSN, fmt.Sprintf("duplicate: the ATOMIC ACKNOWLEDGE of PSN %v again, with the same original value %#x as arrow %d: "+
			"answered from the saved result, the atomic executed once", a.PSN, orig, r.origSeq))
	default:
		a.note(Duplicate, 0, a.PSN, fmt.Sprintf("duplicate: the ATOMIC ACKNOWLEDGE of PSN %v again, with original value %#x where arrow %d had %#x: "+
			"the atomic was executed twice", a.PSN, orig, r.origSeq, r.orig))
	}
}

// ack names an ACK that repeats the last one or covers several requests:
// the MSN counts the requests the responder completed, and before the
// first AETH the requests are counted.
func (s *stream) ack(a *Arrow) {
	if a.OpCode != wire.OpRCAck {
		return
	}
	psn, msn := a.PSN, a.MSN
	if s.lastAckSeq == 0 {
		n := uint32(0)
		for _, r := range s.reqs {
			if !r.psn.After(psn) && (r.op.IsLast() || r.op.IsOnly()) {
				n++
			}
		}
		if n >= 2 {
			a.note(Coalesced, 0, psn, fmt.Sprintf("coalesced ACK: one ACK for %d requests, %s", n, psnRange(s.first, psn)))
		}
		return
	}
	switch n := (msn - s.lastMSN) & (1<<24 - 1); {
	case psn == s.lastAck && n == 0:
		why := ""
		if s.lastAckLost {
			why = ", which did not reach the requester"
		}
		a.note(Duplicate, 0, psn, fmt.Sprintf("duplicate: repeats the ACK of PSN %v (arrow %d%s), answering a duplicate request", psn, s.lastAckSeq, why))
	case n >= 2 && psn.After(s.lastAck):
		a.note(Coalesced, 0, psn, fmt.Sprintf("coalesced ACK: one ACK for %d requests (MSN %d to %d), %s",
			n, (s.lastMSN+1)&(1<<24-1), msn, psnRange(s.lastAck.Add(1), psn)))
	}
}

// impliedNAK names a response or ACK that reached the requester and passes
// a READ or atomic that got no response.
func (s *stream) impliedNAK(a *Arrow) {
	psn := a.PSN
	for i := range s.reqs {
		r := &s.reqs[i]
		if r.answered || !(r.op.IsReadRequest() || r.op.IsAtomic()) || !r.psn.Before(psn) {
			continue
		}
		if a.OpCode.IsReadResponse() && r.span == 0 {
			continue // its response may be this one
		}
		what := "READ"
		if r.op.IsAtomic() {
			what = "atomic"
		}
		a.note(ImpliedNAK, 0, r.psn, fmt.Sprintf("implied NAK: this %s of PSN %v passes the %s of PSN %v (arrow %d), which got no response: "+
			"the requester takes it as lost and sends it again", responseName(a.OpCode), psn, what, r.psn, r.seq))
		r.answered = true // named once
		s.pending = pending{cause: CauseImpliedNAK, psn: r.psn, seq: a.Seq, time: a.Time}
		return
	}
}

func responseName(op wire.OpCode) string {
	switch {
	case op.IsReadResponse():
		return "READ response"
	case op == wire.OpRCAtomicAck:
		return "ATOMIC ACKNOWLEDGE"
	}
	return "ACK"
}

// nakText explains a NAK.
func nakText(code wire.NakCode, psn wire.PSN) string {
	switch code {
	case wire.NakPSNSequenceError:
		return fmt.Sprintf("NAK (PSN sequence error): the responder expected PSN %v and got a later one; the requester resends from PSN %v (go-back-N)", psn, psn)
	case wire.NakInvalidRequest:
		return fmt.Sprintf("NAK (invalid request): the responder cannot carry out PSN %v (an opcode it does not take, a SEND larger than its receive buffer); "+
			"the request completes with REM_INV_REQ_ERR and the connection ends", psn)
	case wire.NakRemoteAccessError:
		return fmt.Sprintf("NAK (remote access error): the responder refused PSN %v: its rkey, address range or access rights do not allow it; "+
			"the request completes with REM_ACCESS_ERR and both QPs enter the error state", psn)
	case wire.NakRemoteOperationalError:
		return fmt.Sprintf("NAK (remote operational error): the responder failed to carry out PSN %v; the request completes with REM_OP_ERR", psn)
	}
	return fmt.Sprintf("NAK (%v) for PSN %v", code, psn)
}

// psnRange names the PSNs from first to last: "PSN 0x000005" or "PSNs
// 0x000005–0x000007".
func psnRange(first, last wire.PSN) string {
	if first == last {
		return "PSN " + first.String()
	}
	return "PSNs " + first.String() + "–" + last.String()
}

// Duration formats d as the ladder does, for people: "1.07 s", "67.1 ms",
// "640 µs".
func Duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3g s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
}
