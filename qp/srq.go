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

// SRQ is a shared receive queue: receive WQEs that any of the QPs attached to
// it consume. It is safe for concurrent use.
type SRQ struct {
	mu sync.Mutex
	q  recvQueue
	pd mr.PDHandle
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

func (s *SRQ) pop(w *recvWQE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.pop(w)
}
