package nic

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The embedded provider's objects: PDs, regions and windows in the
// device's region table, CQs, SRQs and QPs of package qp that the device
// drives itself.

// embeddedPD is a PD of the embedded device's region table.
type embeddedPD struct {
	dev *embeddedDevice
	pd  mr.PDHandle
}

func (d *embeddedDevice) allocPD(pub *Device) (*PD, error) {
	if d.closed() {
		return nil, ErrClosed
	}
	pd, err := d.mem.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: pub, prov: &embeddedPD{dev: d, pd: pd}}, nil
}

func (p *embeddedPD) handle() mr.PDHandle { return p.pd }
func (p *embeddedPD) dealloc() error      { return p.dev.mem.DeallocPD(p.pd) }

// ownPD returns the embedded PD of pd, if pd is of this device.
func (d *embeddedDevice) ownPD(pd *PD) (*embeddedPD, bool) {
	p, ok := pd.prov.(*embeddedPD)
	return p, ok && p.dev == d
}

// embeddedMR is a region of the embedded device's table; arena, if set, is
// the memory the device allocated or adopted for it.
type embeddedMR struct {
	dev   *embeddedDevice
	r     *mr.Region
	arena *mr.Arena
}

func (p *embeddedPD) newMR(pd *PD, r *mr.Region, buf []byte, arena *mr.Arena) *MR {
	return &MR{pd: pd, buf: buf, key: r.LKey(), addr: r.Addr(), prov: &embeddedMR{dev: p.dev, r: r, arena: arena}}
}

func (p *embeddedPD) regMR(pd *PD, buf []byte, access mr.Access) (*MR, error) {
	r, err := p.dev.mem.Register(p.pd, buf, access)
	if err != nil {
		return nil, err
	}
	return p.newMR(pd, r, buf, nil), nil
}

func (p *embeddedPD) allocMR(pd *PD, size int, access mr.Access) (*MR, error) {
	mem := p.dev.mem
	a, err := mem.NewArena(p.pd, uint64(size))
	if err != nil {
		return nil, err
	}
	r, err := mem.Register(p.pd, a.Bytes(), access)
	if err != nil {
		mem.FreeArena(a)
		return nil, err
	}
	return p.newMR(pd, r, a.Bytes(), a), nil
}

// regShared adopts the mapping as an arena of the region table: the
// device reaches the region's memory through it.
func (p *embeddedPD) regShared(pd *PD, m *shm.Mapping, skip, _ int, _ int64, n int, iova uint64, access mr.Access) (*MR, error) {
	mem := p.dev.mem
	a, err := mem.AdoptArena(p.pd, m.Bytes())
	if err != nil {
		m.Close()
		return nil, err
	}
	m.Release()
	r, err := mem.RegisterIOVA(p.pd, a.Bytes()[skip:skip+n], iova, access)
	if err != nil {
		mem.FreeArena(a)
		return nil, err
	}
	return p.newMR(pd, r, a.Bytes()[skip:skip+n], a), nil
}

func (p *embeddedPD) sgeAt(start, n uint64) (verbs.SGE, bool) {
	r, ok := p.dev.mem.RegionAt(p.pd, start, n)
	if ok {
		off := uint64(0)
		for _, seg := range r.Segments() {
			s := addrOf(seg)
			if start >= s && start+n <= s+uint64(len(seg)) {
				return verbs.SGE{Addr: r.Addr() + off + (start - s), Length: uint32(n), LKey: r.LKey()}, true
			}
			off += uint64(len(seg))
		}
	}
	return verbs.SGE{}, false
}

func (m *embeddedMR) region() *mr.Region { return m.r }

func (m *embeddedMR) dereg() error {
	if err := m.dev.mem.Deregister(m.r); err != nil {
		return err
	}
	if m.arena != nil {
		return m.dev.mem.FreeArena(m.arena)
	}
	return nil
}

// embeddedCQ is a CQ of package qp the embedded device completes to.
type embeddedCQ struct {
	dev *embeddedDevice
	cq  *qp.CQ
	pub *CQ
	// attending counts the waiters of the CQ that wait for the device's
	// socket themselves (embeddedDevice.attend): a completion written by
	// another goroutine interrupts their wait.
	attending atomic.Int32
}

