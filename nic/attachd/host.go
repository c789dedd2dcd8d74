package attachd

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// This file is the daemon's side of the shared queues: it moves work
// requests from an attached process's rings into the device's QPs, and
// completions from the device's CQs into the process's rings. Everything
// read from a ring is copied out and checked first (shm's decoders); a
// ring or a work request that does not check fails its QP alone.

// hostedQP is a device QP whose send and receive queues an attached
// process fills through rings. Its fields are guarded by the QP's lock
// once the QP exists.
type hostedQP struct {
	s    *session
	q    hooks.QP // the device's QP, set (Bind) before the QP is published
	pub  *nic.QP  // the same, as the public API has it, once made
	cfg  attachproto.QPConfig
	scq  *hostedCQ // where failed work requests complete
	rcq  *hostedCQ
	srq  *hostedSRQ
	conn *nic.Conn // the connection the QP was made for, or the process made it with, if any
	// connOwns tells that the QP was made for conn, whose Close destroys it.
	connOwns bool
	slot     uint32 // its bit in the process's doorbell page (session.addQPLocked)
	// connecting is set while a dial or accept makes a connection with
	// the process's QP (nic.DialOptions.UseQP), under the session's lock.
	connecting bool

	sqMap, rqMap *shm.Mapping
	sq, rq       shm.Ring // rq is unused with an SRQ
	// sqFetched and rqFetched count the work requests taken from the
	// rings. A ring's consumer index, published for the process, counts
	// those the QP has finished with: the ring never holds more than the
	// QP's queue.
	sqFetched, rqFetched uint32
	lim                  shm.SendLimits
	// rings is the bill of the rings, released when they are unmapped;
	// bill the QP's own, released once the device's QP is destroyed.
	rings, bill quota.Bill
	released    bool

	// Scratch space for decoding, reused so that the data path does not
	// allocate.
	wr     verbs.SendWR
	sgl    []verbs.SGE
	inline []byte
	bind   mr.BindRequest
	rwr    verbs.RecvWR
	rsgl   []verbs.SGE

	failed bool // a bad work request or ring index failed the QP (counted and logged once)
	broken bool // a ring index went wrong: the rings are no longer read
	closed bool // the rings are unmapped
}

// newHostedQP makes the rings of a QP of pd with configuration a, and the
// QPConfig that creates the QP over them.
func (s *session) newHostedQP(pd *nic.PD, a attachproto.QPConfig) (*hostedQP, nic.QPConfig, error) {
	cfg := a.WithDefaults()
	// The QP's own limits, checked before its rings are made and charged.
	if cfg.MaxSendWR < 0 || cfg.MaxSendWR > qp.MaxQPWR || cfg.MaxRecvWR < 0 || cfg.MaxRecvWR > qp.MaxQPWR ||
		cfg.MaxSendSGE < 0 || cfg.MaxSendSGE > qp.MaxSGE || cfg.MaxRecvSGE < 0 || cfg.MaxRecvSGE > qp.MaxSGE ||
		cfg.MaxInline < 0 || cfg.MaxInline > qp.MaxInlineData {
		return nil, nic.QPConfig{}, fmt.Errorf("QP queue sizes %+v: %w", cfg, nic.ErrInvalid)
	}
	scq, err := lookup[*hostedCQ](s, cfg.SendCQ)
	if err != nil {
		return nil, nic.QPConfig{}, fmt.Errorf("send CQ: %w", err)
	}
	rcq, err := lookup[*hostedCQ](s, cfg.RecvCQ)
	if err != nil {
		return nil, nic.QPConfig{}, fmt.Errorf("receive CQ: %w", err)
	}
	h := &hostedQP{s: s, cfg: cfg, scq: scq, rcq: rcq, lim: shm.SendLimits{MaxSGE: cfg.MaxSendSGE, MaxInline: cfg.MaxInline}}
	qc := nic.QPConfig{
		Type: cfg.Type, SendCQ: scq.cq, RecvCQ: rcq.cq, MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR,
		MaxSendSGE: cfg.MaxSendSGE, MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
	}
	setQueues(&qc, h)
	if cfg.SRQ != 0 {
		if h.srq, err = lookup[*hostedSRQ](s, cfg.SRQ); err != nil {
			return nil, nic.QPConfig{}, fmt.Errorf("SRQ: %w", err)
		}
		qc.SRQ = h.srq.srq
	}
	sqSlot := shm.SendSlotSize(cfg.MaxSendSGE, cfg.MaxInline)
	h.rings = ringBill(cfg.MaxSendWR, sqSlot)
	var srq *qp.SRQ
	if h.srq != nil {
		srq = h.srq.qsrq
	} else {
		h.rings = h.rings.Add(ringBill(cfg.MaxRecvWR, shm.RecvSlotSize(cfg.MaxRecvSGE)))
	}
	// The QP's queues and the scratch space of newHostedQP.
	heap := qp.HeapCost(qp.Config{MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SRQ: srq}) +
		int64(cfg.MaxInline+(cfg.MaxSendSGE+cfg.MaxRecvSGE)*int(unsafe.Sizeof(verbs.SGE{}))+int(unsafe.Sizeof(*h)))
	h.bill = quota.Of(quota.QPs, 1).Plus(quota.Heap, heap)
	if err := s.acct.Charge(h.rings.Add(h.bill)); err != nil {
		return nil, nic.QPConfig{}, err
	}
	if h.sqMap, h.sq, err = newRing("softnic-sq", cfg.MaxSendWR, sqSlot); err != nil {
		h.close()
		return nil, nic.QPConfig{}, err
	}
	h.sq.Doorbell().Store(1) // an idle QP
	if h.srq == nil {
		if h.rqMap, h.rq, err = newRing("softnic-rq", cfg.MaxRecvWR, shm.RecvSlotSize(cfg.MaxRecvSGE)); err != nil {
			h.close()
			return nil, nic.QPConfig{}, err
		}
	}
	h.sgl = make([]verbs.SGE, 0, cfg.MaxSendSGE)
	h.inline = make([]byte, 0, cfg.MaxInline)
	h.rsgl = make([]verbs.SGE, 0, cfg.MaxRecvSGE)
	return h, qc, nil
}

