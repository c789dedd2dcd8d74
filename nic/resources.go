package nic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// PD is a protection domain (ibv_pd): regions and QPs of one PD may be used
// together, and only together.
type PD struct {
	dev *Device
	pd  mr.PD
	ah  uint32 // an attached device's handle of the PD
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	if d.att != nil {
		return d.att.allocPD()
	}
	if d.closed() {
		return nil, ErrClosed
	}
	pd, err := d.mem.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, pd: pd}, nil
}

// Handle returns the PD's number in the device's region table.
func (pd *PD) Handle() mr.PD { return pd.pd }

// Dealloc frees the PD (ibv_dealloc_pd); ErrBusy while regions remain.
func (pd *PD) Dealloc() error {
	if pd.dev.att != nil {
		return pd.dev.att.deallocPD(pd)
	}
	return pd.dev.mem.DeallocPD(pd.pd)
}

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd    *PD
	r     *mr.Region
	buf   []byte
	arena *mr.Arena
	key   uint32 // lkey == rkey
	addr  uint64
	att   *attachedMR
}

func newMR(pd *PD, r *mr.Region, buf []byte, arena *mr.Arena) *MR {
	return &MR{pd: pd, r: r, buf: buf, arena: arena, key: r.LKey(), addr: r.Addr()}
}

// RegMR registers buf for the device (ibv_reg_mr): its address is buf's,
// unless access has mr.ZeroBased. buf stays pinned until Dereg. An
// attached device registers only memory of its regions from AllocMR, and
// refuses other memory with ErrFault; its regions' addresses are the
// daemon's (use MR.SGE and MR.Addr, not buf's address).
func (pd *PD) RegMR(buf []byte, access mr.Access) (*MR, error) {
	if pd.dev.att != nil {
		return pd.dev.att.regMR(pd, buf, access)
	}
	r, err := pd.dev.mem.Register(pd.pd, buf, access)
	if err != nil {
		return nil, err
	}
	return newMR(pd, r, buf, nil), nil
}

// AllocMR registers size bytes of device-owned memory, mapped outside the
// Go heap (the memory a daemon hosts for remote peers). An attached
// device's is memory the process shares with the daemon.
func (pd *PD) AllocMR(size int, access mr.Access) (*MR, error) {
	if size <= 0 {
		return nil, fmt.Errorf("memory region of %d bytes: %w", size, ErrInvalid)
	}
	if pd.dev.att != nil {
		return pd.dev.att.allocMR(pd, size, access)
	}
	a, err := pd.dev.mem.NewArena(pd.pd, uint64(size))
	if err != nil {
		return nil, err
	}
	r, err := pd.dev.mem.Register(pd.pd, a.Bytes(), access)
	if err != nil {
		pd.dev.mem.FreeArena(a)
		return nil, err
	}
	return newMR(pd, r, a.Bytes(), a), nil
}

// RegShared registers n bytes at offset off of the memfd fd as a region
// whose address is iova (ibv_reg_mr_iova2 over shared memory): fd must be
// sealed against shrinking (see shm.MapRange), and iova is where the
// caller maps those bytes, the address its SGEs and its peers use. The
// device maps the same pages (the daemon does, for an attached device), so
// that it moves data straight to and from the caller's mapping: this is
// how a process registers memory it mapped itself, such as the pages
// libsoftnic moves onto a memfd for a C program. fd stays the caller's;
// MR.Bytes is this process's own mapping of the region.
func (pd *PD) RegShared(fd int, off int64, n int, iova uint64, access mr.Access) (*MR, error) {
	dup, err := dupFD(fd)
	if err != nil {
		return nil, fmt.Errorf("shared region: %v: %w", err, ErrInvalid)
	}
	m, skip, err := mapShared(dup, off, n)
	if err != nil {
		return nil, err
	}
	if pd.dev.att != nil {
		return pd.dev.att.regShared(pd, m, skip, fd, off, n, iova, access)
	}
	a, err := pd.dev.mem.AdoptArena(pd.pd, m.Bytes())
	if err != nil {
		m.Close()
		return nil, err
	}
	m.Release()
	r, err := pd.dev.mem.RegisterIOVA(pd.pd, a.Bytes()[skip:skip+n], iova, access)
	if err != nil {
		pd.dev.mem.FreeArena(a)
		return nil, err
	}
	return newMR(pd, r, a.Bytes()[skip:skip+n], a), nil
}