func (d *embeddedDevice) createCQ(pub *Device, depth int) (*CQ, error) {
	c, err := qp.NewCQ(depth)
	if err != nil {
		return nil, err
	}
	ec := &embeddedCQ{dev: d, cq: c}
	cq := newCQ(pub, ec)
	ec.pub = cq
	c.SetNotify(ec.notify)
	return cq, nil
}

// notify is told of every completion written to the CQ: it wakes a waiter
// that sleeps on the CQ, and interrupts one that waits for the socket.
func (c *embeddedCQ) notify() {
	c.pub.signal()
	if c.attending.Load() > 0 {
		c.dev.conn.Interrupt()
	}
}

// ownCQ returns the embedded CQ of c, if c is of this device.
func (d *embeddedDevice) ownCQ(c *CQ) (*embeddedCQ, bool) {
	ec, ok := c.prov.(*embeddedCQ)
	return ec, ok && ec.dev == d
}

func (c *embeddedCQ) poll(wcs []verbs.WC, drive bool) (int, error) {
	if c.pub.users.gone() {
		return 0, ErrClosed
	}
	n, err := c.cq.Poll(wcs)
	if !drive || len(wcs) == 0 || err != nil {
		return n, err
	}
	if n == 0 && c.dev.drive() {
		n, err = c.cq.Poll(wcs)
	}
	if n > 0 {
		// A poll that finds completions says the application polls, as an
		// empty one does (drive): what it posts next waits for its next
		// poll and leaves with the rest. Without it, a poller that always
		// found completions the reader goroutine wrote (after a wait, or a
		// stretch descheduled) kept the reader on the socket and sent each
		// post alone.
		c.dev.prog.lastPoll.Store(int64(c.dev.now()))
	}
	return n, err
}

func (c *embeddedCQ) destroy(pub *CQ) error {
	err := pub.retire()
	if c.attending.Load() > 0 {
		c.dev.conn.Interrupt()
	}
	return err
}

func (c *embeddedCQ) len() int { return c.cq.Len() }

// park has the waiter wait for the device's socket itself and process
// what arrives (see progress.go), unless another goroutine waits for it:
// then it sleeps on CQ.wake, which the CQ's writes signal. With
// Config.BusyPoll the reader keeps the socket, and the waiter sleeps, as
// it does where the socket's waits cannot be interrupted.
func (c *embeddedCQ) park(ctx context.Context, done <-chan struct{}) (bool, error) {
	d := c.dev
	if d.cfg.BusyPoll > 0 || !d.conn.WaitsInterruptibly() {
		d.stopPolling()
		return false, nil
	}
	p := &d.prog
	p.lastAttend.Store(int64(d.now())) // the reader leaves the socket after its batch
	d.stopPolling()
	for {
		if waited, err := d.attend(c, ctx); waited {
			return true, err
		}
		// Another goroutine waits for the socket and will process what
		// comes for this CQ. It hands the socket on when it leaves, if it
		// sees this sleeper; if it left before, the socket is free.
		p.sleepers.Add(1)
		if p.attended.Load() > 0 {
			err := c.pub.sleep(ctx, done)
			p.sleepers.Add(-1)
			return true, err
		}
		p.sleepers.Add(-1)
	}
}

// embeddedSRQ is an SRQ of package qp.
type embeddedSRQ struct {
	dev *embeddedDevice
	srq *qp.SRQ
	pub *SRQ
}

func (p *embeddedPD) createSRQ(pd *PD, depth, maxSGE int) (*SRQ, error) {
	s, err := qp.NewSRQ(p.pd, depth, maxSGE)
	if err != nil {
		return nil, err
	}
	es := &embeddedSRQ{dev: p.dev, srq: s}
	es.pub = &SRQ{pd: pd, prov: es}
	return es.pub, nil
}

func (s *embeddedSRQ) postRecv(wr *verbs.RecvWR) error {
	if s.pub.users.gone() {
		return fmt.Errorf("posting to a destroyed SRQ: %w", ErrClosed)
	}
	return s.srq.PostRecv(wr)
}

func (s *embeddedSRQ) destroy(pub *SRQ) error { return pub.retire() }

