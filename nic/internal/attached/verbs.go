package attached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/spin"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/qp/verbcheck"
	"github.com/softnic/softnic/verbs"
)

// The verbs of an attached device: PDs, regions, CQs, SRQs and QPs are the
// daemon's, named by handle; the queues are rings this process fills or
// drains directly.

// attachedPD is a PD of the daemon's, named by handle h.
type attachedPD struct {
	a     *attachment
	h     uint32
	pd    mr.PDHandle // its number in the daemon's region table
	owner any         // the public PD
}

func (a *attachment) AllocPD(owner any) (provider.PD, error) {
	var r attachproto.PDResult
	if _, err := a.call(context.Background(), attachproto.OpAllocPD, nil, nil, &r); err != nil {
		return nil, err
	}
	return &attachedPD{a: a, h: r.H, pd: r.PD, owner: owner}, nil
}

func (p *attachedPD) Handle() mr.PDHandle { return p.pd }

func (p *attachedPD) Dealloc() error {
	_, err := p.a.call(context.Background(), attachproto.OpDeallocPD, attachproto.HandleArgs{H: p.h}, nil, nil)
	return err
}

// named is an attached device's object, which the daemon names by a
// handle.
type named interface{ daemonHandle() uint32 }

func (p *attachedPD) daemonHandle() uint32  { return p.h }
func (c *attachedCQ) daemonHandle() uint32  { return c.h }
func (s *attachedSRQ) daemonHandle() uint32 { return s.h }
func (q *attachedQP) daemonHandle() uint32  { return q.h }

// findNamed returns the object of set, one of a's sets (guarded by a.mu),
// that the daemon names h, or nil: the object of the daemon's news.
func findNamed[T interface {
	comparable
	named
}](a *attachment, set map[T]struct{}, h uint32) T {
	a.mu.Lock()
	defer a.mu.Unlock()
	for o := range set {
		if o.daemonHandle() == h {
			return o
		}
	}
	var none T
	return none
}

// daemonHandle is the daemon's handle of the provider object prov, 0 for
// none or another device's (which the daemon refuses).
func daemonHandle(prov any) uint32 {
	if n, ok := prov.(named); ok {
		return n.daemonHandle()
	}
	return 0
}

// sharedBuf is memory this process shares with the daemon: a memfd of
// AllocMR, registered there, and used by its regions.
type sharedBuf struct {
	m     *shm.Mapping
	size  int    // the bytes asked for
	owner uint32 // the handle of the AllocMR region, which names the memory to the daemon
	live  bool   // the AllocMR region is registered: RegMR may take parts of the memory
	refs  int    // regions over the memory; it is unmapped with the last
}

// addrOf is the address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// attachedMR is a region of an attached device, in the PD pd: mem, part
// of buf's memory, which the daemon registered with the key key at addr.
type attachedMR struct {
	a    *attachment
	pd   *attachedPD
	h    uint32
	buf  *sharedBuf
	mem  []byte
	key  uint32
	addr uint64
}

// newMR returns the region the daemon registered as r over b's memory mem.
func (p *attachedPD) newMR(mem []byte, r *attachproto.MRResult, b *sharedBuf) *attachedMR {
	return &attachedMR{a: p.a, pd: p, h: r.H, buf: b, mem: mem, key: r.LKey, addr: r.Addr}
}

func (m *attachedMR) Bytes() []byte { return m.mem }
func (m *attachedMR) Shared()       {}
func (m *attachedMR) Key() uint32   { return m.key }
func (m *attachedMR) Addr() uint64  { return m.addr }

func (p *attachedPD) AllocMR(size int, access mr.Access) (provider.MR, error) {
	a := p.a
	m, err := shm.Create("softnic-mr", size)
	if err != nil {
		return nil, fmt.Errorf("softnic: memory region of %d bytes: %v: %w", size, err, mr.ErrNoMem)
	}
	var r attachproto.MRResult
	_, err = a.call(context.Background(), attachproto.OpAllocMR, attachproto.AllocMRArgs{PD: p.h, Size: size, Access: access}, []int{m.FD()}, &r)
	m.CloseFD()
	if err != nil {
		m.Close()
		return nil, err
	}
	b := &sharedBuf{m: m, size: size, owner: r.H, live: true, refs: 1}
	return p.newShared(b, m.Bytes()[:size:size], &r)
}

// newShared returns the region the daemon registered as r over mem, all
// or part of b's memory, which it shares with the daemon from now on.
func (p *attachedPD) newShared(b *sharedBuf, mem []byte, r *attachproto.MRResult) (provider.MR, error) {
	a := p.a
	reg := p.newMR(mem, r, b)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended.Load() {
		b.m.Close()
		return nil, cm.ErrClosed
	}
	a.bufs[b] = struct{}{}
	a.mrs[reg] = struct{}{}
	return reg, nil
}

func (p *attachedPD) RegMR(buf []byte, access mr.Access) (provider.MR, error) {
	a := p.a
	if len(buf) == 0 {
		return nil, fmt.Errorf("softnic: register an empty buffer: %w", mr.ErrInvalid)
	}
	start := addrOf(buf)
	a.mu.Lock()
	if a.ended.Load() {
		a.mu.Unlock()
		return nil, cm.ErrClosed
	}
	var b *sharedBuf
	for x := range a.bufs {
		base := addrOf(x.m.Bytes())
		if x.live && start >= base && start-base <= uint64(x.size) && uint64(len(buf)) <= uint64(x.size)-(start-base) {
			b = x
			break
		}
	}
	if b != nil {
		b.refs++ // held across the call: the memory stays mapped
	}
	a.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("softnic: register %d bytes at %#x: an attached process registers only memory it shares with the daemon; allocate it with PD.AllocMR (and register parts of it with RegMR): %w",
			len(buf), start, mr.ErrFault)
	}
	var r attachproto.MRResult
	off := int(start - addrOf(b.m.Bytes()))
	_, err := a.call(context.Background(), attachproto.OpRegMR, attachproto.RegMRArgs{PD: p.h, Buf: b.owner, Off: off, Len: len(buf), Access: access}, nil, &r)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.unrefLocked(b)
		return nil, err
	}
	reg := p.newMR(buf, &r, b)
	if a.mrs != nil {
		a.mrs[reg] = struct{}{}
	}
	return reg, nil
}

