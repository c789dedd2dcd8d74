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
			q := e.q
			q.mu.Lock()
			if q.timerAt == due[i].At {
				q.timerAt = 0
			}
			if !q.destroyed {
				q.qp.Tick(now)
				q.flushLocked(out, now)
			}
			q.mu.Unlock()
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
