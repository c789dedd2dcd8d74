// Package cwnd is the congestion window of an RC requester (package qp):
// how many request PSNs it keeps unacknowledged, grown by ACKs and cut by
// loss as TCP Reno's, with undo of a timeout that proves spurious. It is
// pure arithmetic on what the requester and completer tell it.
package cwnd

// Window is an RC requester's congestion window, in packets: how many
// request PSNs it keeps unacknowledged. rxe has a fixed window; softnic's
// grows as ACKs arrive and halves on loss, as TCP Reno's does, so that a
// requester does not overrun a receiver whose socket drops datagrams at
// saturation. The requester asks it whether it may send (MaySend), the
// completer tells it what came back (OnAck, OnLoss); nothing else reads or
// writes the window.
type Window struct {
	cwnd, ssthresh float64
	max            float64 // Config.Window

	// The window and threshold before the last timeout, which Undo puts
	// back if the timeout proves spurious; undoable until then.
	priorCwnd, priorSsthresh float64
	undoable                 bool
}

// Min is the window after repeated loss, and after a timeout.
const Min = 8

// New returns the window of a QP of at most limit packets
// (Config.Window): it starts at 32 packets, or limit if smaller, in slow
// start.
func New(limit int) Window {
	return Window{cwnd: float64(min(limit, 32)), ssthresh: float64(limit), max: float64(limit)}
}

// MaySend reports whether a requester with inFlight request PSNs
// unacknowledged may send another packet.
func (c *Window) MaySend(inFlight int32) bool { return inFlight < int32(c.cwnd) }

// OnAck grows the window for n more request PSNs acknowledged: by n in
// slow start, by n/cwnd (one packet a window) after it.
func (c *Window) OnAck(n uint32) {
	if c.cwnd < c.ssthresh {
		c.cwnd += float64(n)
	} else {
		c.cwnd += float64(n) / c.cwnd
	}
	c.cwnd = min(c.cwnd, c.max)
}

// OnLoss halves the window when a go-back-N starts. After a timeout it
// starts again from the smallest window instead: nothing came back for a
// whole timeout, so the ACKs that would clock the resend out are gone and
// half the old window would leave in one burst (TCP after its
// retransmission timeout does the same). Timeouts in a row, nothing
// acknowledged between (again), keep for undo the window from before the
// first, as TCP does from where its loss state began.
func (c *Window) OnLoss(timeout, again bool) {
	if !again || !c.undoable {
		c.priorCwnd, c.priorSsthresh = c.cwnd, c.ssthresh
	}
	c.undoable = timeout
	c.ssthresh = max(c.cwnd/2, Min)
	c.cwnd = c.ssthresh
	if timeout {
		c.cwnd = Min
	}
}

// Undo puts back the window from before the last timeout, which proved
// spurious: what the requester took for lost was only late (the peer, or
// this side's processing, descheduled past the ACK timeout on a loaded
// machine), as an acknowledgement of packets the go-back-N has not sent
// again shows. TCP's F-RTO and Eifel undo the same way; without it every
// such stall costs a slow start from Min, on every QP it stalls.
func (c *Window) Undo() {
	if c.undoable {
		c.cwnd, c.ssthresh = max(c.cwnd, c.priorCwnd), c.priorSsthresh
		c.undoable = false
	}
}

// AckEvery returns how often the requester asks for an ACK: every half
// window, between 1 and 64 packets, so that ACKs keep the window moving
// without one for every packet.
func (c *Window) AckEvery() int { return max(1, min(64, int(c.cwnd/2))) }

// Packets returns the window, in packets.
func (c *Window) Packets() float64 { return c.cwnd }
