package qp

// congestion is an RC requester's congestion window, in packets: how many
// request PSNs it keeps unacknowledged. rxe has a fixed window; softnic's
// grows as ACKs arrive and halves on loss, as TCP Reno's does, so that a
// requester does not overrun a receiver whose socket drops datagrams at
// saturation. The requester asks it whether it may send (maySend), the
// completer tells it what came back (onAck, onLoss); nothing else reads or
// writes the window.
type congestion struct {
	cwnd, ssthresh float64
	max            float64 // Config.Window

	// The window and threshold before the last timeout, which undo puts
	// back if the timeout proves spurious; undoable until then.
	priorCwnd, priorSsthresh float64
	undoable                 bool
}

// minWindow is the window after repeated loss, and after a timeout.
const minWindow = 8

// newCongestion returns the window of a QP of at most limit packets
// (Config.Window): it starts at 32 packets, or limit if smaller, in slow
// start.
func newCongestion(limit int) congestion {
	return congestion{cwnd: float64(min(limit, 32)), ssthresh: float64(limit), max: float64(limit)}
}

// maySend reports whether a requester with inFlight request PSNs
// unacknowledged may send another packet.
func (c *congestion) maySend(inFlight int32) bool { return inFlight < int32(c.cwnd) }

// onAck grows the window for n more request PSNs acknowledged: by n in
// slow start, by n/cwnd (one packet a window) after it.
func (c *congestion) onAck(n uint32) {
	if c.cwnd < c.ssthresh {
		c.cwnd += float64(n)
	} else {
		c.cwnd += float64(n) / c.cwnd
	}
	c.cwnd = min(c.cwnd, c.max)
}

// onLoss halves the window when a go-back-N starts. After a timeout it
// starts again from the smallest window instead: nothing came back for a
// whole timeout, so the ACKs that would clock the resend out are gone and
// half the old window would leave in one burst (TCP after its
// retransmission timeout does the same). Timeouts in a row, nothing
// acknowledged between (again), keep for undo the window from before the
// first, as TCP does from where its loss state began.
func (c *congestion) onLoss(timeout, again bool) {
	if !again || !c.undoable {
		c.priorCwnd, c.priorSsthresh = c.cwnd, c.ssthresh
	}
	c.undoable = timeout
	c.ssthresh = max(c.cwnd/2, minWindow)
	c.cwnd = c.ssthresh
	if timeout {
		c.cwnd = minWindow
	}
}

// undo puts back the window from before the last timeout, which proved
// spurious: what the requester took for lost was only late (the peer, or
// this side's processing, descheduled past the ACK timeout on a loaded
// machine), as an acknowledgement of packets the go-back-N has not sent
// again shows. TCP's F-RTO and Eifel undo the same way; without it every
// such stall costs a slow start from minWindow, on every QP it stalls.
func (c *congestion) undo() {
	if c.undoable {
		c.cwnd, c.ssthresh = max(c.cwnd, c.priorCwnd), c.priorSsthresh
		c.undoable = false
	}
}

// ackEvery returns how often the requester asks for an ACK: every half
// window, between 1 and 64 packets, so that ACKs keep the window moving
// without one for every packet.
func (c *congestion) ackEvery() int { return max(1, min(64, int(c.cwnd/2))) }

// window returns the window, in whole packets, for Status.
func (c *congestion) window() int { return int(c.cwnd) }