// RegShared has the daemon map the memfd fd and register n bytes at
// offset off of it at iova; m, this process's mapping of them (from skip),
// becomes the region's memory.
func (p *attachedPD) RegShared(m *shm.Mapping, skip, fd int, off int64, n int, iova uint64, access mr.Access) (provider.MR, error) {
	a := p.a
	m.CloseFD()
	var r attachproto.MRResult
	args := attachproto.RegSharedArgs{PD: p.h, Off: off, Len: n, IOVA: iova, Access: access}
	if _, err := a.call(context.Background(), attachproto.OpRegShared, args, []int{fd}, &r); err != nil {
		m.Close()
		return nil, err
	}
	b := &sharedBuf{m: m, size: len(m.Bytes()), owner: r.H, refs: 1}
	return p.newShared(b, m.Bytes()[skip:skip+n:skip+n], &r)
}

func (m *attachedMR) Dereg() error {
	a := m.a
	if _, err := a.call(context.Background(), attachproto.OpDeregMR, attachproto.HandleArgs{H: m.h}, nil, nil); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.mrs, m)
	if m.h == m.buf.owner {
		m.buf.live = false
	}
	a.unrefLocked(m.buf)
	return nil
}

// Rereg has the daemon re-register the region; with mr.ReregPD, pd must
// be a PD of the same attachment.
func (m *attachedMR) Rereg(flags mr.ReregFlags, pd provider.PD, access mr.Access) error {
	var to *attachedPD
	if flags&mr.ReregPD != 0 {
		p, ok := pd.(*attachedPD)
		if !ok || p.a != m.a {
			return fmt.Errorf("rereg into a PD of another device: %w", mr.ErrInvalid)
		}
		to = p
	}
	args := attachproto.ReregMRArgs{H: m.h, Flags: flags, Access: access}
	if to != nil {
		args.PD = to.h
	}
	if _, err := m.a.call(context.Background(), attachproto.OpReregMR, args, nil, nil); err != nil {
		return err
	}
	if to != nil {
		m.a.mu.Lock()
		m.pd = to
		m.a.mu.Unlock()
	}
	return nil
}

// Prefetch has the daemon make the region's pages resident.
func (m *attachedMR) Prefetch(addr, n uint64) error {
	_, err := m.a.call(context.Background(), attachproto.OpPrefetchMR, attachproto.PrefetchMRArgs{H: m.h, Addr: addr, Len: n}, nil, nil)
	return err
}

// unrefLocked drops a reference to b and unmaps it with the last.
func (a *attachment) unrefLocked(b *sharedBuf) {
	if b.refs--; b.refs == 0 && a.bufs != nil {
		delete(a.bufs, b)
		b.m.Close()
	}
}

func (p *attachedPD) SGEAt(start, n uint64) (verbs.SGE, bool) {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	for m := range a.mrs {
		base := addrOf(m.mem)
		if m.pd == p && start >= base && start-base <= uint64(len(m.mem)) && n <= uint64(len(m.mem))-(start-base) {
			return verbs.SGE{Addr: m.addr + (start - base), Length: uint32(n), LKey: m.key}, true
		}
	}
	return verbs.SGE{}, false
}

// attachedCQ is the completion ring of an attached device's CQ: the
// daemon writes completions, Poll reads them without a system call, and a
// waiter that finds it empty watches the ring for a while (spinning),
// then arms it and sleeps on the CQ's wakeup, an epoll fd in which the
// daemon's eventfd for the CQ is registered (shm.Waiter; see nic's
// CQ.wait).
type attachedCQ struct {
	a        *attachment
	st       *provider.CQState
	h        uint32
	depth    uint32
	ev       *shm.Waiter
	lead     sync.Mutex   // held by the one waiter that waits on ev
	spinning *spin.Policy // how long a waiter watches the ring before it sleeps
	armFn    func() bool  // c.arm, bound once for the lead waiter's wait
	ready    func() bool  // what the lead waiter waits for (Park), under lead

	mu     sync.Mutex
	m      *shm.Mapping
	ring   shm.Ring
	cons   uint32
	closed bool
	kept   []verbs.WC // what the ring held when the device closed, not polled yet
	// written and solicited are the ring's counts of completions written
	// (Written) as last read: what a closed CQ reports.
	written, solicited uint32
}

func (a *attachment) CreateCQ(depth int, st *provider.CQState) (provider.CQ, error) {
	if depth <= 0 || depth > qp.MaxCQE {
		return nil, fmt.Errorf("completion queue depth %d: %w", depth, mr.ErrInvalid)
	}
	var r attachproto.CQResult
	fds, err := a.call(context.Background(), attachproto.OpCreateCQ, attachproto.CreateCQArgs{Depth: depth}, nil, &r)
	if err != nil {
		return nil, err
	}
	m, ring, err := mapCQ(fds, depth)
	var ev *shm.Waiter
	if err == nil {
		if ev, err = shm.NewWaiter(fds[1], "softnic-cq-wakeup"); err != nil {
			m.Close()
		}
	}
	if err != nil {
		a.drop(attachproto.OpDestroyCQ, r.H)
		return nil, err
	}
	ac := &attachedCQ{a: a, st: st, h: r.H, depth: uint32(depth), ev: ev,
		spinning: spin.NewPolicy(a.waitSpin), m: m, ring: ring}
	ac.armFn = ac.arm
	a.mu.Lock()
	if a.ended.Load() {
		a.mu.Unlock()
		ac.close(false)
		return nil, cm.ErrClosed
	}
	a.cqs[ac] = struct{}{}
	a.mu.Unlock()
	return ac, nil
}