// embeddedQP is a QP the embedded device drives: the transport state
// machine of package qp, and what the device keeps for it.
type embeddedQP struct {
	dev *embeddedDevice
	pub *QP
	num uint32

	mu        sync.Mutex
	qp        *qp.QP
	destroyed bool
	timerAt   qp.Time // the earliest Tick queued for this QP, 0 if none
	// onError, if set, is told the cause once the QP enters the error
	// state (the connection manager ends the QP's connection); it is
	// called with mu held.
	onError   func(cause verbs.WCStatus)
	errorSeen bool
	// errorNoted is set while the QP is in the error state and
	// noteErrorLocked has seen it there.
	errorNoted bool
	// commEst, if set, is called (with mu held) when the QP's responder
	// takes its first request, and then cleared: the connection manager
	// waits for it, or the RTU, to establish an accepted connection.
	commEst    func()
	commEstPSN wire.PSN // the responder's expected PSN when commEst was set

	dirty bool // owned by the holder of the device's progress role
	rung  bool // in the device's doorbells to ring; under mu

	// peer is the connection of an RC or UC QP as the device's other QPs
	// see it: the QPN it is connected to, with peerLocal set when that
	// QP is on this device. Written under mu, read by other QPs' senders.
	peer atomic.Uint32

	queues hooks.Queues // of a QP the daemon runs for an attached process

	uses []*users // of its CQs and SRQ, released by Destroy
}

func (p *embeddedPD) createQP(pd *PD, cfg QPConfig) (*QP, error) {
	q, err := p.createNumbered(pd, cfg, 0)
	if err != nil {
		return nil, err
	}
	return q.pub, nil
}

// ownQP returns the embedded QP of q, if q is of this device.
func (d *embeddedDevice) ownQP(q *QP) (*embeddedQP, bool) {
	eq, ok := q.prov.(*embeddedQP)
	return eq, ok && eq.dev == d
}

// createNumbered creates a QP of pd, whose provider p is, numbered num,
// or with the next free number if num is 0.
func (p *embeddedPD) createNumbered(pd *PD, cfg QPConfig, num uint32) (*embeddedQP, error) {
	d := p.dev
	if d.closed() {
		return nil, ErrClosed
	}
	if cfg.Type == 0 {
		cfg.Type = verbs.RC
	}
	if cfg.SendCQ == nil {
		return nil, fmt.Errorf("QP needs a send CQ: %w", ErrInvalid)
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	scq, sok := d.ownCQ(cfg.SendCQ)
	rcq, rok := d.ownCQ(cfg.RecvCQ)
	if !sok || !rok {
		return nil, fmt.Errorf("CQ of another device: %w", ErrInvalid)
	}
	qc := qp.Config{
		Type: cfg.Type, PD: p.pd, Memory: d.mem, SendCQ: scq.cq, RecvCQ: rcq.cq,
		MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
		Counters: &d.qpc, Guard: &d.guard,
	}
	if cfg.SRQ != nil {
		if cfg.SRQ.pd != pd {
			return nil, fmt.Errorf("SRQ of another PD: %w", ErrInvalid)
		}
		qc.SRQ = cfg.SRQ.prov.(*embeddedSRQ).srq // of pd, so of this device
	}
	uses, err := holdQueues(&cfg)
	if err != nil {
		return nil, err
	}
	q, err := d.newQP(pd, cfg, qc, num)
	if err != nil {
		for _, u := range uses {
			u.done()
		}
		return nil, err
	}
	q.uses = uses
	return q, nil
}

// holdQueues counts a new QP among the users of the CQs and SRQ of cfg.
func holdQueues(cfg *QPConfig) ([]*users, error) {
	uses := []*users{&cfg.SendCQ.users, &cfg.RecvCQ.users}
	names := []string{"send CQ", "receive CQ"}
	if cfg.SRQ != nil {
		uses, names = append(uses, &cfg.SRQ.users), append(names, "SRQ")
	}
	for i, u := range uses {
		if err := u.add(names[i]); err != nil {
			for _, held := range uses[:i] {
				held.done()
			}
			return nil, err
		}
	}
	return uses, nil
}

// newQP installs a QP numbered num (or the next free number) with the
// transport configuration qc.
func (d *embeddedDevice) newQP(pd *PD, cfg QPConfig, qc qp.Config, num uint32) (*embeddedQP, error) {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if num == 0 {
		var ok bool
		if num, ok = d.freeQPN(); !ok {
			return nil, fmt.Errorf("all %d QPs in use: %w", len(d.qps), ErrNoMem)
		}
	} else if d.qps[num%uint32(len(d.qps))].Load() != nil {
		return nil, fmt.Errorf("QP number %#x in use: %w", num, ErrBusy)
	}
	inner, err := qp.New(num, qc)
	if err != nil {
		return nil, err
	}
	q := &embeddedQP{dev: d, num: num, qp: inner, queues: cfg.queues}
	q.pub = &QP{dev: pd.dev, pd: pd, num: num, prov: q}
	if cfg.queues != nil {
		cfg.queues.Bind(q)
	}
	d.qps[num%uint32(len(d.qps))].Store(q)
	return q, nil
}

// freeQPN finds an unused QP number, counting up from the last one handed
// out so that a number is not reused soon (as rxe does). d.qpMu is held.
func (d *embeddedDevice) freeQPN() (uint32, bool) {
	n := uint32(len(d.qps))
	for range n {
		num := d.nextQPN
		if d.nextQPN++; d.nextQPN > 0xFFFFFF {
			d.nextQPN = firstQPN
		}
		if d.qps[num%n].Load() == nil {
			return num, true
		}
	}
	return 0, false
}

func (q *embeddedQP) typ() verbs.Type { return q.qp.Type() }

func (q *embeddedQP) attr() verbs.Attr {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Attr()
}

func (q *embeddedQP) status() qp.Status {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.qp.Status()
	if q.queues != nil {
		q.queues.CountPostedLocked(&st)
	}
	return st
}

func (q *embeddedQP) traffic() verbs.Traffic {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Traffic()
}

func (q *embeddedQP) modify(attr *verbs.Attr, mask verbs.AttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	if err := q.qp.Modify(attr, mask); err != nil {
		return err
	}
	q.notePeerLocked()
	q.flushNowLocked()
	return nil
}

func (q *embeddedQP) postSend(wr *verbs.SendWR, ring bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	if err := q.qp.PostSend(wr); err != nil {
		return err
	}
	if ring {
		q.doorbellLocked()
	}
	return nil
}

func (q *embeddedQP) ringDoorbell() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	q.doorbellLocked()
	return nil
}

