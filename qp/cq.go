package qp

import (
	"fmt"
	"sync"
)

// CQ is a completion queue: a bounded ring of work completions that QPs
// push and the application polls. It is safe for concurrent use.
//
// A push into a full CQ loses the completion, marks the CQ overflowed (Poll
// then reports ErrOverflow once the ring is drained) and tells the pushing
// QP, which moves to the error state: the IBTA treats CQ overflow as an
// error of the queue and of every QP feeding it.
type CQ struct {
	mu       sync.Mutex
	ring     []WC
	head     int // oldest completion
	count    int
	overflow bool
	notify   func()
}

// NewCQ returns a CQ that holds up to depth completions.
func NewCQ(depth int) (*CQ, error) {
	if depth <= 0 || depth > 1<<22 {
		return nil, fmt.Errorf("completion queue depth %d: %w", depth, ErrInvalid)
	}
	return &CQ{ring: make([]WC, depth)}, nil
}

// SetNotify installs fn, called after completions were added (outside the
// CQ's lock). The NIC uses it to wake goroutines waiting for completions.
func (c *CQ) SetNotify(fn func()) {
	c.mu.Lock()
	c.notify = fn
	c.mu.Unlock()
}

// Depth returns the capacity of the CQ.
func (c *CQ) Depth() int { return len(c.ring) }

// Len returns how many completions are waiting to be polled.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// Poll moves up to len(wcs) completions, oldest first, into wcs and
// returns how many it moved. Once the queue is empty after an overflow it
// returns ErrOverflow.
func (c *CQ) Poll(wcs []WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(wcs) && c.count > 0 {
		wcs[n] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.count--
		n++
	}
	if c.count == 0 && n == 0 && c.overflow {
		return 0, ErrOverflow
	}
	return n, nil
}

// push appends wc and reports whether it fitted.
func (c *CQ) push(wc *WC) bool {
	c.mu.Lock()
	if c.count == len(c.ring) {
		c.overflow = true
		c.mu.Unlock()
		return false
	}
	c.ring[(c.head+c.count)%len(c.ring)] = *wc
	c.count++
	notify := c.notify
	c.mu.Unlock()
	if notify != nil {
		notify()
	}
	return true
}
