package embedded

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/spin"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The embedded provider's objects: PDs, regions and windows in the
// device's region table, CQs, SRQs and QPs of package qp that the device
// drives itself.

// PD is a PD of the embedded device's region table.
type PD struct {
	dev *Device
	pd  mr.PDHandle
	// owner is the PD's public object; nil for QP1's, the connection
	// manager's.
	owner any
}

func (d *Device) AllocPD(owner any) (provider.PD, error) {
	if d.closed() {
		return nil, cm.ErrClosed
	}
	pd, err := d.mem.AllocPD()
	if err != nil {
		return nil, err
	}
	return &PD{dev: d, pd: pd, owner: owner}, nil
}

func (p *PD) Handle() mr.PDHandle { return p.pd }
func (p *PD) Dealloc() error      { return p.dev.mem.DeallocPD(p.pd) }

// MR is a region of the embedded device's table over buf; arena,
// if set, is the memory the device allocated or adopted for it.
type MR struct {
	dev   *Device
	r     *mr.Region
	buf   []byte
	arena *mr.Arena
}

func (p *PD) newMR(r *mr.Region, buf []byte, arena *mr.Arena) *MR {
	return &MR{dev: p.dev, r: r, buf: buf, arena: arena}
}

func (p *PD) RegMR(buf []byte, access mr.Access) (provider.MR, error) {
	r, err := p.dev.mem.Register(p.pd, buf, access)
	if err != nil {
		return nil, err
	}
	return p.newMR(r, buf, nil), nil
}

func (p *PD) AllocMR(size int, access mr.Access) (provider.MR, error) {
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
	return p.newMR(r, a.Bytes(), a), nil
}

// RegShared adopts the mapping as an arena of the region table: the
// device reaches the region's memory through it.
func (p *PD) RegShared(m *shm.Mapping, skip, _ int, _ int64, n int, iova uint64, access mr.Access) (provider.MR, error) {
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
	return p.newMR(r, a.Bytes()[skip:skip+n], a), nil
}

