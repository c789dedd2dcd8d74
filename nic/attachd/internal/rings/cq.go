package rings

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// CQ is the ring a device CQ's completions go to, which the attached
// process polls. Completions are moved the moment the device pushes them
// (the CQ's notify function), on the goroutine that pushed them.
type CQ struct {
	qcq   *qp.CQ // the device's CQ
	depth uint32
	cnt   *Counts
	owner Owner

	mu     sync.Mutex
	m      *shm.Mapping
	ring   shm.Ring
	efd    int    // signalled when the process armed the ring; the daemon's alone
	epfd   int    // the process's wait for efd (shm.NewEpoll), -1 once taken
	prod   uint32 // slots filled, ever (a resize starts it again)
	closed bool
	wcs    [16]verbs.WC
	// written and solicited count the completions written, ever, and
	// those of them that wake a CQ armed for solicited ones, which
	// publishLocked stores in the ring's header (shm.Ring.Written);
	// published is solicited as publishLocked last stored it.
	written, solicited, published uint32
}

// NewCQ makes the ring and wakeup of qcq, a CQ of depth entries of the
// process owner, and has qcq's completions moved into the ring from now
// on. The wakeup is an eventfd the daemon keeps to itself and an epoll fd
// for the process to wait on: the process never holds the eventfd, so it
// cannot make the daemon's signal block (see package shm).
func NewCQ(qcq *qp.CQ, depth int, cnt *Counts, owner Owner) (*CQ, error) {
	c := &CQ{qcq: qcq, depth: uint32(depth), cnt: cnt, owner: owner, efd: -1, epfd: -1}
	var err error
	if c.m, c.ring, err = newRing("softnic-cq", depth, shm.CQESize); err != nil {
		return nil, err
	}
	if c.efd, err = shm.NewEventFD(); err == nil {
		c.epfd, err = shm.NewEpoll(c.efd)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.qcq.SetNotify(c.drain)
	return c, nil
}

// Ring is the completion ring as the process maps it.
func (c *CQ) Ring() shm.Ring { return c.ring }

// TakeFD returns the descriptor of the ring, for the process to map; the
// caller closes it once sent.
func (c *CQ) TakeFD() int { return c.m.TakeFD() }

// TakeWaitFD returns the epoll fd the process waits on, which wakes when
// the process armed the ring and a completion came, and forgets it: the
// caller closes it once sent.
func (c *CQ) TakeWaitFD() int {
	fd := c.epfd
	c.epfd = -1
	return fd
}

// drain moves the completions the device pushed into the ring. It runs
// inside the device's push, with the pushing QP's lock held; a completion
// another QP pushed meanwhile is moved too, while that QP waits in its own
// drain, its state unchanged.
func (c *CQ) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		n, _ := c.qcq.Poll(c.wcs[:])
		if n == 0 {
			break
		}
		if c.closed {
			continue
		}
		for i := range n {
			if r := c.owner.QP(c.wcs[i].QPN); r != nil {
				r.retire(&c.wcs[i])
			}
			c.pushLocked(&c.wcs[i])
		}
	}
	if !c.closed {
		// A closed CQ's ring is unmapped: a QP flushed after its process
		// detached (a connection closing in the background) must not touch it.
		c.publishLocked()
	}
}

// push writes one completion of the daemon's own into the ring.
func (c *CQ) push(wc *verbs.WC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.pushLocked(wc)
		c.publishLocked()
	}
}

// pushLocked writes wc into the next slot. A full ring, or one whose
// consumer index the process spoilt, loses it: the ring is marked
// overflowed, and the QP that completed is moved to the error state, as a
// CQ overflow does to an embedded device's QPs.
func (c *CQ) pushLocked(wc *verbs.WC) {
	if used := c.prod - c.ring.Consumer().Load(); used >= c.depth {
		c.ring.Overflow().Store(1)
		c.cnt.CQOverflows.Add(1)
		c.owner.Overflowed(wc.QPN)
		return
	}
	shm.EncodeCQE(c.ring.Slot(c.prod), wc)
	c.prod++
	c.written++
	if wc.WakesSolicited() {
		c.solicited++
	}
	c.cnt.CQEs.Add(1)
}

// publishLocked makes the completions written visible and wakes the
// process if it waits for them.
//
// The counts of completions written follow the producer index: a reader
// that sees a count finds its completions in the ring (an arming
// satisfied by a count it saw, whose completion the poll that follows did
// not find, would wait for a count that had already changed).
//
// A ring armed for solicited completions (shm.ArmedSolicited) is signalled
// only once the count of those moved. The process may change the arming
// meanwhile (widen it to any completion, withdraw it), which the
// compare-and-swap sees: the word is then taken as it is, whatever the
// process wrote, and not looked at again, so that a process writing it
// without end cannot hold the daemon here.
func (c *CQ) publishLocked() {
	solicited := c.solicited != c.published
	c.published = c.solicited
	c.ring.Producer().Store(c.prod)
	c.ring.Written().Store(c.written)
	c.ring.Solicited().Store(c.solicited)
	armed := c.ring.Armed()
	a := armed.Load()
	if a == 0 || a == shm.ArmedSolicited && !solicited {
		return
	}
	if armed.CompareAndSwap(a, 0) || armed.Swap(0) != 0 {
		shm.Signal(c.efd)
	}
}

// Resize moves the completions the process has not polled, from the
// ring's consumer index on, to the start of a new ring of depth entries,
// and resizes the device's CQ alike (qp.CQ.Resize, whose errors it
// returns); the old ring is unmapped, and the process, which polls
// nothing meanwhile, maps the new one (TakeFD) and polls it from 0. The
// ring's armed and overflow flags and its counts of completions written
// move with the completions.
func (c *CQ) Resize(depth int) error {
	if depth <= 0 || depth > qp.MaxCQE {
		return fmt.Errorf("completion queue depth %d: %w", depth, qp.ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("resizing a destroyed CQ: %w", qp.ErrInvalid)
	}
	cons := c.ring.Consumer().Load()
	held := c.prod - cons
	switch {
	case held > c.depth:
		return fmt.Errorf("completion ring consumer index %d, producer %d: %w", cons, c.prod, shm.ErrCorrupt)
	case uint32(depth) < held:
		return fmt.Errorf("completion queue depth %d, holding %d completions: %w", depth, held, qp.ErrInvalid)
	}
	m, ring, err := newRing("softnic-cq", depth, shm.CQESize)
	if err != nil {
		return err
	}
	if err := c.qcq.Resize(depth); err != nil {
		m.Close()
		return err
	}
	for i := range held {
		copy(ring.Slot(i), c.ring.Slot(cons+i))
	}
	ring.Producer().Store(held)
	ring.Written().Store(c.written)
	ring.Solicited().Store(c.solicited)
	ring.Armed().Store(c.ring.Armed().Load())
	ring.Overflow().Store(c.ring.Overflow().Load())
	c.m.Close()
	c.m, c.ring, c.prod, c.depth = m, ring, held, uint32(depth)
	return nil
}

// Close unmaps the ring and closes the eventfd (and the epoll fd if it
// was not taken), and reports whether they were open until now.
func (c *CQ) Close() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	c.m.Close()
	for _, fd := range []int{c.efd, c.epfd} {
		if fd >= 0 {
			shm.CloseFD(fd)
		}
	}
	return true
}
