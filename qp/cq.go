package qp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/verbs"
)

// CQ is a completion queue: a bounded ring of work completions that QPs
// push and the application polls. It is safe for concurrent use.
//
// A push into a full CQ loses the completion, marks the CQ overflowed (Poll
// then reports ErrOverflow once the ring is drained) and tells the pushing
// QP, which moves to the error state: the IBTA treats CQ overflow as an
// error of the queue and of every QP feeding it.
type CQ struct {
	mu     sync.Mutex
	ring   []verbs.WC
	head   int // oldest completion
	notify func()

	// count and overflow change under mu; they are atomic for Poll's look
	// at an empty queue without the lock. An application polling in a
	// loop must not keep taking the lock the pushing QP needs: the pusher,
	// parked on the lock and readied on the poller's processor, would wait
	// there until the loop is preempted.
	count    atomic.Int64
	overflow atomic.Bool
	// written and solicited count the completions pushed, ever, and those
	// of them that wake a CQ armed for solicited ones
	// (verbs.WC.WakesSolicited); they change under mu.
	written, solicited atomic.Uint32
}

// NewCQ returns a CQ that holds up to depth completions.
func NewCQ(depth int) (*CQ, error) {
	if depth <= 0 || depth > MaxCQE {
		return nil, fmt.Errorf("completion queue depth %d: %w", depth, ErrInvalid)
	}
	return &CQ{ring: make([]verbs.WC, depth)}, nil
}

// SetNotify installs fn, called after completions were added (outside the
// CQ's lock). The NIC uses it to wake goroutines waiting for completions.
func (c *CQ) SetNotify(fn func()) {
	c.mu.Lock()
	c.notify = fn
	c.mu.Unlock()
}

// Depth returns the capacity of the CQ.
func (c *CQ) Depth() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring)
}

// Resize changes the capacity of the CQ to depth (ibv_resize_cq), keeping
// its completions in order. As rxe, it fails with ErrInvalid, changing
// nothing, for a depth of 0 or past MaxCQE, or below the completions the
// CQ holds.
func (c *CQ) Resize(depth int) error {
	if depth <= 0 || depth > MaxCQE {
		return fmt.Errorf("completion queue depth %d: %w", depth, ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	count := int(c.count.Load())
	if depth < count {
		return fmt.Errorf("completion queue depth %d, holding %d completions: %w", depth, count, ErrInvalid)
	}
	ring := make([]verbs.WC, depth)
	for i := range ring[:count] {
		ring[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = ring, 0
	return nil
}

// Len returns how many completions are waiting to be polled.
func (c *CQ) Len() int {
	return int(c.count.Load())
}

// Written returns how many completions were pushed into the CQ, ever
// (wrapping at 2^32), and how many of them wake a CQ armed for solicited
// completions (verbs.WC.WakesSolicited): a CQ armed for its next
// completion (ibv_req_notify_cq) waits for a count to change, whether the
// completion was polled since or not.
func (c *CQ) Written() (all, solicited uint32) {
	return c.written.Load(), c.solicited.Load()
}

// Discard removes the completions of the QP numbered qpn that wait to be
// polled, keeping the others in order, and returns how many it removed.
func (c *CQ) Discard(qpn uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	count := int(c.count.Load())
	kept := 0
	for i := range count {
		wc := &c.ring[(c.head+i)%len(c.ring)]
		if wc.QPN == qpn {
			continue
		}
		if kept != i {
			c.ring[(c.head+kept)%len(c.ring)] = *wc
		}
		kept++
	}
	c.count.Store(int64(kept))
	return count - kept
}

// Poll moves up to len(wcs) completions, oldest first, into wcs and
// returns how many it moved. Once the queue is empty after an overflow it
// returns ErrOverflow.
func (c *CQ) Poll(wcs []verbs.WC) (int, error) {
	if c.count.Load() == 0 && !c.overflow.Load() {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	count := int(c.count.Load())
	n := min(len(wcs), count)
	for i := range wcs[:n] {
		wcs[i] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
	}
	c.count.Store(int64(count - n))
	if count == 0 && c.overflow.Load() {
		return 0, ErrOverflow
	}
	return n, nil
}

// push appends wc and reports whether it fitted.
func (c *CQ) push(wc *verbs.WC) bool {
	c.mu.Lock()
	count := int(c.count.Load())
	if count == len(c.ring) {
		c.overflow.Store(true)
		c.mu.Unlock()
		return false
	}
	c.ring[(c.head+count)%len(c.ring)] = *wc
	c.count.Store(int64(count + 1))
	c.written.Add(1)
	if wc.WakesSolicited() {
		c.solicited.Add(1)
	}
	notify := c.notify
	c.mu.Unlock()
	if notify != nil {
		notify()
	}
	return true
}