// mapShared maps the pages of the memfd fd that hold n bytes from offset
// off, and returns the mapping with the offset of the bytes in it. The
// mapping owns fd; on error fd is closed.
func mapShared(fd int, off int64, n int) (*shm.Mapping, int, error) {
	if n <= 0 || off < 0 || int64(n) > math.MaxInt64-off {
		shm.CloseFDs([]int{fd})
		return nil, 0, fmt.Errorf("shared region of %d bytes at offset %d: %w", n, off, ErrInvalid)
	}
	skip := int(off % shm.PageSize)
	m, err := shm.MapRange(fd, off-int64(skip), skip+n)
	if err != nil {
		return nil, 0, fmt.Errorf("shared region: %v: %w", err, ErrFault)
	}
	return m, skip, nil
}

// LKey and RKey are the region's keys (equal, as in rxe).
func (m *MR) LKey() uint32 { return m.key }
func (m *MR) RKey() uint32 { return m.key }

// Addr is the address peers use for the region's first byte (0 when
// zero-based).
func (m *MR) Addr() uint64 { return m.addr }

// Len is the region's length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Bytes returns the region's memory.
func (m *MR) Bytes() []byte { return m.buf }

// Region returns the region in the device's table; nil for an attached
// device's.
func (m *MR) Region() *mr.Region { return m.r }

// SGE returns the scatter/gather element for n bytes at offset off.
func (m *MR) SGE(off, n int) qp.SGE {
	return qp.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.key}
}

// Dereg deregisters the region (ibv_dereg_mr); ErrBusy while a memory
// window is bound to it.
func (m *MR) Dereg() error {
	if m.att != nil {
		return m.pd.dev.att.deregMR(m)
	}
	if err := m.pd.dev.mem.Deregister(m.r); err != nil {
		return err
	}
	if m.arena != nil {
		return m.pd.dev.mem.FreeArena(m.arena)
	}
	return nil
}

// CQ is a completion queue.
type CQ struct {
	dev     *Device
	cq      *qp.CQ
	wake    chan struct{}
	waiters atomic.Int32  // goroutines in wait
	users   users         // QPs completing to it
	gone    chan struct{} // closed when the CQ is destroyed
	att     *attachedCQ
}

func newCQ(d *Device, c *qp.CQ, att *attachedCQ) *CQ {
	return &CQ{dev: d, cq: c, wake: make(chan struct{}, 1), gone: make(chan struct{}), att: att}
}

// users counts the QPs that use a CQ or an SRQ, which cannot be destroyed
// while any does (EBUSY, as ibv_destroy_cq and ibv_destroy_srq), nor used
// by a new QP once destroyed.
type users struct {
	mu   sync.Mutex // orders add and destroy
	n    int
	dead atomic.Bool // destroyed; read without mu by Poll and PostRecv
}

// gone reports whether the object was destroyed.
func (u *users) gone() bool { return u.dead.Load() }

func (u *users) add(what string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dead.Load() {
		return fmt.Errorf("%s was destroyed: %w", what, ErrInvalid)
	}
	u.n++
	return nil
}

func (u *users) done() {
	u.mu.Lock()
	u.n--
	u.mu.Unlock()
}

// destroy marks the object destroyed unless a QP uses it, and reports
// whether this call did.
func (u *users) destroy(what string) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.dead.Load():
		return false, nil
	case u.n > 0:
		return false, fmt.Errorf("%s is used by %d QPs; destroy them first: %w", what, u.n, ErrBusy)
	}
	u.dead.Store(true)
	return true, nil
}

// CreateCQ creates a completion queue of depth entries (ibv_create_cq).
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if d.att != nil {
		return d.att.createCQ(depth)
	}
	c, err := qp.NewCQ(depth)
	if err != nil {
		return nil, err
	}
	cq := newCQ(d, c, nil)
	c.SetNotify(func() {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
	})
	return cq, nil
}

// Poll moves up to len(wcs) completions into wcs (ibv_poll_cq) without
// blocking. When an embedded device's CQ holds none, Poll first processes
// the packets the device has received, on the calling goroutine (see
// progress.go): an application that polls in a loop drives the device
// itself, instead of waiting for the device's goroutine to be scheduled.
func (c *CQ) Poll(wcs []qp.WC) (int, error) { return c.poll(wcs, true) }