func (p *PD) SGEAt(start, n uint64) (verbs.SGE, bool) {
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

func (m *MR) Region() *mr.Region { return m.r }
func (m *MR) Bytes() []byte      { return m.buf }
func (m *MR) Key() uint32        { return m.r.LKey() }
func (m *MR) Addr() uint64       { return m.r.Addr() }

func (m *MR) Dereg() error {
	if err := m.dev.mem.Deregister(m.r); err != nil {
		return err
	}
	if m.arena != nil {
		return m.dev.mem.FreeArena(m.arena)
	}
	return nil
}

// Rereg re-registers the region in place (mr.Table.Rereg): its key stays,
// and the arena it owns (AllocMR, RegShared) moves to its new PD.
func (m *MR) Rereg(flags mr.ReregFlags, pd provider.PD, access mr.Access) error {
	h := m.r.PD()
	if flags&mr.ReregPD != 0 {
		p, ok := pd.(*PD)
		if !ok || p.dev != m.dev {
			return fmt.Errorf("rereg into a PD of another device: %w", mr.ErrInvalid)
		}
		h = p.pd
	}
	if err := m.dev.mem.Rereg(m.r, flags, h, access); err != nil {
		return err
	}
	if m.arena != nil && m.arena.PD() != h {
		return m.dev.mem.MoveArena(m.arena, h)
	}
	return nil
}

// Prefetch makes pages of the region resident (mr.Table.Prefetch).
func (m *MR) Prefetch(addr, n uint64) error { return m.dev.mem.Prefetch(m.r, addr, n) }

// CQ is a CQ of package qp the embedded device completes to.
type CQ struct {
	dev *Device
	cq  *qp.CQ
	st  *provider.CQState
	// attending counts the waiters of the CQ that wait for the device's
	// socket themselves (Device.attend): a completion written by
	// another goroutine interrupts their wait.
	attending atomic.Int32
	spinning  *spin.Policy // how long a waiter busy-polls before it sleeps
}

func (d *Device) CreateCQ(depth int, st *provider.CQState) (provider.CQ, error) {
	c, err := qp.NewCQ(depth)
	if err != nil {
		return nil, err
	}
	ec := &CQ{dev: d, cq: c, st: st, spinning: spin.NewPolicy(d.cfg.WaitSpin)}
	c.SetNotify(ec.notify)
	return ec, nil
}

// notify is told of every completion written to the CQ: it wakes a waiter
// that sleeps on the CQ, and interrupts one that waits for the socket.
func (c *CQ) notify() {
	c.st.Signal()
	if c.attending.Load() > 0 {
		c.dev.conn.Interrupt()
	}
}

// ownCQ returns the embedded CQ of c, if c is of this device.
func (d *Device) ownCQ(c provider.CQ) (*CQ, bool) {
	ec, ok := c.(*CQ)
	return ec, ok && ec.dev == d
}

func (c *CQ) Poll(wcs []verbs.WC, drive bool) (int, error) {
	if c.st.Users.Gone() {
		return 0, cm.ErrClosed
	}
	n, err := c.cq.Poll(wcs)
	switch {
	case !drive || len(wcs) == 0 || err != nil:
	case n > 0:
		// A poll that finds completions says the application polls, as an
		// empty one does (drive): what it posts next waits for its next
		// poll and leaves with the rest. Without it, a poller that always
		// found completions the reader goroutine wrote (after a wait, or a
		// stretch descheduled) kept the reader on the socket and sent each
		// post alone.
		c.dev.prog.lastPoll.Store(int64(c.dev.now()))
	case c.dev.drive(): // which stamps the poll itself
		n, err = c.cq.Poll(wcs)
	}
	return n, err
}

func (c *CQ) Destroy() error {
	err := c.st.Retire()
	if c.attending.Load() > 0 {
		c.dev.conn.Interrupt()
	}
	return err
}

func (c *CQ) Len() int { return c.cq.Len() }

func (c *CQ) Written() (all, solicited uint32) { return c.cq.Written() }

func (c *CQ) Discard(qpn uint32) int { return c.cq.Discard(qpn) }

func (c *CQ) Resize(depth int) error { return c.cq.Resize(depth) }

// Park first busy-polls, driving the device as an empty Poll does, for
// the budget the CQ's spinning policy gives (Config.WaitSpin). Then it has
// the waiter wait for the device's socket itself and process what arrives
// (see progress.go), unless another goroutine waits for it: then it
// sleeps in CQState.Sleep, which the CQ's writes signal. With
// Config.BusyPoll the reader keeps the socket, and the waiter sleeps at
// once, as it does, after its spin, where the socket's waits cannot be
// interrupted.
func (c *CQ) Park(ctx context.Context, done <-chan struct{}, ready func() bool) (bool, error) {
	if c.st.Users.Gone() {
		// The spin and attend end for a destroyed CQ as for a completion:
		// WaitReady, which looks at Len and not at Poll's ErrClosed, is
		// told here.
		return true, cm.ErrClosed
	}
	d := c.dev
	spun := false
	if d.cfg.BusyPoll == 0 {
		var found bool
		if found, spun = c.spin(ready); found {
			return true, nil
		}
	}
	if d.cfg.BusyPoll > 0 || !d.conn.WaitsInterruptibly() {
		d.stopPolling()
		return false, nil
	}
	start := time.Now()
	slept, err := c.attend(ctx, done, ready)
	if ready() {
		c.spinning.Slept(time.Since(start), spun)
	}
	return slept, err
}

// attend has the waiter wait for the device's socket and process what
// arrives, or sleep on the CQ while another goroutine does (see Park).
func (c *CQ) attend(ctx context.Context, done <-chan struct{}, ready func() bool) (bool, error) {
	d := c.dev
	p := &d.prog
	p.lastAttend.Store(int64(d.now())) // the reader leaves the socket after its batch
	d.stopPolling()
	for {
		if waited, err := d.attend(c, ctx, ready); waited {
			return true, err
		}
		// Another goroutine waits for the socket and will process what
		// comes for this CQ. It hands the socket on when it leaves, if it
		// sees this sleeper; if it left before, the socket is free.
		p.sleepers.Add(1)
		if p.attended.Load() > 0 {
			err := c.st.Sleep(ctx, done)
			p.sleepers.Add(-1)
			return true, err
		}
		p.sleepers.Add(-1)
	}
}

// spin busy-polls for the budget the CQ's spinning policy gives: it
// drives the device as an empty Poll does until the CQ is ready (see
// Park) or was destroyed (found), or the budget has passed. spun says
// whether it was given a budget.
func (c *CQ) spin(ready func() bool) (found, spun bool) {
	budget := c.spinning.Budget()
	if budget == 0 {
		return false, false
	}
	end := time.Now().Add(budget)
	for {
		if ready() || c.st.Users.Gone() {
			c.spinning.Spun(true)
			return true, true
		}
		if c.dev.drive() {
			continue
		}
		if time.Now().After(end) {
			c.spinning.Spun(false)
			return false, true
		}
		runtime.Gosched() // the device's goroutines (timers) run meanwhile if they must
	}
}

// SRQ is an SRQ of package qp, in the PD pd.
type SRQ struct {
	pd    *PD
	srq   *qp.SRQ
	users provider.Users // QPs receiving from it
}

// CreateSRQ creates the SRQ, which reports its limit reached to the
// device's upcalls (a daemon's SRQ replaces that with its own, on the
// transport SRQ).
func (p *PD) CreateSRQ(owner any, depth, maxSGE int) (provider.SRQ, error) {
	s, err := qp.NewSRQ(p.pd, depth, maxSGE)
	if err != nil {
		return nil, err
	}
	up := p.dev.up
	s.SetOnLimit(func() { up.SRQLimit(owner) })
	return &SRQ{pd: p, srq: s}, nil
}

func (s *SRQ) Attr() verbs.SRQAttr { return s.srq.Attr() }

func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	if s.users.Gone() {
		return fmt.Errorf("modifying a destroyed SRQ: %w", cm.ErrClosed)
	}
	return s.srq.Modify(attr, mask)
}