func (q *embeddedQP) postSends(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return 0, ErrClosed
	}
	n := 0
	var err error
	for i := range wrs {
		if err = q.qp.PostSend(&wrs[i]); err != nil {
			break
		}
		n++
	}
	if n > 0 {
		q.doorbellLocked()
	}
	return n, err
}

func (q *embeddedQP) postRecv(wr *verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	return q.qp.PostRecv(wr)
}

// flushNowLocked sends what the QP has to send, from the caller's
// goroutine.
func (q *embeddedQP) flushNowLocked() {
	b := q.dev.getBatch()
	q.flushLocked(b, q.dev.now())
	q.dev.putBatch(b)
}

// setOnError installs fn as the QP's error hook (nil removes it); fn runs
// at once if the QP is already in the error state.
func (q *embeddedQP) setOnError(fn func(cause verbs.WCStatus)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.onError, q.errorSeen = fn, false
	q.reportErrorLocked()
}

// reportErrorLocked calls the error hook the first time it finds the QP in
// the error state.
func (q *embeddedQP) reportErrorLocked() {
	if q.onError == nil || q.errorSeen || q.qp.State() != verbs.Err {
		return
	}
	q.errorSeen = true
	q.onError(q.qp.Status().Cause)
}

// destroy moves the QP to the error state, flushing its work requests,
// and removes it from the device.
func (q *embeddedQP) destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	q.flushNowLocked() // a NAK that explains an error still goes out
	q.qp.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState)
	q.destroyed = true
	q.mu.Unlock()
	for _, u := range q.uses {
		u.done()
	}
	d := q.dev
	d.qps[q.num%uint32(len(d.qps))].CompareAndSwap(q, nil)
	return nil
}

// embeddedMW is a memory window of the embedded device's region table.
type embeddedMW struct {
	dev *embeddedDevice
	w   *mr.Window
}

func (p *embeddedPD) allocMW(pd *PD, typ mr.WindowType) (*MW, error) {
	w, err := p.dev.mem.AllocWindow(p.pd, typ)
	if err != nil {
		return nil, err
	}
	return &MW{pd: pd, typ: typ, prov: &embeddedMW{dev: p.dev, w: w}}, nil
}

// rkey is the window's key, which changes when a bind executes.
func (w *embeddedMW) rkey() uint32   { return w.w.RKey() }
func (w *embeddedMW) dealloc() error { return w.dev.mem.DeallocWindow(w.w) }
