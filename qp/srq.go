package qp

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
)

// recvWQE is a posted receive work request with its SGL copied.
type recvWQE struct {
	id  uint64
	sgl []verbs.SGE // backing array of maxSGE entries, owned by the slot
}

// recvQueue is a bounded FIFO of receive WQEs, the storage of both a QP's
// receive queue and an SRQ.
type recvQueue struct {
	slots  []recvWQE
	head   int
	count  int
	maxSGE int
}

func newRecvQueue(depth, maxSGE int) recvQueue {
	q := recvQueue{slots: make([]recvWQE, depth), maxSGE: maxSGE}
	sgl := make([]verbs.SGE, depth*maxSGE)
	for i := range q.slots {
		q.slots[i].sgl = sgl[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
	return q
}

func (q *recvQueue) post(wr *verbs.RecvWR) error {
	if len(wr.SGL) > q.maxSGE {
		return fmt.Errorf("receive WR with %d SGEs, at most %d: %w", len(wr.SGL), q.maxSGE, ErrInvalid)
	}
	for i := range wr.SGL {
		if uint64(wr.SGL[i].Length)+wr.SGL[i].Addr < wr.SGL[i].Addr {
			return fmt.Errorf("receive SGE %d wraps the address space: %w", i, ErrInvalid)
		}
	}
	if q.count == len(q.slots) {
		return fmt.Errorf("receive queue full (%d WRs): %w", len(q.slots), ErrNoMem)
	}
	s := &q.slots[(q.head+q.count)%len(q.slots)]
	s.id = wr.ID
	s.sgl = append(s.sgl[:0], wr.SGL...)
	q.count++
	return nil
}

// pop removes the oldest WQE into w (whose sgl must have maxSGE capacity).
func (q *recvQueue) pop(w *recvWQE) bool {
	if q.count == 0 {
		return false
	}
	s := &q.slots[q.head]
	w.id = s.id
	w.sgl = append(w.sgl[:0], s.sgl...)
	q.head = (q.head + 1) % len(q.slots)
	q.count--
	return true
}

// resize moves the queue's WQEs, in order, into a queue of depth slots,
// which holds them all.
func (q *recvQueue) resize(depth int) {
	n := newRecvQueue(depth, q.maxSGE)
	for i := range q.count {
		s := &q.slots[(q.head+i)%len(q.slots)]
		n.slots[i].id = s.id
		n.slots[i].sgl = append(n.slots[i].sgl, s.sgl...)
	}
	n.count = q.count
	*q = n
}

// SRQ is a shared receive queue: receive WQEs that any of the QPs attached to
// it consume. It is safe for concurrent use.
type SRQ struct {
	mu sync.Mutex
	q  recvQueue
	pd mr.PDHandle
	// limit is the armed srq_limit, 0 when disarmed; onLimit is told when
	// the WRs drop below it.
	limit   int
	onLimit func()
}

// NewSRQ returns an SRQ for QPs of protection domain pd, holding up to depth
// WRs of up to maxSGE elements.
func NewSRQ(pd mr.PDHandle, depth, maxSGE int) (*SRQ, error) {
	if depth <= 0 || depth > MaxSRQWR || maxSGE <= 0 || maxSGE > MaxSGE {
		return nil, fmt.Errorf("SRQ depth %d, max SGE %d: %w", depth, maxSGE, ErrInvalid)
	}
	return &SRQ{q: newRecvQueue(depth, maxSGE), pd: pd}, nil
}

// PostRecv adds a receive WR (ibv_post_srq_recv). ErrNoMem when full.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.post(wr)
}

// Len returns how many receive WRs are waiting.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.count
}

// pop takes the oldest WQE into w. When that leaves fewer WQEs than an
// armed limit, it disarms the limit and tells onLimit, outside the lock,
// as rxe raises IB_EVENT_SRQ_LIMIT_REACHED once per arming.
func (s *SRQ) pop(w *recvWQE) bool {
	s.mu.Lock()
	ok := s.q.pop(w)
	var fn func()
	if ok && s.limit > 0 && s.q.count < s.limit {
		s.limit = 0
		fn = s.onLimit
	}
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
	return ok
}

// SetOnLimit installs fn, called once each time an armed limit is
// reached (see verbs.SRQAttr.Limit), from the goroutine of the QP that took
// the work request, with that QP's lock held: fn must not wait. The NIC
// uses it to queue the SRQ's asynchronous event.
func (s *SRQ) SetOnLimit(fn func()) {
	s.mu.Lock()
	s.onLimit = fn
	s.mu.Unlock()
}

// Attr returns the SRQ's attributes (ibv_query_srq): Limit is 0 once the
// limit was reached.
func (s *SRQ) Attr() verbs.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: len(s.q.slots), MaxSGE: s.q.maxSGE, Limit: s.limit}
}

// Modify resizes the SRQ (verbs.SRQMaxWR) and arms or disarms its limit
// (verbs.SRQLimit), as ibv_modify_srq does; the work requests it holds
// stay, in order. As rxe, it fails with ErrInvalid, changing nothing,
// for a size of 0 or past MaxSRQWR, a size below the work requests the
// SRQ holds, and a limit past the size (the new one, when both change).
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, limit := len(s.q.slots), s.limit
	if mask&verbs.SRQMaxWR != 0 {
		size = attr.MaxWR
	}
	if mask&verbs.SRQLimit != 0 {
		limit = attr.Limit
	}
	switch {
	case mask&^(verbs.SRQMaxWR|verbs.SRQLimit) != 0:
		return fmt.Errorf("SRQ attribute mask %#x: %w", mask, ErrInvalid)
	case size <= 0 || size > MaxSRQWR:
		return fmt.Errorf("SRQ of %d WRs: %w", size, ErrInvalid)
	case size < s.q.count:
		return fmt.Errorf("SRQ of %d WRs holds %d: %w", size, s.q.count, ErrInvalid)
	case limit < 0 || limit > size:
		return fmt.Errorf("SRQ limit %d, past its %d WRs: %w", limit, size, ErrInvalid)
	}
	if size != len(s.q.slots) {
		s.q.resize(size)
	}
	s.limit = limit
	return nil
}