// mapCQ maps the ring of a CQ of depth entries whose memfd is fds[0]; the
// CQ's wakeup, fds[1], is left open. On error it closes both.
func mapCQ(fds []int, depth int) (*shm.Mapping, shm.Ring, error) {
	if len(fds) != 2 {
		shm.CloseFDs(fds)
		return nil, shm.Ring{}, fmt.Errorf("softnic: create CQ: %d descriptors: %w", len(fds), shm.ErrProtocol)
	}
	m, ring, err := mapRing(fds[:1], shm.CQESize, depth)
	if err != nil {
		shm.CloseFDs(fds[1:])
	}
	return m, ring, err
}

// drop has the daemon destroy (op) the object h it made for a call that
// then failed here, which would otherwise stay until detach.
func (a *attachment) drop(op string, h uint32) {
	a.call(context.Background(), op, attachproto.HandleArgs{H: h}, nil, nil)
}

// Destroy has the daemon destroy the CQ, then unmaps its ring; a waiter
// asleep on it wakes with ErrClosed.
func (c *attachedCQ) Destroy() error {
	if c.st.Users.Gone() {
		return nil
	}
	a := c.a
	if _, err := a.call(context.Background(), attachproto.OpDestroyCQ, attachproto.HandleArgs{H: c.h}, nil, nil); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.cqs, c)
	a.mu.Unlock()
	c.close(false)
	return c.st.Retire()
}

// Park first watches the ring, giving up the CPU between looks
// (shm.Yield), for the budget the CQ's spinning policy gives
// (nic.Config.WaitSpin): a completion the daemon writes meanwhile is
// found with no thread of this process woken, and the daemon, which
// writes it into a ring no waiter armed, signals nothing. Then it lets
// one waiter at a time, the one holding c.lead, arm the CQ and sleep on
// its wakeup; the others sleep in CQState.Sleep.
func (c *attachedCQ) Park(ctx context.Context, done <-chan struct{}, ready func() bool) (bool, error) {
	found, spun := c.spin(ready)
	if found {
		return true, nil
	}
	if !c.lead.TryLock() {
		return false, nil
	}
	defer c.lead.Unlock()
	start := time.Now()
	c.ready = ready
	err := c.sleep(ctx, done)
	if ready() {
		c.spinning.Slept(time.Since(start), spun)
	}
	return true, err
}

// spin watches the ring for the budget the CQ's spinning policy gives,
// until it is ready (found; see Park), yielding the CPU between looks so
// that on a host of few CPUs the daemon, which is to write the
// completion, is not kept from running. A CQ closed meanwhile ends the
// spin, not found: the sleep that follows reports it. spun says whether
// it was given a budget.
func (c *attachedCQ) spin(ready func() bool) (found, spun bool) {
	budget := c.spinning.Budget()
	if budget == 0 {
		return false, false
	}
	end := time.Now().Add(budget)
	for {
		switch {
		case ready():
			c.spinning.Spun(true)
			return true, true
		case c.isClosed() || time.Now().After(end):
			c.spinning.Spun(false)
			return false, true
		}
		shm.Yield()
	}
}

func (c *attachedCQ) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// sleep arms the CQ and, unless completions came meanwhile, waits for the
// daemon's wakeup, for ctx to end or the device to close. The wait is the
// runtime's poller's, woken straight from the epoll fd; it takes the
// wakeups of earlier armings first, then arms the CQ and looks at the
// ring (arm). The caller holds c.lead.
func (c *attachedCQ) sleep(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return cm.ErrClosed
	default:
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.ev.SetDeadline(longAgo) })
		defer func() {
			if !stop() {
				c.ev.SetDeadline(time.Time{})
			}
		}()
	}
	_, err := c.ev.Wait(c.armFn, nil)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		select {
		case <-done:
			return cm.ErrClosed
		default: // a deadline left by an earlier waiter's context
			c.ev.SetDeadline(time.Time{})
			return nil
		}
	default:
		return cm.ErrClosed
	}
}

// longAgo is a deadline that has passed.
var longAgo = time.Unix(1, 0)

// interrupt wakes the CQ's sleeping waiter for good: the session ended.
func (c *attachedCQ) interrupt() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.ev.SetDeadline(longAgo)
	}
}

// Poll moves up to len(wcs) completions out of the ring. The daemon
// processes the packets, so what drive asks of an embedded device, a poll
// in a loop processing them on the caller's goroutine, is here a poll in
// a loop giving up the CPU when the ring is empty (shm.Yield), so as not
// to keep it from the daemon that is to write the completion: two softnic
// perftest write_lat on one daemon, each spinning on CQ.Poll on a host of
// 2 CPUs, took a scheduler time slice for many an operation (t_typical
// 29–2,985 µs in three runs at load 9, where libsoftnic's ib_write_lat,
// whose ibv_poll_cq yielded, took 25–33 µs).
func (c *attachedCQ) Poll(wcs []verbs.WC, drive bool) (int, error) {
	n, err := c.poll(wcs)
	if n == 0 && err == nil && drive {
		shm.Yield()
	}
	return n, err
}

