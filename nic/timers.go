package nic

import (
	"container/heap"
	"net/netip"
	"sync"
	"time"

	"github.com/softnic/softnic/qp"
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
	q   *QP            // a QP whose Deadline is due, or
	pkt []byte         // a delayed packet
	dst netip.AddrPort // and where it goes, or
	fn  func(qp.Time)  // a function to call with the current time
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{}
	*h = old[:len(old)-1]
	return e
}

func (t *timers) init() { t.wake = make(chan struct{}, 1) }

func (t *timers) add(e timerEntry) {
	t.mu.Lock()
	heap.Push(&t.h, e)
	first := t.h[0].at == e.at
	t.mu.Unlock()
	if first {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *timers) delay(at qp.Time, pkt []byte, dst netip.AddrPort) {
	t.add(timerEntry{at: at, pkt: pkt, dst: dst})
}

// due pops the entries due at now into buf and returns them with the time
// until the next one (or -1 when none is left).
func (t *timers) due(now qp.Time, buf []timerEntry) ([]timerEntry, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.h) > 0 && t.h[0].at <= now {
		buf = append(buf, heap.Pop(&t.h).(timerEntry))
	}
	if len(t.h) == 0 {
		return buf, -1
	}
	return buf, t.h[0].at.Sub(now)
}

// schedule asks for a Tick of q at its deadline, if it has one and no
// earlier wakeup is already queued. q.mu is held.
func (d *Device) schedule(q *QP) {
	at, ok := q.qp.Deadline()
	if !ok || (q.timerAt != 0 && q.timerAt <= at) {
		return
	}
	q.timerAt = at
	d.timers.add(timerEntry{at: at, q: q})
}

func (d *Device) timerLoop() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	out := newBatch()
	var due []timerEntry
	for {
		now := d.now()
		var wait time.Duration
		due, wait = d.timers.due(now, due[:0])
		for i := range due {
			e := &due[i]
			switch {
			case e.fn != nil:
				e.fn(now)
				continue
			case e.q == nil:
				d.sendOne(e.pkt, e.dst)
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
		case <-d.done:
			return
		case <-d.timers.wake:
		case <-timer.C:
		}
	}
}