// poll is Poll; drive says whether it may process packets when it finds no
// completion, as a poll in a loop does (CQ.Wait's do not: the reader
// stays on the socket for them).
func (c *CQ) poll(wcs []qp.WC, drive bool) (int, error) {
	if c.att != nil {
		return c.att.poll(wcs)
	}
	if c.users.gone() {
		return 0, ErrClosed
	}
	n, err := c.cq.Poll(wcs)
	if n == 0 && err == nil && drive && len(wcs) > 0 && c.dev.drive() {
		n, err = c.cq.Poll(wcs)
	}
	return n, err
}

// Destroy destroys the CQ (ibv_destroy_cq): completions not yet polled are
// discarded, and Poll and Wait return ErrClosed from then on. It fails
// with ErrBusy while a QP completes to the CQ.
func (c *CQ) Destroy() error {
	if c.att != nil {
		return c.dev.att.destroyCQ(c)
	}
	return c.retire()
}

// retire marks the CQ destroyed unless a QP uses it, and wakes its
// waiters.
func (c *CQ) retire() error {
	did, err := c.users.destroy("CQ")
	if did {
		close(c.gone)
	}
	return err
}

// Wait blocks until at least one completion is available, then polls up to
// len(wcs) of them. It returns early with ctx's error, or ErrClosed when
// the device closes.
func (c *CQ) Wait(ctx context.Context, wcs []qp.WC) (int, error) {
	return c.wait(ctx, func() (int, error) { return c.poll(wcs, false) })
}

// WaitReady blocks until the CQ holds a completion, which it leaves for
// Poll to take, or until ctx ends or the device closes: what
// ibv_req_notify_cq followed by ibv_get_cq_event waits for, save that a
// completion already in the CQ counts too (a program that polls after each
// event sees at most one event with nothing new).
func (c *CQ) WaitReady(ctx context.Context) error {
	_, err := c.wait(ctx, func() (int, error) { return c.Len(), nil })
	return err
}

