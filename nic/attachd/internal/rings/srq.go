package rings

import (
	"fmt"
	"sync"

	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// SRQ is the ring an attached process fills a device SRQ through.
type SRQ struct {
	qsrq   *qp.SRQ // the device's SRQ
	maxSGE int
	cnt    *Counts

	mu      sync.Mutex
	m       *shm.Mapping
	ring    shm.Ring
	fetched uint32
	rwr     verbs.RecvWR
	rsgl    []verbs.SGE
	broken  error
	closed  bool
}

// NewSRQ makes the ring of qsrq, an SRQ of depth entries of at most
// maxSGE SGEs each.
func NewSRQ(qsrq *qp.SRQ, depth, maxSGE int, cnt *Counts) (*SRQ, error) {
	r := &SRQ{qsrq: qsrq, maxSGE: maxSGE, cnt: cnt, rsgl: make([]verbs.SGE, 0, maxSGE)}
	var err error
	if r.m, r.ring, err = newRing("softnic-srq", depth, shm.RecvSlotSize(maxSGE)); err != nil {
		return nil, err
	}
	return r, nil
}

// Ring is the SRQ's ring as the process maps it.
func (r *SRQ) Ring() shm.Ring { return r.ring }

// TakeFD returns the descriptor of the ring, for the process to map; the
// caller closes it once sent.
func (r *SRQ) TakeFD() int { return r.m.TakeFD() }

// pull takes the new work requests of the ring into the SRQ, and reports
// whether there were any; an error says the ring is corrupt.
func (r *SRQ) pull() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.broken != nil {
		return false, r.broken
	}
	prod, err := posted(r.ring, "SRQ", r.fetched, r.qsrq.Len())
	if err != nil {
		r.broken = err
		return true, err
	}
	if prod == r.fetched {
		return false, nil
	}
	for ; r.fetched != prod; r.fetched++ {
		r.cnt.RecvWQEs.Add(1)
		err := shm.DecodeRecv(r.ring.Slot(r.fetched), r.maxSGE, &r.rwr, r.rsgl)
		if err == nil {
			err = r.qsrq.PostRecv(&r.rwr)
		}
		if err != nil {
			r.broken = fmt.Errorf("SRQ work request %d: %w", r.rwr.ID, err)
			return true, r.broken
		}
	}
	r.publishLocked()
	return true, nil
}

func (r *SRQ) publish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed && r.broken == nil {
		r.publishLocked()
	}
}

func (r *SRQ) publishLocked() {
	r.ring.Consumer().Store(r.fetched - uint32(r.qsrq.Len()))
}

// Modify takes the work requests the ring holds into the SRQ, then
// changes the SRQ's attributes (qp.SRQ.Modify, whose errors it returns).
// A resized SRQ gets a new ring, the old one unmapped: the process, which
// posts nothing meanwhile, maps it (TakeFD) and posts to it from prod on.
func (r *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) (resized bool, prod uint32, err error) {
	if _, err := r.pull(); err != nil {
		return false, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, 0, fmt.Errorf("modifying a destroyed SRQ: %w", qp.ErrInvalid)
	}
	resized = mask&verbs.SRQMaxWR != 0 && attr.MaxWR != r.qsrq.Attr().MaxWR
	var m *shm.Mapping
	var ring shm.Ring
	if resized {
		if attr.MaxWR <= 0 || attr.MaxWR > qp.MaxSRQWR {
			return false, 0, fmt.Errorf("SRQ of %d WRs: %w", attr.MaxWR, qp.ErrInvalid)
		}
		if m, ring, err = newRing("softnic-srq", attr.MaxWR, shm.RecvSlotSize(r.maxSGE)); err != nil {
			return false, 0, err
		}
	}
	if err := r.qsrq.Modify(attr, mask); err != nil {
		if m != nil {
			m.Close()
		}
		return false, 0, err
	}
	if resized {
		r.m.Close()
		r.m, r.ring, r.fetched = m, ring, uint32(r.qsrq.Len())
		ring.Producer().Store(r.fetched)
		r.publishLocked()
	}
	return resized, r.fetched, nil
}

// Close unmaps the ring, and reports whether it was mapped until now.
func (r *SRQ) Close() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	r.m.Close()
	return true
}