// Bind records the device's QP made over the rings.
func (h *hostedQP) Bind(q hooks.QP) { h.q = q }

// Owner is the process's user: the guard tells users apart.
func (h *hostedQP) Owner() uint32 { return uint32(h.s.uid) }

// Failed tells the process of its QP's error (qp_error).
func (h *hostedQP) Failed(cause verbs.WCStatus) { h.s.qpErrors.Post(qpFailure{h, cause}) }

// newRing makes a ring of n slots of size bytes in a memfd of its own.
func newRing(name string, n, size int) (*shm.Mapping, shm.Ring, error) {
	m, err := shm.Create(name, shm.RingSize(n, size))
	if err != nil {
		return nil, shm.Ring{}, err
	}
	r, err := shm.NewRing(m.Bytes(), n, size)
	if err != nil {
		m.Close()
		return nil, shm.Ring{}, err
	}
	return m, r, nil
}

// ringFDs returns the descriptors of the QP's rings, for the process to
// map; the caller closes them once sent.
func (h *hostedQP) ringFDs() []int {
	fds := []int{h.sqMap.TakeFD()}
	if h.rqMap != nil {
		fds = append(fds, h.rqMap.TakeFD())
	}
	return fds
}

// result describes the QP to the process.
func (h *hostedQP) result(handle uint32) attachproto.QPResult {
	return attachproto.QPResult{H: handle, QPN: h.q.Num(), Slot: h.slot, Config: h.cfg, Attr: h.pub.Attr()}
}

// serviceLocked takes the new work requests of the QP's rings into the QP
// and sends what they start; the doorbell goroutine calls it. It reports
// whether there were any, and whether what they sent went to a QP of the
// daemon's own device (hooks.QP.FlushLocked). The QP's lock is held.
func (h *hostedQP) serviceLocked() (worked, self bool) {
	if h.q.DestroyedLocked() {
		return false, false
	}
	worked = h.PullRecvLocked()
	if h.PullSendLocked() {
		worked = true
	}
	if worked {
		self = h.q.FlushLocked()
	}
	return worked, self
}