// wait calls poll until it finds completions (or fails), sleeping between
// calls until the CQ is written to, ctx ends or the device closes.
//
// An embedded CQ's writes wake a waiter through c.wake. An attached CQ's
// daemon signals an eventfd once per arming: one waiter at a time (the
// one holding att.lead) arms the CQ and reads the eventfd, the others
// sleep on c.wake. One write wakes one waiter, so a woken waiter that
// leaves while others wait passes the wakeup on, and one of them takes
// its place.
func (c *CQ) wait(ctx context.Context, poll func() (int, error)) (int, error) {
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	woken := false
	passOn := func() {
		if woken && c.waiters.Load() > 1 {
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
	for {
		if n, err := poll(); n > 0 || err != nil {
			passOn()
			return n, err
		}
		if c.att == nil {
			c.dev.stopPolling()
		}
		if c.att != nil && c.att.lead.TryLock() {
			err := c.att.sleep(ctx, c.dev.done)
			c.att.lead.Unlock()
			woken = true
			if err == nil {
				continue
			}
			passOn()
			if errors.Is(err, ErrClosed) {
				if n, err := poll(); n > 0 || err != nil {
					return n, err
				}
			}
			return 0, err
		}
		select {
		case <-c.wake:
			woken = true
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.dev.done:
			if n, err := poll(); n > 0 || err != nil {
				return n, err
			}
			return 0, ErrClosed
		case <-c.gone:
			return 0, ErrClosed
		}
	}
}

// Len returns how many completions wait to be polled.
func (c *CQ) Len() int {
	if c.att != nil {
		return c.att.len()
	}
	return c.cq.Len()
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd    *PD
	srq   *qp.SRQ
	users users // QPs receiving from it
	att   *attachedSRQ
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(depth, maxSGE int) (*SRQ, error) {
	if pd.dev.att != nil {
		return pd.dev.att.createSRQ(pd, depth, maxSGE)
	}
	s, err := qp.NewSRQ(pd.pd, depth, maxSGE)
	if err != nil {
		return nil, err
	}
	return &SRQ{pd: pd, srq: s}, nil
}

// PostRecv adds a receive WR (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *qp.RecvWR) error {
	if s.att != nil {
		return s.att.postRecv(s.pd.dev.att, wr)
	}
	if s.users.gone() {
		return fmt.Errorf("posting to a destroyed SRQ: %w", ErrClosed)
	}
	return s.srq.PostRecv(wr)
}

// Destroy destroys the SRQ (ibv_destroy_srq): its receive WRs are
// discarded, and posting to it fails. It fails with ErrBusy while a QP
// receives from it.
func (s *SRQ) Destroy() error {
	if s.att != nil {
		return s.pd.dev.att.destroySRQ(s)
	}
	return s.retire()
}

// retire marks the SRQ destroyed unless a QP uses it.
func (s *SRQ) retire() error {
	_, err := s.users.destroy("SRQ")
	return err
}

// QPConfig creates a QP (ibv_qp_init_attr).
type QPConfig struct {
	Type           qp.Type // qp.RC (the default), qp.UC or qp.UD
	SendCQ, RecvCQ *CQ     // RecvCQ defaults to SendCQ
	SRQ            *SRQ
	// Queue sizes; zero picks qp's defaults.
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	// SignalAll makes every send WR complete with a work completion.
	SignalAll bool

	host *hostedQP // the rings of an attached process's QP (daemon side)
}

// QP is a queue pair of a device. Its methods are safe for concurrent use.
type QP struct {
	dev *Device
	pd  *PD
	num uint32

	mu        sync.Mutex
	qp        *qp.QP
	destroyed bool
	timerAt   qp.Time // the earliest Tick queued for this QP, 0 if none
	// onError, if set, is told the cause once the QP enters the error
	// state (the connection manager ends the QP's connection); it is
	// called with mu held.
	onError   func(cause qp.WCStatus)
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

	att  *attachedQP // an attached device's QP, in the daemon
	host *hostedQP   // a QP the daemon runs for an attached process

	uses []*users // of its CQs and SRQ, released by Destroy
}

// CreateQP creates a QP in the RESET state (ibv_create_qp).
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	if pd.dev.att != nil {
		return pd.dev.att.createQP(pd, cfg)
	}
	return pd.createQP(cfg, 0)
}

// createQP creates a QP numbered num, or with the next free number if num
// is 0.
func (pd *PD) createQP(cfg QPConfig, num uint32) (*QP, error) {
	d := pd.dev
	if d.closed() {
		return nil, ErrClosed
	}
	if cfg.Type == 0 {
		cfg.Type = qp.RC
	}
	if cfg.SendCQ == nil {
		return nil, fmt.Errorf("QP needs a send CQ: %w", ErrInvalid)
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	qc := qp.Config{
		Type: cfg.Type, PD: pd.pd, Memory: d.mem, SendCQ: cfg.SendCQ.cq, RecvCQ: cfg.RecvCQ.cq,
		MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
		Counters: &d.qpc, Guard: &d.guard,
	}
	if cfg.SRQ != nil {
		if cfg.SRQ.pd != pd {
			return nil, fmt.Errorf("SRQ of another PD: %w", ErrInvalid)
		}
		qc.SRQ = cfg.SRQ.srq
	}
	uses, err := holdQueues(&cfg)
	if err != nil {
		return nil, err
	}
	q, err := pd.newQP(cfg, qc, num)
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
func (pd *PD) newQP(cfg QPConfig, qc qp.Config, num uint32) (*QP, error) {
	d := pd.dev
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
	q := &QP{dev: d, pd: pd, num: num, qp: inner, host: cfg.host}
	if cfg.host != nil {
		cfg.host.q = q
	}
	d.qps[num%uint32(len(d.qps))].Store(q)
	return q, nil
}

// freeQPN finds an unused QP number, counting up from the last one handed
// out so that a number is not reused soon (as rxe does). d.qpMu is held.
func (d *Device) freeQPN() (uint32, bool) {
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

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// Type returns the QP's transport service.
func (q *QP) Type() qp.Type {
	if q.att != nil {
		return q.att.cfg.Type
	}
	return q.qp.Type()
}

// Attr returns the QP's attributes (ibv_query_qp).
func (q *QP) Attr() qp.Attr {
	if q.att != nil {
		a, _ := q.att.query(q.dev.att) // on error, what the daemon told last
		return a.Attr
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Attr()
}

// Status returns a snapshot of the QP's sequence state.
func (q *QP) Status() qp.Status {
	if q.att != nil {
		a, _ := q.att.query(q.dev.att) // on error, what the daemon told last
		return a.Status
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.qp.Status()
	if q.host != nil {
		q.host.countPostedLocked(&st)
	}
	return st
}

// Traffic returns the packets, bytes and messages the QP has sent and
// received. An attached device's QPs are counted in the daemon, which
// shows them (softnic serve --metrics): here they are ErrNotSupported.
func (q *QP) Traffic() (qp.Traffic, error) {
	if q.att != nil {
		return qp.Traffic{}, fmt.Errorf("QP %#x: traffic of an attached device's QP: %w", q.num, ErrNotSupported)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Traffic(), nil
}

// Modify changes the QP's attributes and state (ibv_modify_qp).
func (q *QP) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	if q.att != nil {
		return q.att.modify(q.dev.att, attr, mask)
	}
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

// PostSend posts one send work request (ibv_post_send) and sends what it
// can at once; while an application polls the device's CQs (see CQ.Poll),
// what it posts leaves with that application's next poll instead, with
// everything posted to the device's QPs since, in as few system calls as
// it takes.
func (q *QP) PostSend(wr *qp.SendWR) error { return q.postSend(wr, true) }

// PostSendDeferred posts a send work request without ringing the doorbell:
// this call sends nothing, so that several posts can leave in one batch
// (what FI_MORE asks for). The queued packets go out with the next
// PostSend, PostSends or RingDoorbell on the QP, or sooner if the device
// drains the QP for its own reasons (a response arrives, a timer fires):
// the deferral is a batching hint, never a promise to hold packets back.
func (q *QP) PostSendDeferred(wr *qp.SendWR) error { return q.postSend(wr, false) }

func (q *QP) postSend(wr *qp.SendWR, ring bool) error {
	if q.att != nil {
		return q.att.postSend(q.dev.att, wr, ring)
	}
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

// RingDoorbell sends what the QP has queued, such as the work requests of
// PostSendDeferred.
func (q *QP) RingDoorbell() error {
	if q.att != nil {
		return q.att.ringDoorbell(q.dev.att)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	q.doorbellLocked()
	return nil
}

// PostSends posts a list of send work requests, then sends; it returns how
// many were posted before an error (like ibv_post_send's bad_wr).
func (q *QP) PostSends(wrs []qp.SendWR) (int, error) {
	if q.att != nil {
		return q.att.postSends(q.dev.att, wrs)
	}
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

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *qp.RecvWR) error {
	if q.att != nil {
		return q.att.postRecv(q.dev.att, wr)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return ErrClosed
	}
	return q.qp.PostRecv(wr)
}

// flushNowLocked sends what the QP has to send, from the caller's
// goroutine.
func (q *QP) flushNowLocked() {
	b := q.dev.getBatch()
	q.flushLocked(b, q.dev.now())
	q.dev.putBatch(b)
}

// setOnError installs fn as the QP's error hook (nil removes it); fn runs
// at once if the QP is already in the error state.
func (q *QP) setOnError(fn func(cause qp.WCStatus)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.onError, q.errorSeen = fn, false
	q.reportErrorLocked()
}

// reportErrorLocked calls the error hook the first time it finds the QP in
// the error state.
func (q *QP) reportErrorLocked() {
	if q.onError == nil || q.errorSeen || q.qp.State() != qp.Err {
		return
	}
	q.errorSeen = true
	q.onError(q.qp.Status().Cause)
}

// Destroy moves the QP to the error state, so that its outstanding WRs
// complete with WR_FLUSH_ERR, and removes it from the device
// (ibv_destroy_qp). Packets for it are dropped from then on.
func (q *QP) Destroy() error {
	if q.att != nil {
		return q.att.destroy(q.dev.att)
	}
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState)
	q.flushNowLocked() // a NAK that explains an error still goes out
	q.qp.Modify(&qp.Attr{State: qp.Reset}, qp.AttrState)
	q.destroyed = true
	q.mu.Unlock()
	for _, u := range q.uses {
		u.done()
	}
	d := q.dev
	d.qps[q.num%uint32(len(d.qps))].CompareAndSwap(q, nil)
	return nil
}

// OpenDomain opens the fi_mr face of the device's region table (a
// libfabric resource domain, see mr.Domain) and returns it with the PD its
// regions live in: QPs created from that PD reach the domain's regions,
// with the mr_mode, key and endpoint rules the domain enforces.
func (d *Device) OpenDomain(cfg mr.DomainConfig) (*mr.Domain, *PD, error) {
	if d.att != nil {
		return nil, nil, fmt.Errorf("an fi_mr domain of an attached device: %w", ErrNotSupported)
	}
	if d.closed() {
		return nil, nil, ErrClosed
	}
	dom, err := mr.OpenDomain(d.mem, cfg)
	if err != nil {
		return nil, nil, err
	}
	return dom, &PD{dev: d, pd: dom.PD()}, nil
}
