package nic

import (
	"slices"
	"sync"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// timers holds the device's pending wakeups: QP timers, packets the
// fault injector holds back and the connection manager's timers. One
// goroutine (timerLoop) serves them.
type timers struct {
	mu   sync.Mutex
	h    timerHeap
	wake chan struct{}
}

type timerEntry struct {
	at  qp.Time
	q   *embeddedQP   // a QP whose Deadline is due, or
	pkt []byte        // a delayed packet
	env wire.Envelope // and its datagram, or
	fn  func(qp.Time) // a function to call with the current time
}

// timerHeap is a binary min-heap of entries by time, typed so that a push
// does not box its entry (container/heap's interface would allocate).
type timerHeap []timerEntry

func (h *timerHeap) push(e timerEntry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].at <= s[i].at {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *timerHeap) pop() timerEntry {
	s := *h
	e := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = timerEntry{}
	s = s[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].at < s[least].at {
			least = l
		}
		if r < len(s) && s[r].at < s[least].at {
			least = r
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return e
}

func (t *timers) init() { t.wake = make(chan struct{}, 1) }

func (t *timers) add(e timerEntry) {
	t.mu.Lock()
	t.h.push(e)
	first := t.h[0].at == e.at
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *timers) delay(at qp.Time, pkt []byte, env *wire.Envelope) {
	t.add(timerEntry{at: at, pkt: pkt, env: *env})
}

// due pops the entries due at now into buf and returns them with the time
// until the next one (or -1 when none is left).
func (t *timers) due(now qp.Time, buf []timerEntry) ([]timerEntry, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.h) > 0 && t.h[0].at <= now {
		buf = append(buf, t.h.pop())
	}
	if len(t.h) == 0 {
		return buf, -1
	}
	return buf, t.h[0].at.Sub(now)
}

// schedule asks for a Tick of q at its deadline, if it has one and no
// earlier wakeup is already queued. q.mu is held.
func (d *embeddedDevice) schedule(q *embeddedQP) {
	at, ok := q.qp.Deadline()
	if !ok || (q.timerAt != 0 && q.timerAt <= at) {
		return
	}
	q.timerAt = at
	d.timers.add(timerEntry{at: at, q: q})
}

func (d *embeddedDevice) timerLoop() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	out := newBatch()
	var due []timerEntry
	for {
		now := d.now()
		var wait time.Duration
		due, wait = d.timers.due(now, due[:0])
		if slices.ContainsFunc(due, func(e timerEntry) bool { return e.q != nil }) {
			d.catchUp()
			now = d.now()
		}
		for i := range due {
			e := &due[i]
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
			if q.timerAt == e.at {
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
		case <-d.timers.wake:
		case <-timer.C:
		}
	}
}
