package attachd

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd/internal/rings"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// This file is the daemon's side of the shared queues: the QPs, CQs and
// SRQs of an attached process whose queues are rings in memory both map.
// Package rings moves work requests from the rings into the device's QPs
// and completions from the device's CQs into the rings; what is here is
// what the session keeps for each (handles, bills, connections, doorbell
// slots) and what it does for the rings (look at a QP posted to
// meanwhile, fail a QP whose completion was lost).

// hostedQP is a device QP whose send and receive queues an attached
// process fills through rings. Its fields are guarded by the QP's lock
// once the QP exists.
type hostedQP struct {
	*rings.QP // its rings, which serve the device's hooks.Queues calls but Bind, Owner and Failed

	s    *session
	q    hooks.QP // the device's QP, set (Bind) before the QP is published
	pub  *nic.QP  // the same, as the public API has it, once made
	cfg  attachproto.QPConfig
	conn *nic.Conn // the connection the QP was made for, or the process made it with, if any
	// connOwns tells that the QP was made for conn, whose Close destroys it.
	connOwns bool
	slot     uint32 // its bit in the process's doorbell page (session.addQPLocked)
	// connecting is set while a dial or accept makes a connection with
	// the process's QP (nic.DialOptions.UseQP), under the session's lock.
	connecting bool

	// rings is the bill of the rings, released when they are unmapped;
	// bill the QP's own, released once the device's QP is destroyed.
	rings, bill quota.Bill
	released    bool
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
	h := &hostedQP{s: s, cfg: cfg}
	qc := nic.QPConfig{
		Type: cfg.Type, SendCQ: scq.cq, RecvCQ: rcq.cq, MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR,
		MaxSendSGE: cfg.MaxSendSGE, MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
	}
	setQueues(&qc, h)
	rc := rings.QPConfig{MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SendCQ: scq.CQ, RecvCQ: rcq.CQ}
	var srq *qp.SRQ
	if cfg.SRQ != 0 {
		hs, err := lookup[*hostedSRQ](s, cfg.SRQ)
		if err != nil {
			return nil, nic.QPConfig{}, fmt.Errorf("SRQ: %w", err)
		}
		qc.SRQ, rc.SRQ, srq = hs.srq, hs.SRQ, hs.qsrq
	}
	h.rings = ringBill(cfg.MaxSendWR, shm.SendSlotSize(cfg.MaxSendSGE, cfg.MaxInline))
	if srq == nil {
		h.rings = h.rings.Add(ringBill(cfg.MaxRecvWR, shm.RecvSlotSize(cfg.MaxRecvSGE)))
	}
	// The QP's queues and the scratch space of its rings.
	heap := qp.HeapCost(qp.Config{MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SRQ: srq}) +
		int64(cfg.MaxInline+(cfg.MaxSendSGE+cfg.MaxRecvSGE)*int(unsafe.Sizeof(verbs.SGE{}))+int(unsafe.Sizeof(*h)+unsafe.Sizeof(rings.QP{})))
	h.bill = quota.Of(quota.QPs, 1).Plus(quota.Heap, heap)
	if err := s.acct.Charge(h.rings.Add(h.bill)); err != nil {
		return nil, nic.QPConfig{}, err
	}
	if h.QP, err = rings.NewQP(rc, &s.ringCounts, s.log, h.missedPost); err != nil {
		s.acct.Release(h.rings.Add(h.bill))
		return nil, nic.QPConfig{}, err
	}
	return h, qc, nil
}

// Bind records the device's QP made over the rings.
func (h *hostedQP) Bind(q hooks.QP) {
	h.q = q
	h.QP.Bind(q)
}

// Owner is the process's user: the guard tells users apart.
func (h *hostedQP) Owner() uint32 { return uint32(h.s.uid) }

// Failed tells the process of its QP's error (qp_error).
func (h *hostedQP) Failed(cause verbs.WCStatus) { h.s.events.Post(asyncEvent{qp: h, cause: cause}) }

// missedPost has a request taken that the process posted to one of the
// QP's rings while the ring asked for no doorbell (rings.QP's
// PublishLocked): by the doorbell goroutine, for which the QP is marked
// and, if it sleeps (NeedWake set), woken here, or, while the device
// busy-polls, by the reader's next pass over the marks, which needs no
// wakeup: a mark made while busy was set is seen by the pass that
// BusyPolling(false) makes after clearing it. A doorbell goroutine that
// is awake (spinning after the process's last post, or driving the
// device that runs this) sees the mark in its next look, as it sees a
// process's, before it sets NeedWake and sleeps. The QP's lock is held.
func (h *hostedQP) missedPost() {
	h.s.bell.db.Mark(h.slot)
	if !h.s.srv.busy.Load() && h.s.bell.needWake.Load() != 0 {
		h.s.wake()
	}
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
	if h.UnmapLocked() {
		h.s.acct.Release(h.rings)
	}
}

// hostedCQ is a device CQ whose completions go to a ring the attached
// process polls (rings.CQ).
type hostedCQ struct {
	*rings.CQ
	s    *session
	cq   *nic.CQ
	bill quota.Bill
}