func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	if s.users.Gone() {
		return fmt.Errorf("posting to a destroyed SRQ: %w", cm.ErrClosed)
	}
	return s.srq.PostRecv(wr)
}

// Destroy marks the SRQ destroyed unless a QP uses it.
func (s *SRQ) Destroy() error {
	_, err := s.users.Destroy("SRQ")
	return err
}

// QP is a QP the embedded device drives: the transport state
// machine of package qp, and what the device keeps for it.
type QP struct {
	dev   *Device
	owner any // the public QP (provider.Up.WrapQP)
	num   uint32

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

	// retried is when the ACK timer last ran out and the QP sent again;
	// holds counts the timeouts held since the oldest unacknowledged PSN
	// was heldAcked (holdTimeoutLocked). Under mu.
	retried   qp.Time
	holds     uint8
	heldAcked wire.PSN

	dirty bool // owned by the holder of the device's progress role
	rung  bool // in the device's doorbells to ring; under mu

	// peer is the connection of an RC or UC QP as the device's other QPs
	// see it: the QPN it is connected to, with peerLocal set when that
	// QP is on this device. Written under mu, read by other QPs' senders.
	peer atomic.Uint32

	queues hooks.Queues // of a QP the daemon runs for an attached process

	uses []*provider.Users // of its CQs and SRQ, released by Destroy
}

func (p *PD) CreateQP(cfg provider.QPConfig) (provider.QP, error) {
	return p.createNumbered(cfg, 0)
}

// Owner is the public QP.
func (q *QP) Owner() any { return q.owner }

// ownQP returns the embedded QP of q, if q is of this device.
func (d *Device) ownQP(q provider.QP) (*QP, bool) {
	eq, ok := q.(*QP)
	return eq, ok && eq.dev == d
}

// createNumbered creates a QP of p numbered num, or with the next free
// number if num is 0.
func (p *PD) createNumbered(cfg provider.QPConfig, num uint32) (*QP, error) {
	d := p.dev
	if d.closed() {
		return nil, cm.ErrClosed
	}
	if cfg.Type == 0 {
		cfg.Type = verbs.RC
	}
	if cfg.SendCQ == nil {
		return nil, fmt.Errorf("QP needs a send CQ: %w", mr.ErrInvalid)
	}
	if cfg.RecvCQ == nil {
		cfg.RecvCQ = cfg.SendCQ
	}
	scq, sok := d.ownCQ(cfg.SendCQ)
	rcq, rok := d.ownCQ(cfg.RecvCQ)
	if !sok || !rok {
		return nil, fmt.Errorf("CQ of another device: %w", mr.ErrInvalid)
	}
	qc := qp.Config{
		Type: cfg.Type, PD: p.pd, Memory: d.mem, SendCQ: scq.cq, RecvCQ: rcq.cq,
		MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
		Counters: &d.qpc, Guard: &d.guard,
	}
	var srq *SRQ
	if cfg.SRQ != nil {
		var ok bool
		if srq, ok = cfg.SRQ.(*SRQ); !ok || srq.pd != p {
			return nil, fmt.Errorf("SRQ of another PD: %w", mr.ErrInvalid)
		}
		qc.SRQ = srq.srq
	}
	uses, err := holdQueues(scq, rcq, srq)
	if err != nil {
		return nil, err
	}
	if cfg.Type == verbs.UD {
		d.readClasses()
	}
	q, err := d.newQP(p.owner, cfg.Queues, qc, num)
	if err != nil {
		for _, u := range uses {
			u.Done()
		}
		return nil, err
	}
	q.uses = uses
	return q, nil
}