func (c *attachedCQ) poll(wcs []verbs.WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		if len(c.kept) == 0 {
			return 0, cm.ErrClosed
		}
		n := copy(wcs, c.kept)
		c.kept = c.kept[n:]
		return n, nil
	}
	prod := c.ring.Producer().Load()
	if prod-c.cons > c.depth {
		return 0, fmt.Errorf("completion ring producer index %d, consumer %d: %w", prod, c.cons, shm.ErrCorrupt)
	}
	n := 0
	for ; n < len(wcs) && c.cons != prod; n++ {
		if err := shm.DecodeCQE(c.ring.Slot(c.cons), &wcs[n]); err != nil {
			return n, err
		}
		c.cons++
	}
	if n > 0 {
		c.ring.Consumer().Store(c.cons)
		return n, nil
	}
	if c.ring.Overflow().Load() != 0 {
		return 0, qp.ErrOverflow
	}
	return 0, nil
}

// arm is sleep's look, once the wait took the wakeups that came before
// it: it asks the daemon to signal the next completion, and reports
// whether the ring is ready already (c.ready: the daemon writes a
// completion before it looks whether the ring is armed), or the CQ is
// closed. The
// arming must follow the take: a wakeup taken may be the daemon's answer
// to an earlier arming, whose completion another thread polled (a
// program's ibv_poll_cq while libsoftnic waits for its next event), and
// the daemon, which disarmed the ring as it signalled, would signal no
// other.
func (c *attachedCQ) arm() bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return true
	}
	c.ring.Armed().Store(1)
	c.mu.Unlock()
	return c.ready()
}

// WakeupFD is provider.Wakeup's: the epoll fd the daemon's signals of the
// CQ's armings make readable, Park's too (nic's CQ.Wakeup says which may
// use it).
func (c *attachedCQ) WakeupFD() int { return c.ev.FD() }

// ArmWakeup is provider.Wakeup's: it arms the ring, as Park's look does,
// for the next completion or the next solicited one.
func (c *attachedCQ) ArmWakeup(solicitedOnly bool) {
	armed := uint32(shm.ArmedAny)
	if solicitedOnly {
		armed = shm.ArmedSolicited
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.ring.Armed().Store(armed)
	}
}

// DisarmWakeup is provider.Wakeup's: the daemon, which swaps the armed
// word back to zero as it signals, has signalled if it is zero already.
func (c *attachedCQ) DisarmWakeup() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.ring.Armed().Swap(0) == 0
}

// TakeWakeups is provider.Wakeup's.
func (c *attachedCQ) TakeWakeups(wait time.Duration) int { return c.ev.Take(wait) }

// Resize has the daemon resize the CQ, with polls held back meanwhile:
// the daemon moves the completions not polled to the start of a new ring,
// which replaces this one.
func (c *attachedCQ) Resize(depth int) error {
	if depth <= 0 || depth > qp.MaxCQE {
		return fmt.Errorf("completion queue depth %d: %w", depth, mr.ErrInvalid)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return cm.ErrClosed
	}
	fds, err := c.a.call(context.Background(), attachproto.OpResizeCQ, attachproto.ResizeCQArgs{H: c.h, Depth: depth}, nil, nil)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	m, ring, err := mapRing(fds, shm.CQESize, depth)
	if err != nil {
		c.mu.Unlock()
		c.close(false) // the daemon unmapped the old ring: what it held is lost
		return err
	}
	c.m.Close()
	c.m, c.ring, c.cons, c.depth = m, ring, 0, uint32(depth)
	c.mu.Unlock()
	return nil
}

// Discard keeps the completions of other QPs than qpn, in order, in the
// slots just below the producer index, and moves the consumer index up to
// the first of them: the slots below it are the daemon's to write again,
// those from the producer index on were never the process's to touch.
func (c *attachedCQ) Discard(qpn uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		n := len(c.kept)
		c.kept = slices.DeleteFunc(c.kept, func(wc verbs.WC) bool { return wc.QPN == qpn })
		return n - len(c.kept)
	}
	waiting, prod, ok := c.waitingLocked()
	if !ok {
		return 0 // a corrupt ring, which Poll reports
	}
	kept := slices.DeleteFunc(waiting, func(wc verbs.WC) bool { return wc.QPN == qpn })
	removed := int(prod-c.cons) - len(kept)
	if removed == 0 {
		return 0
	}
	c.cons = prod - uint32(len(kept))
	for i := range kept {
		shm.EncodeCQE(c.ring.Slot(c.cons+uint32(i)), &kept[i])
	}
	c.ring.Consumer().Store(c.cons)
	return removed
}

// waitingLocked decodes the completions waiting to be polled, oldest
// first, up to the producer index it returns; ok is false, and the
// completions stop short, if the index or a completion is corrupt. c.mu is
// held; the CQ is not closed.
func (c *attachedCQ) waitingLocked() (wcs []verbs.WC, prod uint32, ok bool) {
	prod = c.ring.Producer().Load()
	if prod-c.cons > c.depth {
		return nil, prod, false
	}
	var wc verbs.WC
	for i := c.cons; i != prod; i++ {
		if shm.DecodeCQE(c.ring.Slot(i), &wc) != nil {
			return wcs, prod, false
		}
		wcs = append(wcs, wc)
	}
	return wcs, prod, true
}

// Written reads the counts of completions written that the daemon keeps
// in the ring's header (shm.Ring.Written).
func (c *attachedCQ) Written() (all, solicited uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.written, c.solicited = c.ring.Written().Load(), c.ring.Solicited().Load()
	}
	return c.written, c.solicited
}

func (c *attachedCQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return len(c.kept)
	}
	// An index beyond the ring is corrupt, which Poll reports.
	return int(min(c.ring.Producer().Load()-c.cons, c.depth))
}