// PullSendLocked takes the new send work requests of the QP's ring into
// the QP, and reports whether there were any. The device calls it each
// time it runs the QP, so that a QP with requests
// outstanding takes new ones without a doorbell (see PublishLocked).
// The QP's lock is held.
func (h *hostedQP) PullSendLocked() bool {
	q := h.q
	if h.closed || h.broken {
		return false
	}
	prod, err := posted(h.sq, "send", h.sqFetched, q.TransportLocked().Status().SendQueued)
	if err != nil {
		h.breakLocked(err)
		return true
	}
	if prod == h.sqFetched {
		return false
	}
	for ; h.sqFetched != prod; h.sqFetched++ {
		h.s.cnt[cntSendWQEs].Add(1)
		err := shm.DecodeSend(h.sq.Slot(h.sqFetched), h.lim, &h.wr, h.sgl, h.inline, &h.bind)
		if err == nil {
			err = q.TransportLocked().PostSend(&h.wr)
		}
		if err != nil {
			h.failLocked(h.wr.ID, verbs.WCSend, err)
		}
	}
	return true
}

// posted reads the producer index of a ring the process posts to, which
// it has fetched requests from up to fetched, queued of them not finished
// yet. An index more requests ahead of the finished ones than the ring has
// slots cannot be right (ErrCorrupt): the process wrote over requests the
// daemon had not read, or garbage.
func posted(ring shm.Ring, what string, fetched uint32, queued int) (uint32, error) {
	prod := ring.Producer().Load()
	retired := fetched - uint32(queued)
	if prod-fetched > ring.Len() || prod-retired > ring.Len() {
		return 0, fmt.Errorf("%s ring producer index %d: %d requests fetched, %d finished, %d slots: %w",
			what, prod, fetched, retired, ring.Len(), shm.ErrCorrupt)
	}
	return prod, nil
}

// CountPostedLocked adds to st the work requests the process posted that
// the QP has not taken from its rings yet (it takes receives as packets
// come), so that the daemon's view of the QP (softnic qp) counts them as
// the process's own does. An index beyond the ring counts nothing: it is
// corrupt, which the next pull reports. The QP's lock is held.
func (h *hostedQP) CountPostedLocked(st *qp.Status) {
	if h.closed || h.broken {
		return
	}
	if n := h.sq.Producer().Load() - h.sqFetched; n <= h.sq.Len() {
		st.SendQueued += int(n)
	}
	if h.srq == nil {
		if n := h.rq.Producer().Load() - h.rqFetched; n <= h.rq.Len() {
			st.RecvQueued += int(n)
		}
	}
}

// PullRecvLocked takes the new receive work requests of the QP's ring (or
// its SRQ's) into the QP, and reports whether there were any. It runs
// before the QP takes a packet, as rxe's responder reads the receive
// queue, so that a receive posted before a SEND arrives is found without
// a doorbell. The QP's lock is held.
func (h *hostedQP) PullRecvLocked() bool {
	if h.closed || h.broken {
		return false
	}
	if h.srq != nil {
		worked, err := h.srq.pull()
		if err != nil {
			h.breakLocked(err)
		}
		return worked
	}
	q := h.q
	prod, err := posted(h.rq, "receive", h.rqFetched, q.TransportLocked().Status().RecvQueued)
	if err != nil {
		h.breakLocked(err)
		return true
	}
	if prod == h.rqFetched {
		return false
	}
	for ; h.rqFetched != prod; h.rqFetched++ {
		h.s.cnt[cntRecvWQEs].Add(1)
		err := shm.DecodeRecv(h.rq.Slot(h.rqFetched), h.cfg.MaxRecvSGE, &h.rwr, h.rsgl)
		if err == nil {
			err = q.TransportLocked().PostRecv(&h.rwr)
		}
		if err != nil {
			h.failLocked(h.rwr.ID, verbs.WCRecv, err)
		}
	}
	return true
}

// PublishLocked tells the process how many slots of each ring the QP is
// done with, and whether posting needs a doorbell; the device calls it
// whenever the QP has run. The QP's lock is held.
//
// While the QP has send requests outstanding, the device comes back to it
// (a response, an ACK, a timer) and takes new requests then: the process
// need not ring. Receive requests are taken as packets arrive; only a QP
// in the error state, which completes them at once, needs a doorbell for
// them.
func (h *hostedQP) PublishLocked() {
	if h.closed || h.broken {
		return
	}
	st := h.q.TransportLocked().Status()
	h.sq.Consumer().Store(h.sqFetched - uint32(st.SendQueued))
	h.askDoorbell(h.sq, st.SendQueued == 0, h.sqFetched)
	if h.srq != nil {
		h.srq.publish()
	} else {
		h.rq.Consumer().Store(h.rqFetched - uint32(st.RecvQueued))
		h.askDoorbell(h.rq, st.State == verbs.Err, h.rqFetched)
	}
}