// newHostedCQ makes a CQ of depth entries, once its bill is charged: its
// entries, its array in the daemon's heap, its ring and eventfd.
func (s *session) newHostedCQ(depth int) (*hostedCQ, error) {
	if depth <= 0 || depth > qp.MaxCQE {
		return nil, fmt.Errorf("completion queue depth %d: %w", depth, nic.ErrInvalid)
	}
	bill := cqBill(depth)
	if err := s.acct.Charge(bill); err != nil {
		return nil, err
	}
	cq, err := s.dev.CreateCQ(depth)
	if err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	c := &hostedCQ{s: s, cq: cq, bill: bill}
	if c.CQ, err = rings.NewCQ(cqOf(cq), depth, &s.ringCounts, ringOwner{s}); err != nil {
		cq.Destroy()
		s.acct.Release(bill)
		return nil, err
	}
	return c, nil
}

// cqBill is what a CQ of depth entries costs: its entries, its array in
// the daemon's heap, its ring and eventfd.
func cqBill(depth int) quota.Bill {
	return ringBill(depth, shm.CQESize).Add(quota.Of(quota.CQEntries, int64(depth)).
		Plus(quota.Heap, qp.CQHeapCost(depth)+int64(unsafe.Sizeof(hostedCQ{})+unsafe.Sizeof(rings.CQ{}))).Plus(quota.Descriptors, 1))
}

// resize resizes the CQ and its ring (rings.CQ.Resize), the bill of the
// new size charged first: while it runs, the process is charged for both.
func (c *hostedCQ) resize(depth int) error {
	if depth <= 0 || depth > qp.MaxCQE {
		return fmt.Errorf("completion queue depth %d: %w", depth, nic.ErrInvalid)
	}
	bill := cqBill(depth)
	if err := c.s.acct.Charge(bill); err != nil {
		return err
	}
	if err := c.Resize(depth); err != nil {
		c.s.acct.Release(bill)
		return err
	}
	c.s.acct.Release(c.bill)
	c.bill = bill
	return nil
}

func (c *hostedCQ) close() {
	if c.Close() {
		c.s.acct.Release(c.bill)
	}
}

// qpByNum returns the process's QP numbered qpn, or nil.
func (s *session) qpByNum(qpn uint32) *hostedQP {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byQPN[qpn]
}

// ringOwner is the session as its CQs' rings see it (rings.Owner).
type ringOwner struct{ s *session }

func (o ringOwner) QP(qpn uint32) *rings.QP {
	if h := o.s.qpByNum(qpn); h != nil {
		return h.QP
	}
	return nil
}

func (o ringOwner) Overflowed(qpn uint32) {
	if h := o.s.qpByNum(qpn); h != nil {
		o.s.fail(h)
	}
}

// hostedSRQ is a device SRQ an attached process fills through a ring
// (rings.SRQ).
type hostedSRQ struct {
	*rings.SRQ
	s    *session
	srq  *nic.SRQ
	qsrq *qp.SRQ // srq's, in the embedded device
	bill quota.Bill
}

// newHostedSRQ makes an SRQ of pd, once its bill is charged: its entries,
// its array in the daemon's heap and its ring.
func (s *session) newHostedSRQ(pd *nic.PD, depth, maxSGE int) (*hostedSRQ, error) {
	if depth <= 0 || depth > qp.MaxSRQWR || maxSGE <= 0 || maxSGE > qp.MaxSGE {
		return nil, fmt.Errorf("SRQ depth %d, max SGE %d: %w", depth, maxSGE, nic.ErrInvalid)
	}
	bill := srqBill(depth, maxSGE)
	if err := s.acct.Charge(bill); err != nil {
		return nil, err
	}
	srq, err := pd.CreateSRQ(depth, maxSGE)
	if err != nil {
		s.acct.Release(bill)
		return nil, err
	}
	r := &hostedSRQ{s: s, srq: srq, qsrq: srqOf(srq), bill: bill}
	if r.SRQ, err = rings.NewSRQ(r.qsrq, depth, maxSGE, &s.ringCounts); err != nil {
		srq.Destroy()
		s.acct.Release(bill)
		return nil, err
	}
	r.qsrq.SetOnLimit(func() { s.events.Post(asyncEvent{srq: r}) })
	return r, nil
}

// srqBill is what an SRQ of depth entries of maxSGE SGEs costs: its
// entries, its array in the daemon's heap and its ring.
func srqBill(depth, maxSGE int) quota.Bill {
	return ringBill(depth, shm.RecvSlotSize(maxSGE)).Add(quota.Of(quota.SRQEntries, int64(depth)).
		Plus(quota.Heap, qp.SRQHeapCost(depth, maxSGE)+int64(maxSGE)*int64(unsafe.Sizeof(verbs.SGE{}))))
}

// modify changes the SRQ's attributes (rings.SRQ.Modify); a resize is
// charged as hostedCQ.resize is.
func (r *hostedSRQ) modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) (resized bool, prod uint32, err error) {
	if mask&verbs.SRQMaxWR == 0 || attr.MaxWR <= 0 || attr.MaxWR > qp.MaxSRQWR {
		return r.Modify(attr, mask)
	}
	bill := srqBill(attr.MaxWR, r.qsrq.Attr().MaxSGE)
	if err := r.s.acct.Charge(bill); err != nil {
		return false, 0, err
	}
	if resized, prod, err = r.Modify(attr, mask); err != nil || !resized {
		r.s.acct.Release(bill)
		return resized, prod, err
	}
	r.s.acct.Release(r.bill)
	r.bill = bill
	return true, prod, nil
}

func (r *hostedSRQ) close() {
	if r.Close() {
		r.s.acct.Release(r.bill)
	}
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
	pd   *nic.PD // nil for ud
	cfg  attachproto.QPConfig
	ud   bool       // of the UDP port space (listen_ud): its requests are resolutions
	held bool       // made held, not opened yet (open_listener)
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