// close unmaps the ring. With keep (the device closed, as opposed to the
// CQ destroyed), the completions in it stay for Poll, as an embedded
// device's do; a corrupt one ends what is kept.
func (c *attachedCQ) close(keep bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if keep {
		c.kept, _, _ = c.waitingLocked()
	}
	c.written, c.solicited = c.ring.Written().Load(), c.ring.Solicited().Load()
	c.closed = true
	c.m.Close()
	c.mu.Unlock()
	// Not under c.mu: a wait under way may be in its look (arm), which
	// takes c.mu, and closing the descriptor waits for that wait to
	// return; the look finds the CQ closed and ends it.
	c.ev.Close()
}

// attachedSRQ is the ring of an attached device's SRQ, of the PD pd.
type attachedSRQ struct {
	a      *attachment
	owner  any // the public SRQ
	pd     *attachedPD
	h      uint32
	depth  uint32
	maxSGE int

	mu     sync.Mutex
	m      *shm.Mapping
	ring   shm.Ring
	prod   uint32
	closed bool

	destroyed atomic.Bool // by Destroy
}

func (p *attachedPD) CreateSRQ(owner any, depth, maxSGE int) (provider.SRQ, error) {
	a := p.a
	if depth <= 0 || depth > qp.MaxSRQWR || maxSGE <= 0 || maxSGE > qp.MaxSGE {
		return nil, fmt.Errorf("SRQ depth %d, max SGE %d: %w", depth, maxSGE, mr.ErrInvalid)
	}
	var r attachproto.SRQResult
	fds, err := a.call(context.Background(), attachproto.OpCreateSRQ, attachproto.CreateSRQArgs{PD: p.h, Depth: depth, MaxSGE: maxSGE}, nil, &r)
	if err != nil {
		return nil, err
	}
	m, ring, err := mapRing(fds, shm.RecvSlotSize(maxSGE), depth)
	if err != nil {
		a.drop(attachproto.OpDestroySRQ, r.H)
		return nil, err
	}
	s := &attachedSRQ{a: a, owner: owner, pd: p, h: r.H, depth: uint32(depth), maxSGE: maxSGE, m: m, ring: ring}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended.Load() {
		s.close()
		return nil, cm.ErrClosed
	}
	a.srqs[s] = struct{}{}
	return s, nil
}

// mapRing maps the ring of n slots of size bytes whose memfd is fds[0],
// the only descriptor expected, and closes it: the mapping stays.
func mapRing(fds []int, size, n int) (*shm.Mapping, shm.Ring, error) {
	if len(fds) != 1 {
		shm.CloseFDs(fds)
		return nil, shm.Ring{}, fmt.Errorf("softnic: %d descriptors for a ring: %w", len(fds), shm.ErrProtocol)
	}
	return shm.MapRing(fds[0], n, size)
}

// PostRecv posts a receive WR. It needs no doorbell: the daemon takes an
// SRQ's WRs as packets arrive.
func (s *attachedSRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return postRecvLocked(&s.ring, &s.prod, s.depth, s.maxSGE, s.closed || s.a.ended.Load(), wr)
}

// postRecvLocked writes a receive WR into the next slot of ring, whose
// producer index is *prod.
func postRecvLocked(ring *shm.Ring, prod *uint32, depth uint32, maxSGE int, closed bool, wr *verbs.RecvWR) error {
	switch {
	case closed:
		return cm.ErrClosed
	case len(wr.SGL) > maxSGE:
		return fmt.Errorf("receive WR with %d SGEs, at most %d: %w", len(wr.SGL), maxSGE, mr.ErrInvalid)
	case *prod-ring.Consumer().Load() >= depth:
		return fmt.Errorf("receive queue full (%d WRs): %w", depth, mr.ErrNoMem)
	}
	for i := range wr.SGL {
		if uint64(wr.SGL[i].Length)+wr.SGL[i].Addr < wr.SGL[i].Addr {
			return fmt.Errorf("receive SGE %d wraps the address space: %w", i, mr.ErrInvalid)
		}
	}
	if err := shm.EncodeRecv(ring.Slot(*prod), wr); err != nil {
		return err
	}
	*prod++
	ring.Producer().Store(*prod)
	return nil
}

// Attr asks the daemon, which knows whether the limit was reached; with
// the daemon gone, or the SRQ destroyed, it answers the sizes it knows
// and no limit.
func (s *attachedSRQ) Attr() verbs.SRQAttr {
	var r verbs.SRQAttr
	if _, err := s.a.call(context.Background(), attachproto.OpQuerySRQ, attachproto.HandleArgs{H: s.h}, nil, &r); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return verbs.SRQAttr{MaxWR: int(s.depth), MaxSGE: s.maxSGE}
	}
	return r
}

// Modify has the daemon change the SRQ, with posts held back meanwhile:
// the daemon takes what the ring holds first and, if it resizes the SRQ,
// answers with a new ring, which replaces this one.
func (s *attachedSRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return cm.ErrClosed
	}
	var r attachproto.ModifySRQResult
	fds, err := s.a.call(context.Background(), attachproto.OpModifySRQ, attachproto.ModifySRQArgs{H: s.h, Attr: *attr, Mask: mask}, nil, &r)
	switch {
	case err != nil:
		return err
	case !r.Resized:
		shm.CloseFDs(fds)
		return nil
	}
	m, ring, err := mapRing(fds, shm.RecvSlotSize(s.maxSGE), attr.MaxWR)
	if err != nil {
		// The daemon unmapped the old ring: the SRQ can take no more posts.
		s.closed = true
		s.m.Close()
		return err
	}
	s.m.Close()
	s.m, s.ring, s.prod, s.depth = m, ring, r.Prod, uint32(attr.MaxWR)
	return nil
}