// askDoorbell sets whether posting to r needs a doorbell. Asking for one
// again, it looks at the ring once more: a request posted while the flag
// was clear (a process that polled the completion of the QP's last send
// and posted again before this) is taken by the doorbell goroutine, for
// which the QP is marked and woken here, or, while the device busy-polls,
// by the reader's next pass over the marks, which needs no wakeup: a mark
// made while busy was set is seen by the pass that BusyPolling(false)
// makes after clearing it.
func (h *hostedQP) askDoorbell(r shm.Ring, need bool, fetched uint32) {
	flag := r.Doorbell()
	switch {
	case !need:
		flag.Store(0)
	case flag.Load() == 0:
		flag.Store(1)
		if r.Producer().Load() != fetched {
			h.s.bell.db.Mark(h.slot)
			if !h.s.srv.busy.Load() {
				h.s.wake()
			}
		}
	}
}

// retire publishes, before wc reaches the process, that the work request
// wc completes no longer holds a slot of the QP's ring: a process that
// polls a completion and posts again at once must find the room the
// embedded QP would give it. The QP pushes a send completion just before
// it retires the WQE (qp's completeInOrder), so the WQE still counts as
// queued here; a receive WQE left the queue when its message began.
func (h *hostedQP) retire(wc *verbs.WC) {
	if h.closed || h.broken {
		return
	}
	st := h.q.TransportLocked().Status()
	switch wc.Opcode {
	case verbs.WCRecv, verbs.WCRecvWriteImm:
		if h.srq != nil {
			h.srq.publish()
		} else {
			h.rq.Consumer().Store(h.rqFetched - uint32(st.RecvQueued))
		}
	default:
		h.sq.Consumer().Store(h.sqFetched - uint32(st.SendQueued) + 1)
	}
}

// failLocked fails the QP for a work request it cannot carry out (id,
// found corrupt or refused by the QP): the QP moves to the error state,
// which flushes the work requests before it, then the request completes
// with LOC_QP_OP_ERR, and those after it are flushed as they come. Only
// the first refusal is logged: a process that keeps filling its ring with
// garbage must not flood the daemon's log. The QP's lock is held.
func (h *hostedQP) failLocked(id uint64, op verbs.WCOpcode, why error) {
	q := h.q
	if h.firstFailure() {
		h.s.log.Warn("attached QP failed: bad work request", slog.String("qpn", fmt.Sprintf("%#x", q.Num())),
			slog.Uint64("wr_id", id), slog.Any("error", why))
	}
	q.TransportLocked().Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	cq := h.scq
	if op == verbs.WCRecv {
		cq = h.rcq
	}
	cq.push(&verbs.WC{ID: id, Status: verbs.LocQPOpErr, Opcode: op, QPN: q.Num()})
}

// breakLocked fails the QP for a ring whose index cannot be right: its
// rings are not read any more. The QP's lock is held.
func (h *hostedQP) breakLocked(why error) {
	if h.firstFailure() {
		h.s.log.Warn("attached QP failed: corrupt ring", slog.String("qpn", fmt.Sprintf("%#x", h.q.Num())), slog.Any("error", why))
	}
	h.broken = true
	h.q.TransportLocked().Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	h.scq.push(&verbs.WC{Status: verbs.LocQPOpErr, Opcode: verbs.WCSend, QPN: h.q.Num()})
}

// firstFailure reports whether the QP fails for the first time, and
// counts it if so. The QP's lock is held.
func (h *hostedQP) firstFailure() bool {
	if h.failed {
		return false
	}
	h.failed = true
	h.s.cnt[cntBadQueues].Add(1)
	return true
}

// close unmaps the QP's rings and releases its bill, once the device's
// QP is destroyed or was never made.
func (h *hostedQP) close() {
	h.unmap()
	if h.q != nil {
		h.q.Lock()
		defer h.q.Unlock()
	}
	if !h.released {
		h.released = true
		h.s.acct.Release(h.bill)
	}
}

