package embedded

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/nic/internal/timers"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// wakeup is what the device does when an entry of its timers.Queue is due:
// a QP's Tick, a packet the fault injector held back sent, or a function
// (the connection manager's timers) called with the current time.
type wakeup struct {
	q   *QP           // a QP whose Deadline is due, or
	pkt []byte        // a delayed packet
	env wire.Envelope // and its datagram, or
	fn  func(qp.Time) // a function to call with the current time
}

// schedule asks for a Tick of q at its deadline, if it has one and no
// earlier wakeup is already queued. q.mu is held.
func (d *Device) schedule(q *QP) {
	at, ok := q.qp.Deadline()
	if !ok || (q.timerAt != 0 && q.timerAt <= at) {
		return
	}
	q.timerAt = at
	d.timers.Add(at, wakeup{q: q})
}

func (d *Device) timerLoop() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	out := newBatch()
	var due []timers.Entry[wakeup]
	for {
		now := d.now()
		var wait time.Duration
		due, wait = d.timers.Due(now, due[:0])
		if slices.ContainsFunc(due, func(e timers.Entry[wakeup]) bool { return e.V.q != nil }) {
			d.catchUp()
			now = d.now()
		}
		for i := range due {
			e := &due[i].V
			switch {
			case e.fn != nil:
				e.fn(now)
				continue
			case e.q == nil:
				d.trace(Sent, &e.env, e.pkt, NoteFaultReleased)
				d.sendOne(e.pkt, &e.env)
				continue
			}
			e.q.tick(due[i].At, now, out)
		}
		clear(due)
		if wait < 0 {
			wait = time.Hour
		}
		timer.Reset(wait)
		select {
		case <-d.closing:
			return
		case <-d.timers.Wake():
		case <-timer.C:
		}
	}
}

// tick runs q's timers at now, for its wakeup due at at, and sends what
// they let go through b.
func (q *QP) tick(at, now qp.Time, b *batch) {
	q.mu.Lock()
	if q.timerAt == at {
		q.timerAt = 0
	}
	if !q.destroyed {
		if q.qp.AckTimedOut(now) && !q.holdTimeoutLocked(now) {
			q.retried = now
			q.dev.silence.retried.Store(int64(now))
		}
		q.qp.Tick(now)
		q.flushLocked(b, now)
	}
	q.mu.Unlock()
}

// silence is what the device knows of peers that stop answering: when a
// packet for one of its QPs last arrived, and when a QP last sent again
// because its ACK timer ran out (device times, 0 for never).
//
// A peer descheduled past the ACK timeout (a loaded machine stalls a
// process for tens of milliseconds) times out every QP that has requests
// outstanding toward it, each of which sends its window again, from the
// smallest congestion window, into the socket where the originals wait:
// over 64 QPs, one stall resent a thousand packets, which the peer then
// read and dropped as duplicates, and stalled longer doing so. The first
// QP whose timer runs out sends again, as one QP would; the others'
// timeouts are held (HoldAckTimeout) while the device has heard nothing
// since that retry, which answers for them all: when the peer runs
// again, its ACKs for the originals end the holds, and a QP whose
// requests were lost indeed times out one timeout later.
type silence struct {
	heard, retried atomic.Int64
}

// maxHolds bounds the timeouts of a QP held in a row with nothing
// acknowledged between, so that a peer that never answers again fails
// every QP's requests, maxHolds timeouts later than it would without
// holds.
const maxHolds = 4

// holdTimeoutLocked holds q's ACK timeout, which has run out at now, if
// another QP's retry has gone unanswered: nothing arrived for any QP of
// the device since that retry. A device that talks to several peers holds
// only while it hears from none of them. q.mu is held.
func (q *QP) holdTimeoutLocked(now qp.Time) bool {
	s := &q.dev.silence
	retried := qp.Time(s.retried.Load())
	if retried == 0 || retried == q.retried || qp.Time(s.heard.Load()) >= retried {
		return false
	}
	if acked := q.qp.Status().AckedPSN; acked != q.heldAcked {
		q.heldAcked, q.holds = acked, 0
	}
	if q.holds >= maxHolds {
		return false
	}
	q.holds++
	q.qp.HoldAckTimeout(now)
	return true
}

// isQP reports whether w is a QP's wakeup.
func isQP(w *wakeup) bool { return w.q != nil }

// tickDue is a poller's turn at the QPs' timers (drive): while an
// application polls, its goroutine runs the ACK timeouts and the READ
// pacer's rounds that are due, as it processes packets, instead of waking
// the timer goroutine to run them on a CPU that the poller and the peer
// keep busy (on two cores the pacer's rounds then came milliseconds late).
// What else is due stays for the timer goroutine. As there, what the
// socket holds is processed first: a timeout is a loss only if its
// acknowledgement has not arrived. p.role is held.
func (d *Device) tickDue(now qp.Time) {
	p := &d.prog
	due := d.timers.DueWhere(now, p.due[:0], isQP)
	if len(due) > 0 {
		d.processQueued(false)
		now = d.now()
	}
	for i := range due {
		due[i].V.q.tick(due[i].At, now, p.out)
	}
	clear(due)
	p.due = due[:0]
}