// srqLimit passes the daemon's news of an SRQ's limit up to the device
// (Config.OnSRQLimit).
func (a *attachment) srqLimit(m *attachproto.Msg) {
	var ev attachproto.SRQLimitEvent
	if json.Unmarshal(m.Args, &ev) != nil {
		return
	}
	if s := findNamed(a, a.srqs, ev.H); s != nil {
		a.up.SRQLimit(s.owner)
	}
}

// attachedMW is a window of the daemon's, named by handle h.
type attachedMW struct {
	a   *attachment
	h   uint32
	key atomic.Uint32 // its rkey after the binds posted
}

// AllocMW has the daemon allocate a window in the PD.
func (p *attachedPD) AllocMW(typ mr.WindowType) (provider.MW, error) {
	a := p.a
	var r attachproto.MWResult
	if _, err := a.call(context.Background(), attachproto.OpAllocMW, attachproto.AllocMWArgs{PD: p.h, Type: typ}, nil, &r); err != nil {
		return nil, err
	}
	w := &attachedMW{a: a, h: r.H}
	w.key.Store(r.RKey)
	a.mu.Lock()
	a.mws[r.RKey>>8] = w
	a.mu.Unlock()
	return w, nil
}

// RKey is the key of the last bind posted for the window, as libibverbs
// updates mw->rkey when ibv_bind_mw posts.
func (w *attachedMW) RKey() uint32 { return w.key.Load() }

func (w *attachedMW) Dealloc() error {
	a := w.a
	if _, err := a.call(context.Background(), attachproto.OpDeallocMW, attachproto.HandleArgs{H: w.h}, nil, nil); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.mws, w.key.Load()>>8)
	a.mu.Unlock()
	return nil
}

// posted records that a BIND_MW request for the window was posted, for
// rkey: the window keeps its index and takes the new key's variant.
func (w *attachedMW) posted(b *mr.BindRequest) {
	w.key.CompareAndSwap(b.WindowKey, b.WindowKey&^0xff|b.NewKey&0xff)
}

// bindPosted updates the rkey of the window a BIND_MW request posted
// binds, if the process allocated it.
func (a *attachment) bindPosted(wr *verbs.SendWR) {
	b := wr.Bind
	if wr.Opcode != verbs.WRBindMW || b == nil {
		return
	}
	a.mu.Lock()
	w := a.mws[b.WindowKey>>8]
	a.mu.Unlock()
	if w != nil {
		w.posted(b)
	}
}

// Destroy has the daemon destroy the SRQ, then unmaps its ring.
func (s *attachedSRQ) Destroy() error {
	if s.destroyed.Load() {
		return nil
	}
	a := s.a
	if _, err := a.call(context.Background(), attachproto.OpDestroySRQ, attachproto.HandleArgs{H: s.h}, nil, nil); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.srqs, s)
	a.mu.Unlock()
	s.close()
	s.destroyed.Store(true)
	return nil
}

func (s *attachedSRQ) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.m.Close()
	}
}

// attachedQP is an attached device's QP: its send and receive rings, and
// what the process knows of its state, from its own Modify calls and
// queries (posting checks it, as the embedded QP does). A ring is read and
// written only under its lock with the QP open: close takes both locks to
// unmap them.
type attachedQP struct {
	a     *attachment
	owner any // the public QP
	h     uint32
	num   uint32
	slot  uint32 // in the doorbell page
	cfg   attachproto.QPConfig
	// info is what the daemon told of the QP last (zero once the QP is
	// closed), read by posts without a lock; infoMu orders its writers.
	info   atomic.Pointer[attachproto.QueryQPResult]
	infoMu sync.Mutex

	sqMu   sync.Mutex
	sqMap  *shm.Mapping
	sq     shm.Ring
	sqProd uint32
	rqMu   sync.Mutex
	rqMap  *shm.Mapping
	rq     shm.Ring
	rqProd uint32
	closed atomic.Bool
}

func (p *attachedPD) CreateQP(cfg provider.QPConfig) (provider.QP, error) {
	a := p.a
	if err := p.checkQPConfig(&cfg); err != nil {
		return nil, err
	}
	var r attachproto.QPResult
	fds, err := a.call(context.Background(), attachproto.OpCreateQP, attachproto.CreateQPArgs{PD: p.h, Config: qpArgs(&cfg)}, nil, &r)
	if err != nil {
		return nil, err
	}
	q, err := p.newQP(&r, fds)
	if err != nil {
		a.drop(attachproto.OpDestroyQP, r.H)
		return nil, err
	}
	return q, nil
}

// checkQPConfig checks that cfg, for a QP of the PD, names objects of this
// device.
func (p *attachedPD) checkQPConfig(cfg *provider.QPConfig) error {
	switch {
	case cfg.SendCQ == nil:
		return fmt.Errorf("QP needs a send CQ: %w", mr.ErrInvalid)
	case !p.a.ownCQ(cfg.SendCQ), cfg.RecvCQ != nil && !p.a.ownCQ(cfg.RecvCQ):
		return fmt.Errorf("CQ of another device: %w", mr.ErrInvalid)
	}
	if s, ok := cfg.SRQ.(*attachedSRQ); cfg.SRQ != nil && (!ok || s.pd != p) {
		return fmt.Errorf("SRQ of another PD: %w", mr.ErrInvalid)
	}
	return nil
}

// ownCQ reports whether c is a CQ of this device.
func (a *attachment) ownCQ(c provider.CQ) bool {
	ac, ok := c.(*attachedCQ)
	return ok && ac.a == a
}

