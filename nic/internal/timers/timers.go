// Package timers is the embedded device's queue of pending wakeups (QP
// timers, packets the fault injector holds back, the connection manager's
// timers), each an entry due at a device time carrying what the device
// does then. One goroutine of the device waits on Wake and takes what is
// Due; an application that polls takes the QPs' (DueWhere) when Next says
// one may be due.
package timers

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/qp"
)

// Entry is a wakeup due at At, with what to do then.
type Entry[V any] struct {
	At qp.Time
	V  V
}

// heap is a binary min-heap of entries by time, typed so that a push does
// not box its entry (container/heap's interface would allocate).
type heap[V any] []Entry[V]

func (h *heap[V]) push(e Entry[V]) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].At <= s[i].At {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *heap[V]) pop() Entry[V] {
	s := *h
	e := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = Entry[V]{}
	s = s[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].At < s[least].At {
			least = l
		}
		if r < len(s) && s[r].At < s[least].At {
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

// Queue holds the pending wakeups. Its zero value is not usable: call
// Init.
type Queue[V any] struct {
	mu   sync.Mutex
	h    heap[V]
	next atomic.Int64 // h[0].At, or math.MaxInt64 when h is empty
	wake chan struct{}
}

// Init makes q ready for use.
func (q *Queue[V]) Init() {
	q.wake = make(chan struct{}, 1)
	q.next.Store(math.MaxInt64)
}

// Next returns when the first entry is due (math.MaxInt64 when none is),
// without taking q's lock: a poller looks at it every poll.
func (q *Queue[V]) Next() qp.Time { return qp.Time(q.next.Load()) }

// noteNextLocked updates next. q.mu is held.
func (q *Queue[V]) noteNextLocked() {
	next := int64(math.MaxInt64)
	if len(q.h) > 0 {
		next = int64(q.h[0].At)
	}
	q.next.Store(next)
}

// Add queues v at at, and signals Wake if it is now the first due.
func (q *Queue[V]) Add(at qp.Time, v V) {
	q.mu.Lock()
	q.h.push(Entry[V]{At: at, V: v})
	first := q.h[0].At == at
	q.noteNextLocked()
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// Wake receives when an entry earlier than all others was added.
func (q *Queue[V]) Wake() <-chan struct{} { return q.wake }

// Due pops the entries due at now into buf and returns them with the time
// until the next one (or -1 when none is left).
func (q *Queue[V]) Due(now qp.Time, buf []Entry[V]) ([]Entry[V], time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.h) > 0 && q.h[0].At <= now {
		buf = append(buf, q.h.pop())
	}
	q.noteNextLocked()
	if len(q.h) == 0 {
		return buf, -1
	}
	return buf, q.h[0].At.Sub(now)
}

// DueWhere pops the entries due at now for which take reports true into
// buf and returns them; the others due stay queued, for the goroutine
// that waits on Wake (which was told of them when they were added).
func (q *Queue[V]) DueWhere(now qp.Time, buf []Entry[V], take func(*V) bool) []Entry[V] {
	q.mu.Lock()
	defer q.mu.Unlock()
	start := len(buf)
	for len(q.h) > 0 && q.h[0].At <= now {
		buf = append(buf, q.h.pop())
	}
	taken := start
	for i := start; i < len(buf); i++ {
		if take(&buf[i].V) {
			buf[taken] = buf[i]
			taken++
		} else {
			q.h.push(buf[i])
		}
	}
	clear(buf[taken:])
	q.noteNextLocked()
	return buf[:taken]
}