// holdQueues counts a new QP among the users of its CQs and SRQ (nil for
// none).
func holdQueues(scq, rcq *CQ, srq *SRQ) ([]*provider.Users, error) {
	uses := []*provider.Users{&scq.st.Users, &rcq.st.Users}
	names := []string{"send CQ", "receive CQ"}
	if srq != nil {
		uses, names = append(uses, &srq.users), append(names, "SRQ")
	}
	for i, u := range uses {
		if err := u.Add(names[i]); err != nil {
			for _, held := range uses[:i] {
				held.Done()
			}
			return nil, err
		}
	}
	return uses, nil
}

// newQP installs a QP numbered num (or the next free number) with the
// transport configuration qc.
func (d *Device) newQP(pd any, queues hooks.Queues, qc qp.Config, num uint32) (*QP, error) {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if num == 0 {
		var ok bool
		if num, ok = d.freeQPN(); !ok {
			return nil, fmt.Errorf("all %d QPs in use: %w", len(d.qps), mr.ErrNoMem)
		}
	} else if d.qps[num%uint32(len(d.qps))].Load() != nil {
		return nil, fmt.Errorf("QP number %#x in use: %w", num, mr.ErrBusy)
	}
	inner, err := qp.New(num, qc)
	if err != nil {
		return nil, err
	}
	q := &QP{dev: d, num: num, qp: inner, queues: queues}
	q.owner = d.up.WrapQP(pd, q)
	if queues != nil {
		queues.Bind(q)
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

func (q *QP) Type() verbs.Type { return q.qp.Type() }

func (q *QP) Attr() verbs.Attr {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Attr()
}

func (q *QP) Status() qp.Status {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.qp.Status()
	if q.queues != nil {
		q.queues.CountPostedLocked(&st)
	}
	return st
}

func (q *QP) Traffic() verbs.Traffic {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Traffic()
}

func (q *QP) Modify(attr *verbs.Attr, mask verbs.AttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return cm.ErrClosed
	}
	if err := q.qp.Modify(attr, mask); err != nil {
		return err
	}
	q.notePeerLocked()
	q.flushNowLocked()
	return nil
}

func (q *QP) PostSend(wr *verbs.SendWR, ring bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return cm.ErrClosed
	}
	if err := q.qp.PostSend(wr); err != nil {
		return err
	}
	if ring {
		q.doorbellLocked()
	}
	return nil
}

func (q *QP) RingDoorbell() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return cm.ErrClosed
	}
	q.doorbellLocked()
	return nil
}

func (q *QP) PostSends(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return 0, cm.ErrClosed
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

func (q *QP) PostSendBatch(wrs []verbs.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return cm.ErrClosed
	}
	if err := q.qp.PostSendBatch(wrs); err != nil {
		return err
	}
	if len(wrs) > 0 {
		q.doorbellLocked()
	}
	return nil
}

func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return cm.ErrClosed
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

// reportErrorLocked calls the error hook the first time it finds the QP in
// the error state.
func (q *QP) reportErrorLocked() {
	if q.onError == nil || q.errorSeen || q.qp.State() != verbs.Err {
		return
	}
	q.errorSeen = true
	q.onError(q.qp.Status().Cause)
}

// Destroy moves the QP to the error state, flushing its work requests,
// and removes it from the device.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	q.flushNowLocked() // the ACKs owed and a NAK that explains an error still go out
	q.qp.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState)
	q.destroyed = true
	q.mu.Unlock()
	q.dev.groups.detachAll(q)
	for _, u := range q.uses {
		u.Done()
	}
	d := q.dev
	d.qps[q.num%uint32(len(d.qps))].CompareAndSwap(q, nil)
	return nil
}

// MW is a memory window of the embedded device's region table.
type MW struct {
	dev *Device
	w   *mr.Window
}

func (p *PD) AllocMW(typ mr.WindowType) (provider.MW, error) {
	w, err := p.dev.mem.AllocWindow(p.pd, typ)
	if err != nil {
		return nil, err
	}
	return &MW{dev: p.dev, w: w}, nil
}

// RKey is the window's key, which changes when a bind executes.
func (w *MW) RKey() uint32   { return w.w.RKey() }
func (w *MW) Dealloc() error { return w.dev.mem.DeallocWindow(w.w) }

// noteErrorLocked reports, once per entry into the error state, a QP that
// an error completion moved there; a Modify to ERR, a Destroy or a CQ
// overflow (cause SUCCESS) is no error of the QP's to report.
func (q *QP) noteErrorLocked() {
	if q.qp.State() != verbs.Err {
		q.errorNoted = false
		return
	}
	if q.errorNoted {
		return
	}
	q.errorNoted = true
	cause := q.qp.Status().Cause
	switch {
	case cause == verbs.Success:
	case q.queues != nil:
		q.queues.Failed(cause)
	default:
		q.dev.up.QPError(q.owner, cause)
	}
}

// addrOf is the address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