// newQP maps the rings of a QP the daemon made in the PD, and has the
// device wrap it.
func (p *attachedPD) newQP(r *attachproto.QPResult, fds []int) (*attachedQP, error) {
	a := p.a
	c := r.Config
	want := 2
	if c.SRQ != 0 {
		want = 1
	}
	if len(fds) != want {
		shm.CloseFDs(fds)
		return nil, fmt.Errorf("softnic: %d descriptors for a QP's rings, want %d: %w", len(fds), want, shm.ErrProtocol)
	}
	q := &attachedQP{a: a, h: r.H, num: r.QPN, slot: r.Slot, cfg: c}
	var err error
	if q.sqMap, q.sq, err = mapRing(fds[:1], shm.SendSlotSize(c.MaxSendSGE, c.MaxInline), c.MaxSendWR); err != nil {
		shm.CloseFDs(fds[1:])
		return nil, err
	}
	if want == 2 {
		if q.rqMap, q.rq, err = mapRing(fds[1:], shm.RecvSlotSize(c.MaxRecvSGE), c.MaxRecvWR); err != nil {
			q.sqMap.Close()
			return nil, err
		}
	}
	q.cache(&attachproto.QueryQPResult{Attr: r.Attr, Status: qp.Status{State: r.Attr.State}})
	q.owner = a.up.WrapQP(p.owner, q)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended.Load() {
		q.close()
		return nil, cm.ErrClosed
	}
	a.qps[q] = struct{}{}
	return q, nil
}

// qpError passes the daemon's news of a QP's error up to the device
// (Config.OnQPError).
func (a *attachment) qpError(m *attachproto.Msg) {
	var ev attachproto.QPErrorEvent
	if json.Unmarshal(m.Args, &ev) != nil {
		return
	}
	if q := findNamed(a, a.qps, ev.H); q != nil {
		a.up.QPError(q.owner, ev.Cause)
	}
}

func (q *attachedQP) Num() uint32 { return q.num }
func (q *attachedQP) Owner() any  { return q.owner }

// cache records what the daemon told of the QP: posting checks its state
// and attributes, and Attr and Status fall back on it once the daemon
// cannot answer.
func (q *attachedQP) cache(r *attachproto.QueryQPResult) {
	q.infoMu.Lock()
	defer q.infoMu.Unlock()
	if q.closed.Load() {
		return
	}
	c := *r
	q.info.Store(&c)
}

// query asks the daemon for the QP's attributes and status. When it cannot
// answer (the session ended), query returns, with the error, what the
// daemon told last or, once the QP is closed, the zero attributes of a QP
// in RESET, as an embedded QP has after Destroy. The queue counts come
// from the rings: the daemon's QP does not count the WRs it has not taken
// from them yet.
func (q *attachedQP) query() (attachproto.QueryQPResult, error) {
	var r attachproto.QueryQPResult
	_, err := q.a.call(context.Background(), attachproto.OpQueryQP, attachproto.HandleArgs{H: q.h}, nil, &r)
	if err == nil {
		q.cache(&r)
	} else {
		r = *q.info.Load()
	}
	q.countQueued(&r.Status)
	return r, err
}

// countQueued sets the queue counts of st to the WRs posted and not
// retired, which the rings' indexes tell: this process's producer index
// minus the daemon's consumer index.
func (q *attachedQP) countQueued(st *qp.Status) {
	q.sqMu.Lock()
	if !q.closed.Load() {
		st.SendQueued = int(q.sqProd - q.sq.Consumer().Load())
	}
	q.sqMu.Unlock()
	if q.rqMap == nil {
		return // an SRQ's WRs are no QP's
	}
	q.rqMu.Lock()
	if !q.closed.Load() {
		st.RecvQueued = int(q.rqProd - q.rq.Consumer().Load())
	}
	q.rqMu.Unlock()
}

func (q *attachedQP) Type() verbs.Type { return q.cfg.Type }

func (q *attachedQP) Attr() verbs.Attr {
	a, _ := q.query() // on error, what the daemon told last
	return a.Attr
}

func (q *attachedQP) Status() qp.Status {
	a, _ := q.query() // on error, what the daemon told last
	return a.Status
}

func (q *attachedQP) Modify(attr *verbs.Attr, mask verbs.AttrMask) error {
	if q.closed.Load() {
		return cm.ErrClosed // as an embedded QP after Destroy: the daemon forgot its handle
	}
	var r attachproto.QueryQPResult
	if _, err := q.a.call(context.Background(), attachproto.OpModifyQP, attachproto.ModifyQPArgs{H: q.h, Attr: *attr, Mask: mask}, nil, &r); err != nil {
		return err
	}
	q.cache(&r)
	return nil
}

// AttachMulticast has the daemon attach the QP to the group.
func (q *attachedQP) AttachMulticast(group netip.Addr) error {
	return q.mcast(attachproto.OpAttachMcast, group)
}

// DetachMulticast has the daemon detach the QP from the group.
func (q *attachedQP) DetachMulticast(group netip.Addr) error {
	return q.mcast(attachproto.OpDetachMcast, group)
}

func (q *attachedQP) mcast(op string, group netip.Addr) error {
	if q.closed.Load() {
		return cm.ErrClosed
	}
	_, err := q.a.call(context.Background(), op, attachproto.McastArgs{H: q.h, Group: group}, nil, nil)
	return err
}

// checkSend refuses what the embedded QP refuses (verbcheck.SendCaps.Check):
// a post in the wrong state, or a WR the QP cannot carry whatever its
// peer. What depends on the device's state (keys, addresses) is checked by
// the daemon, which fails the QP.
func (q *attachedQP) checkSend(wr *verbs.SendWR) error {
	at := &q.info.Load().Attr
	if !at.State.TakesSends() {
		return fmt.Errorf("the QP is %s; posting sends needs RTS: %w", at.State, mr.ErrInvalid)
	}
	caps := verbcheck.SendCaps{Type: q.cfg.Type, MaxSGE: q.cfg.MaxSendSGE, MaxInline: q.cfg.MaxInline,
		MTU: at.PayloadMTU(q.cfg.Type), MaxRdAtomic: at.MaxRdAtomic}
	return caps.Check(wr)
}

