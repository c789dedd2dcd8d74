package embedded

import (
	"slices"
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
				d.sendOne(e.pkt, e.env.Dst)
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
		q.qp.Tick(now)
		q.flushLocked(b, now)
	}
	q.mu.Unlock()
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