// unmap unmaps the QP's rings; the QP no longer reads or writes them.
func (h *hostedQP) unmap() {
	if h.q != nil {
		h.q.Lock()
		defer h.q.Unlock()
	}
	if h.closed {
		return
	}
	h.closed = true
	for _, m := range []*shm.Mapping{h.sqMap, h.rqMap} {
		if m != nil {
			m.Close()
		}
	}
	h.s.acct.Release(h.rings)
}

// hostedCQ is a device CQ whose completions go to a ring the attached
// process polls. Completions are moved the moment the device pushes them
// (the CQ's notify function), on the goroutine that pushed them.
type hostedCQ struct {
	s     *session
	cq    *nic.CQ
	qcq   *qp.CQ // cq's, in the embedded device
	depth uint32

	mu     sync.Mutex
	m      *shm.Mapping
	ring   shm.Ring
	efd    int    // signalled when the process armed the ring
	prod   uint32 // completions written, ever
	closed bool
	wcs    [16]verbs.WC
	bill   quota.Bill
}

// newHostedCQ makes a CQ of depth entries, once its bill is charged: its
// entries, its array in the daemon's heap, its ring and eventfd.
func (s *session) newHostedCQ(depth int) (*hostedCQ, error) {
	if depth <= 0 || depth > qp.MaxCQE {
		return nil, fmt.Errorf("completion queue depth %d: %w", depth, nic.ErrInvalid)
	}
	bill := ringBill(depth, shm.CQESize).Add(quota.Of(quota.CQEntries, int64(depth)).
		Plus(quota.Heap, qp.CQHeapCost(depth)+int64(unsafe.Sizeof(hostedCQ{}))).Plus(quota.Descriptors, 1))
	if err := s.acct.Charge(bill); err != nil {
		return nil, err
	}
	cq, err := s.dev.CreateCQ(depth)
	if err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	c := &hostedCQ{s: s, cq: cq, qcq: cqOf(cq), depth: uint32(depth), efd: -1, bill: bill}
	if c.m, c.ring, err = newRing("softnic-cq", depth, shm.CQESize); err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	if c.efd, err = shm.NewEventFD(); err != nil {
		c.close()
		return nil, err
	}
	c.qcq.SetNotify(c.drain)
	return c, nil
}