// postSendLocked writes wr into the next slot of the send ring.
func (q *attachedQP) postSendLocked(wr *verbs.SendWR) error {
	if q.closed.Load() || q.a.ended.Load() {
		return cm.ErrClosed
	}
	if err := q.checkSend(wr); err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	if q.sqProd-q.sq.Consumer().Load() >= q.sq.Len() {
		return fmt.Errorf("QP %#x: send queue full (%d WRs): %w", q.num, q.sq.Len(), mr.ErrNoMem)
	}
	if err := shm.EncodeSend(q.sq.Slot(q.sqProd), wr); err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	q.sqProd++
	return nil
}

func (q *attachedQP) PostSend(wr *verbs.SendWR, ring bool) error {
	a := q.a
	q.sqMu.Lock()
	err := q.postSendLocked(wr)
	bell := false
	if err == nil {
		q.sq.Producer().Store(q.sqProd)
		a.bindPosted(wr)
		bell = ring && q.sq.Doorbell().Load() != 0
	}
	q.sqMu.Unlock()
	if bell {
		a.ringDoorbell(q.slot)
	}
	return err
}

func (q *attachedQP) PostSends(wrs []verbs.SendWR) (int, error) {
	a := q.a
	q.sqMu.Lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.postSendLocked(&wrs[i]); err != nil {
			break
		}
		a.bindPosted(&wrs[i])
		n++
	}
	bell := false
	if n > 0 {
		q.sq.Producer().Store(q.sqProd)
		bell = q.sq.Doorbell().Load() != 0
	}
	q.sqMu.Unlock()
	if bell {
		a.ringDoorbell(q.slot)
	}
	return n, err
}

// PostSendBatch writes wrs into the send ring and publishes them together,
// or, if one is refused, none: the producer index the daemon reads goes
// back to where the batch began, and the slots written are free again.
func (q *attachedQP) PostSendBatch(wrs []verbs.SendWR) error {
	a := q.a
	q.sqMu.Lock()
	start := q.sqProd
	for i := range wrs {
		if err := q.postSendLocked(&wrs[i]); err != nil {
			q.sqProd = start
			q.sqMu.Unlock()
			return err
		}
	}
	bell := false
	if len(wrs) > 0 {
		q.sq.Producer().Store(q.sqProd)
		for i := range wrs {
			a.bindPosted(&wrs[i])
		}
		bell = q.sq.Doorbell().Load() != 0
	}
	q.sqMu.Unlock()
	if bell {
		a.ringDoorbell(q.slot)
	}
	return nil
}

// RingDoorbell rings the doorbell for the send ring, if the daemon asks
// for it: a QP with requests outstanding takes new ones without.
func (q *attachedQP) RingDoorbell() error {
	a := q.a
	q.sqMu.Lock()
	closed := q.closed.Load() || a.ended.Load()
	bell := !closed && q.sq.Doorbell().Load() != 0
	q.sqMu.Unlock()
	if closed {
		return cm.ErrClosed
	}
	if bell {
		a.ringDoorbell(q.slot)
	}
	return nil
}

func (q *attachedQP) PostRecv(wr *verbs.RecvWR) error {
	a := q.a
	switch {
	case q.cfg.SRQ != 0:
		return fmt.Errorf("QP %#x takes its receive WRs from an SRQ: %w", q.num, mr.ErrInvalid)
	case q.closed.Load() || a.ended.Load():
		return fmt.Errorf("QP %#x: %w", q.num, cm.ErrClosed)
	case q.info.Load().Attr.State == verbs.Reset:
		return fmt.Errorf("QP %#x is RESET; posting receives needs INIT or later: %w", q.num, mr.ErrInvalid)
	}
	q.rqMu.Lock()
	err := postRecvLocked(&q.rq, &q.rqProd, q.rq.Len(), q.cfg.MaxRecvSGE, q.closed.Load() || a.ended.Load(), wr)
	bell := err == nil && q.rq.Doorbell().Load() != 0
	q.rqMu.Unlock()
	if err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	if bell {
		a.ringDoorbell(q.slot)
	}
	return nil
}

func (q *attachedQP) Destroy() error {
	a := q.a
	if q.closed.Load() {
		return nil
	}
	if _, err := a.call(context.Background(), attachproto.OpDestroyQP, attachproto.HandleArgs{H: q.h}, nil, nil); err != nil {
		return err
	}
	a.forget(q)
	return nil
}

// forget unmaps the rings of a QP the daemon destroyed.
func (a *attachment) forget(q *attachedQP) {
	a.mu.Lock()
	delete(a.qps, q)
	a.mu.Unlock()
	q.close()
}

// settle returns once no post is under way on the QP's rings.
func (q *attachedQP) settle() {
	q.sqMu.Lock()
	q.rqMu.Lock()
	q.rqMu.Unlock()
	q.sqMu.Unlock()
}

func (q *attachedQP) close() {
	q.sqMu.Lock()
	q.rqMu.Lock()
	defer q.sqMu.Unlock()
	defer q.rqMu.Unlock()
	if q.closed.Swap(true) {
		return
	}
	q.sqMap.Close()
	if q.rqMap != nil {
		q.rqMap.Close()
	}
	q.infoMu.Lock()
	q.info.Store(&attachproto.QueryQPResult{})
	q.infoMu.Unlock()
}