// drain moves the completions the device pushed into the ring. It runs
// inside the device's push, with the pushing QP's lock held; a completion
// another QP pushed meanwhile is moved too, while that QP waits in its own
// drain, its state unchanged.
func (c *hostedCQ) drain() {
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
			if h := c.s.qpByNum(c.wcs[i].QPN); h != nil {
				h.retire(&c.wcs[i])
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
func (c *hostedCQ) push(wc *verbs.WC) {
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
func (c *hostedCQ) pushLocked(wc *verbs.WC) {
	if used := c.prod - c.ring.Consumer().Load(); used >= c.depth {
		c.ring.Overflow().Store(1)
		c.s.cnt[cntCQOverflows].Add(1)
		if h := c.s.qpByNum(wc.QPN); h != nil {
			c.s.fail(h)
		}
		return
	}
	shm.EncodeCQE(c.ring.Slot(c.prod), wc)
	c.prod++
	c.s.cnt[cntCQEs].Add(1)
}

// publishLocked makes the completions written visible and wakes the
// process if it waits for them.
func (c *hostedCQ) publishLocked() {
	c.ring.Producer().Store(c.prod)
	if armed := c.ring.Armed(); armed.Load() != 0 && armed.Swap(0) != 0 {
		shm.Signal(c.efd)
	}
}

func (c *hostedCQ) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.m.Close()
	if c.efd >= 0 {
		shm.CloseFD(c.efd)
	}
	c.s.acct.Release(c.bill)
}

// qpByNum returns the process's QP numbered qpn, or nil.
func (s *session) qpByNum(qpn uint32) *hostedQP {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byQPN[qpn]
}

// hostedSRQ is a device SRQ an attached process fills through a ring.
type hostedSRQ struct {
	s      *session
	srq    *nic.SRQ
	qsrq   *qp.SRQ // srq's, in the embedded device
	depth  int
	maxSGE int

	mu      sync.Mutex
	m       *shm.Mapping
	ring    shm.Ring
	fetched uint32
	rwr     verbs.RecvWR
	rsgl    []verbs.SGE
	broken  error
	closed  bool
	bill    quota.Bill
}

// newHostedSRQ makes an SRQ of pd, once its bill is charged: its entries,
// its array in the daemon's heap and its ring.
func (s *session) newHostedSRQ(pd *nic.PD, depth, maxSGE int) (*hostedSRQ, error) {
	if depth <= 0 || depth > qp.MaxSRQWR || maxSGE <= 0 || maxSGE > qp.MaxSGE {
		return nil, fmt.Errorf("SRQ depth %d, max SGE %d: %w", depth, maxSGE, nic.ErrInvalid)
	}
	bill := ringBill(depth, shm.RecvSlotSize(maxSGE)).Add(quota.Of(quota.SRQEntries, int64(depth)).
		Plus(quota.Heap, qp.SRQHeapCost(depth, maxSGE)+int64(maxSGE)*int64(unsafe.Sizeof(verbs.SGE{}))))
	if err := s.acct.Charge(bill); err != nil {
		return nil, err
	}
	srq, err := pd.CreateSRQ(depth, maxSGE)
	if err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	r := &hostedSRQ{s: s, srq: srq, qsrq: srqOf(srq), depth: depth, maxSGE: maxSGE, rsgl: make([]verbs.SGE, 0, maxSGE), bill: bill}
	if r.m, r.ring, err = newRing("softnic-srq", depth, shm.RecvSlotSize(maxSGE)); err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	return r, nil
}

// pull takes the new work requests of the ring into the SRQ, and reports
// whether there were any; an error says the ring is corrupt.
func (r *hostedSRQ) pull() (bool, error) {
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
		r.s.cnt[cntRecvWQEs].Add(1)
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

func (r *hostedSRQ) publish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed && r.broken == nil {
		r.publishLocked()
	}
}

func (r *hostedSRQ) publishLocked() {
	r.ring.Consumer().Store(r.fetched - uint32(r.qsrq.Len()))
}

func (r *hostedSRQ) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	r.m.Close()
	r.s.acct.Release(r.bill)
}

// hostedBuf is a memfd of an attached process, mapped as an arena of the
// device's region table; its regions reference it.
type hostedBuf struct {
	arena *mr.Arena
	size  int        // the bytes the process asked for
	refs  int        // regions over it, under the session's lock
	bill  quota.Bill // its memory and mapping, released when it is unmapped
}

// hostedMR is a region of an attached process.
type hostedMR struct {
	r   *mr.Region // in the device's region table
	buf *hostedBuf
}

// deregister deregisters m and frees its memory once no region uses it.
func (s *session) deregister(m *hostedMR) error {
	if err := s.dev.Memory().Deregister(m.r); err != nil {
		return err
	}
	s.mu.Lock()
	m.buf.refs--
	last := m.buf.refs == 0
	s.mu.Unlock()
	if last {
		s.dev.Memory().FreeArena(m.buf.arena)
		s.acct.Release(m.buf.bill)
	}
	return nil
}

// hostedListener is a listener of an attached process: the QPs of the
// connections it accepts are made with cfg.
type hostedListener struct {
	l    *nic.Listener
	pd   *nic.PD
	cfg  attachproto.QPConfig
	bill quota.Bill // its backlog
}

// close closes the listener (its backlog is rejected) and releases its
// bill.
func (l *hostedListener) close(s *session) error {
	err := l.l.Close()
	s.acct.Release(l.bill)
	return err
}

// hostedRequest is a connection request an attached process took from its
// listener.
type hostedRequest struct {
	r *nic.Request
	l *hostedListener
}

// hostedConn is a connection the daemon's connection manager carries for
// an attached process.
type hostedConn struct {
	c     *nic.Conn
	qp    *hostedQP
	own   bool      // the QP was made for the connection: Close destroys it
	since time.Time // when it was established
	// The watcher tells the process when the connection ends, unless
	// the process disconnects it: then stop is closed, and the answer to
	// the disconnect waits for watched, so that no news of the end follows
	// that answer (the process no longer knows the handle then).
	stop, watched chan struct{}
}

// watch tells the process, as handle h, when the connection ends.
func (c *hostedConn) watch(s *session, h uint32) {
	defer close(c.watched)
	select {
	case <-c.c.Done():
		select {
		case <-c.stop:
		default:
			s.event(attachproto.EvConnEnded, attachproto.ConnEnded{H: h}, c.c.Err())
		}
	case <-c.stop:
	case <-s.ctx.Done():
	}
}
