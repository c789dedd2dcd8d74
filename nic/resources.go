package nic

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// PD is a protection domain (ibv_pd): regions and QPs of one PD may be used
// together, and only together.
type PD struct {
	dev  *Device
	prov provider.PD
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	pd := &PD{dev: d}
	p, err := d.prov.AllocPD(pd)
	if err != nil {
		return nil, err
	}
	pd.prov = p
	return pd, nil
}

// Handle returns the PD's number in the device's region table.
func (pd *PD) Handle() mr.PDHandle { return pd.prov.Handle() }

// Dealloc frees the PD (ibv_dealloc_pd); ErrBusy while regions remain.
func (pd *PD) Dealloc() error { return pd.prov.Dealloc() }

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd   atomic.Pointer[PD] // Rereg changes it
	buf  []byte
	key  uint32 // lkey == rkey
	addr uint64
	prov provider.MR
}

// newMR wraps the region p registered in pd, or returns err.
func newMR(pd *PD, p provider.MR, err error) (*MR, error) {
	if err != nil {
		return nil, err
	}
	m := &MR{buf: p.Bytes(), key: p.Key(), addr: p.Addr(), prov: p}
	m.pd.Store(pd)
	return m, nil
}

// RegMR registers buf for the device (ibv_reg_mr): its address is buf's,
// unless access has mr.ZeroBased. buf stays pinned until Dereg. An
// attached device registers only memory of its regions from AllocMR, and
// refuses other memory with ErrFault; its regions' addresses are the
// daemon's (use MR.SGE and MR.Addr, not buf's address).
func (pd *PD) RegMR(buf []byte, access mr.Access) (*MR, error) {
	p, err := pd.prov.RegMR(buf, access)
	return newMR(pd, p, err)
}

// AllocMR registers size bytes of device-owned memory, mapped outside the
// Go heap (the memory a daemon hosts for remote peers). An attached
// device's is memory the process shares with the daemon.
func (pd *PD) AllocMR(size int, access mr.Access) (*MR, error) {
	if size <= 0 {
		return nil, fmt.Errorf("memory region of %d bytes: %w", size, ErrInvalid)
	}
	p, err := pd.prov.AllocMR(size, access)
	return newMR(pd, p, err)
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
	dup, err := shm.DupFD(fd)
	if err != nil {
		return nil, fmt.Errorf("shared region: dup: %v: %w", err, ErrInvalid)
	}
	m, skip, err := hooks.MapShared(dup, off, n)
	if err != nil {
		return nil, err
	}
	p, err := pd.prov.RegShared(m, skip, fd, off, n, iova, access)
	return newMR(pd, p, err)
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
func (m *MR) Region() *mr.Region {
	if h, ok := m.prov.(provider.RegionHolder); ok {
		return h.Region()
	}
	return nil
}

// Word returns the 32-bit word at offset off of the region, for a program
// that watches for what a peer writes there by loading it atomically in a
// loop, as RDMA programs poll their buffers (perftest's ib_write_lat polls
// its last byte). An attached device's daemon writes the region's memory
// from its own process, so such a load sees the peer's WRITE once it has
// landed. Word returns nil where a loop of loads is not how a WRITE
// becomes visible, an embedded device's region, whose device goroutines
// copy into it without atomics (a program learns there that a WRITE has
// landed from the QP, Status's MSN, or from a completion, which order the
// placement before what the program reads next), and for a word that is
// not aligned on 4 bytes or not wholly in the region.
func (m *MR) Word(off int) *atomic.Uint32 {
	if _, ok := m.prov.(provider.Shared); !ok || off < 0 || off > len(m.buf)-4 || (addrOf(m.buf)+uint64(off))%4 != 0 {
		return nil
	}
	return (*atomic.Uint32)(unsafe.Pointer(&m.buf[off]))
}

// SGE returns the scatter/gather element for n bytes at offset off.
func (m *MR) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.key}
}

// Dereg deregisters the region (ibv_dereg_mr); ErrBusy while a memory
// window is bound to it.
func (m *MR) Dereg() error { return m.prov.Dereg() }

// Rereg re-registers the region in place (ibv_rereg_mr): flags says what
// changes, mr.ReregPD to move it into pd (a PD of the same device) and
// mr.ReregAccess to give it access instead of its access flags; the
// argument a flag does not name is ignored. As in Linux rxe, the region
// keeps its memory, address and keys, so peers go on using its rkey, and
// every check made after Rereg returns (a peer's READ, WRITE or ATOMIC, a
// local SGE) sees the new PD and access together: from then on only QPs
// of the new PD may use it, and with the new rights. A transfer already
// under way finishes with the rights it started with. Memory windows bound
// to the region stay bound, and an access through one is checked against
// the window's PD and rights, as in rxe.
//
// Errors are those of ibv_rereg_mr on rxe: ErrInvalid for flags 0, a nil
// or another device's pd, a PD deallocated, or access breaking RegMR's
// rules (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE);
// ErrNotSupported for mr.ReregTranslation (new memory: deregister and
// register instead), unknown flags, and an access change that turns
// mr.ZeroBased or mr.OnDemand on or off, which changes the translation.
// On error nothing changes. An attached device's daemon makes the same checks, and moves
// a region only into a PD of the same process.
func (m *MR) Rereg(flags mr.ReregFlags, pd *PD, access mr.Access) error {
	var to provider.PD
	if flags&mr.ReregPD != 0 {
		if pd == nil {
			return fmt.Errorf("rereg into a nil PD: %w", ErrInvalid)
		}
		to = pd.prov
	}
	if err := m.prov.Rereg(flags, to, access); err != nil {
		return err
	}
	if flags&mr.ReregPD != 0 {
		m.pd.Store(pd)
	}
	return nil
}

// Prefetch makes the pages behind [addr, addr+n) of an on-demand paging
// region (mr.OnDemand) resident ahead of use, as ibv_advise_mr's
// prefetch advice does: the first access to each page then takes no page
// fault (softnic's memory is always there; what it models, and counts in
// mr.RegionInfo.ODP, is what an ODP NIC does). addr is in the region's
// address space, as an SGE's. ErrInvalid for a region without ON_DEMAND or
// without LOCAL_WRITE (rxe's rule), or a range outside it; an attached
// device's daemon makes the same checks.
func (m *MR) Prefetch(addr uint64, n int) error {
	if n < 0 {
		return fmt.Errorf("prefetch of %d bytes: %w", n, ErrInvalid)
	}
	return m.prov.Prefetch(addr, uint64(n))
}

// CQ is a completion queue.
type CQ struct {
	dev     *Device
	waiters atomic.Int32 // goroutines in wait
	st      *provider.CQState
	prov    provider.CQ
	// held is what Wait and WaitReady wait for (provider.CQ.Park's
	// ready), bound once: a completion.
	held func() bool
}

// CreateCQ creates a completion queue of depth entries (ibv_create_cq).
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	st := provider.NewCQState()
	p, err := d.prov.CreateCQ(depth, st)
	if err != nil {
		return nil, err
	}
	c := &CQ{dev: d, st: st, prov: p}
	c.held = func() bool { return p.Len() > 0 }
	return c, nil
}

// Poll moves up to len(wcs) completions into wcs (ibv_poll_cq) without
// blocking. When an embedded device's CQ holds none, Poll first processes
// the packets the device has received, on the calling goroutine (see
// progress.go in package nic/internal/embedded): an application that
// polls in a loop drives the device itself, instead of waiting for the
// device's goroutine to be scheduled.
func (c *CQ) Poll(wcs []verbs.WC) (int, error) { return c.poll(wcs, true) }

// poll is Poll; drive says whether it may process packets when it finds no
// completion, as a poll in a loop does (CQ.Wait's do not: the reader
// stays on the socket for them).
func (c *CQ) poll(wcs []verbs.WC, drive bool) (int, error) { return c.prov.Poll(wcs, drive) }

// Destroy destroys the CQ (ibv_destroy_cq): completions not yet polled are
// discarded, and Poll and Wait return ErrClosed from then on. It fails
// with ErrBusy while a QP completes to the CQ.
func (c *CQ) Destroy() error { return c.prov.Destroy() }

// Wait blocks until at least one completion is available, then polls up to
// len(wcs) of them. It returns early with ctx's error, or ErrClosed when
// the device closes.
func (c *CQ) Wait(ctx context.Context, wcs []verbs.WC) (int, error) {
	return c.wait(ctx, func() (int, error) { return c.poll(wcs, false) }, c.held)
}

// WaitReady blocks until the CQ holds a completion, which it leaves for
// Poll to take, or until ctx ends or the device closes. A completion
// already in the CQ ends it at once; Notify waits for the next one, as
// ibv_req_notify_cq does.
func (c *CQ) WaitReady(ctx context.Context) error { return c.waitUntil(ctx, c.held) }

// Notification is a CQ armed for its next completion (CQ.Notify).
type Notification struct {
	cq        *CQ
	solicited bool
	// all and solicited counts of the completions written when the CQ was
	// armed (provider.CQ.Written)
	all, sols uint32
}

// Notify arms the CQ for the next completion written to it, or with
// solicitedOnly for the next solicited one (the receive completion of a
// message sent with verbs.Solicited) or one in error, as
// ibv_req_notify_cq does: the Notification's Wait returns once such a
// completion was written after Notify, whether it was polled since or
// not. The completions in the CQ when it is armed do not count, so a
// program that arms before it polls what woke it is not woken again by
// those.
func (c *CQ) Notify(solicitedOnly bool) Notification {
	all, sols := c.prov.Written()
	return Notification{cq: c, solicited: solicitedOnly, all: all, sols: sols}
}

// SolicitedOnly reports whether the arming waits for a solicited
// completion (or one in error) rather than any: Notify's solicitedOnly.
func (n Notification) SolicitedOnly() bool { return n.solicited }

// Wait blocks until a completion the arming waits for was written to the
// CQ (see CQ.Notify), or until ctx ends or the device closes. It takes no
// completion: they wait in the CQ for Poll.
func (n Notification) Wait(ctx context.Context) error {
	return n.cq.waitUntil(ctx, n.Written)
}

// Written reports whether a completion the arming waits for was written:
// whether Wait would return at once.
func (n Notification) Written() bool {
	all, sols := n.cq.prov.Written()
	if n.solicited {
		return sols != n.sols
	}
	return all != n.all
}

// Wakeup is a CQ's wakeup descriptor (CQ.Wakeup).
type Wakeup struct{ p provider.Wakeup }

// Wakeup returns the CQ's wakeup descriptor, for a program that waits for
// the CQ's completions in poll or epoll beside other descriptors, as
// libibverbs's completion channels are waited on. An attached device's
// daemon signals it itself: a thread asleep on it is woken by the daemon,
// with no thread of this process in between. ok is false for an embedded
// device, whose CQs wake their waiters within the process.
//
// The descriptor is the one Wait, WaitReady and Notification.Wait sleep
// on: a CQ whose Wakeup is used must not be waited on so, or each would
// take the other's wakeups.
func (c *CQ) Wakeup() (w Wakeup, ok bool) {
	p, ok := c.prov.(provider.Wakeup)
	return Wakeup{p}, ok
}

// FD is the descriptor: readable once a completion the CQ was armed for
// (Arm) was written, until Take takes the wakeup. It stays the CQ's: the
// caller does not close it, and stops using it before Destroy.
func (w Wakeup) FD() int { return w.p.WakeupFD() }

// Arm asks for a wakeup at the next completion written to the CQ, or with
// solicitedOnly at the next solicited one or one in error, as
// ibv_req_notify_cq does; one wakeup, after which the CQ is to be armed
// again. Arming for solicited completions only narrows an arming for any.
// A completion written while Arm arms the CQ may come too early to be
// signalled: a caller that must not miss it takes a Notification (Notify)
// before Arm and looks at its Written after.
func (w Wakeup) Arm(solicitedOnly bool) { w.p.ArmWakeup(solicitedOnly) }

// Disarm withdraws the arming, unless it was signalled already: signalled
// says a wakeup was signalled, or is on its way, for Take.
func (w Wakeup) Disarm() (signalled bool) { return w.p.DisarmWakeup() }

// Take takes the wakeups signalled, waiting up to wait for one when there
// is none, and returns how many it took: the descriptor is not readable
// after, until the next.
func (w Wakeup) Take(wait time.Duration) int { return w.p.TakeWakeups(wait) }

// waitUntil is wait for the CQ to be ready, taking no completion.
func (c *CQ) waitUntil(ctx context.Context, ready func() bool) error {
	_, err := c.wait(ctx, func() (int, error) {
		if ready() {
			return 1, nil
		}
		return 0, nil
	}, ready)
	return err
}

// wait calls poll until it finds completions (or fails), sleeping between
// calls until the CQ is ready (see provider.CQ.Park) or is written to, ctx
// ends or the device closes.
//
// A waiter sleeps in c.st.Sleep, which the CQ's writes signal, unless the
// provider's park put it to sleep already: an attached CQ's daemon
// signals an eventfd once per arming, so one waiter at a time arms the CQ
// and reads the eventfd, the others sleep in c.st.Sleep. One write wakes one
// waiter, so a woken waiter that leaves while others wait passes the
// wakeup on, and one of them takes its place.
func (c *CQ) wait(ctx context.Context, poll func() (int, error), ready func() bool) (int, error) {
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	woken := false
	passOn := func() {
		if woken && c.waiters.Load() > 1 {
			c.st.Signal()
		}
	}
	done := c.dev.Done()
	for {
		if n, err := poll(); n > 0 || err != nil {
			passOn()
			return n, err
		}
		slept, err := c.prov.Park(ctx, done, ready)
		if !slept {
			err = c.st.Sleep(ctx, done)
		}
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
}

// Discard removes the completions of the QP numbered qpn that wait to be
// polled, keeping the others in order, and returns how many it removed.
// A provider such as mlx5's does so when a program destroys a QP, which
// may free the contexts of the QP's work requests with it: libsoftnic's
// ibv_destroy_qp calls it on the QP's CQs. Destroy itself leaves them,
// the work requests it flushed included, for Poll.
func (c *CQ) Discard(qpn uint32) int { return c.prov.Discard(qpn) }

// Len returns how many completions wait to be polled.
func (c *CQ) Len() int { return c.prov.Len() }

// Resize makes the CQ hold depth completions (ibv_resize_cq), keeping
// those it holds, in order. As rxe, it fails with ErrInvalid, changing
// nothing, for a depth of 0 or past the device's MaxCQE, or below the
// completions waiting to be polled. An attached device's daemon charges
// the new depth to the process's quota first, as it does CreateCQ's, and
// refuses it as CreateCQ's when it does not fit.
func (c *CQ) Resize(depth int) error { return c.prov.Resize(depth) }

// SRQ is a shared receive queue.
type SRQ struct {
	pd   *PD
	prov provider.SRQ
}

// CreateSRQ creates a shared receive queue (ibv_create_srq), its limit
// not armed.
func (pd *PD) CreateSRQ(depth, maxSGE int) (*SRQ, error) {
	s := &SRQ{pd: pd}
	p, err := pd.prov.CreateSRQ(s, depth, maxSGE)
	if err != nil {
		return nil, err
	}
	s.prov = p
	return s, nil
}

// PostRecv adds a receive WR (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error { return s.prov.PostRecv(wr) }

// Attr returns the SRQ's attributes (ibv_query_srq): its size, its SGEs
// per work request, and its limit, 0 when not armed (never armed, armed
// with 0, or reached).
func (s *SRQ) Attr() verbs.SRQAttr { return s.prov.Attr() }

// Modify changes the SRQ's attributes that mask selects (ibv_modify_srq):
// verbs.SRQMaxWR resizes it, keeping the work requests it holds in order
// (the device has CapSRQResize); verbs.SRQLimit arms its limit, or
// disarms it with 0. Armed, the limit raises one event, Config.OnSRQLimit
// (IBV_EVENT_SRQ_LIMIT_REACHED), the first time a message takes the SRQ's
// work requests below it, and is disarmed by it. As rxe, Modify fails with
// ErrInvalid, changing nothing, for a size of 0 or past the device's
// MaxSRQWR, a size below the work requests the SRQ holds, or a limit past
// the size (the new one, when both change). An attached device's daemon
// charges a new size as CQ.Resize's.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	return s.prov.Modify(attr, mask)
}

// Destroy destroys the SRQ (ibv_destroy_srq): its receive WRs are
// discarded, and posting to it fails. It fails with ErrBusy while a QP
// receives from it.
func (s *SRQ) Destroy() error { return s.prov.Destroy() }

// QPConfig creates a QP (ibv_qp_init_attr).
type QPConfig struct {
	Type           verbs.Type // qp.RC (the default), qp.UC or qp.UD
	SendCQ, RecvCQ *CQ        // RecvCQ defaults to SendCQ
	SRQ            *SRQ
	// Queue sizes; zero picks qp's defaults.
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	// SignalAll makes every send WR complete with a work completion.
	SignalAll bool

	queues hooks.Queues // of an attached process's QP, whose rings a daemon serves (hooks.SetQueues)
}

// QP is a queue pair of a device. Its methods are safe for concurrent use.
type QP struct {
	dev  *Device
	pd   *PD
	num  uint32
	prov provider.QP
}

// CreateQP creates a QP in the RESET state (ibv_create_qp).
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	p, err := pd.prov.CreateQP(cfg.provider())
	if err != nil {
		return nil, err
	}
	return p.Owner().(*QP), nil
}

// provider is cfg with its queues' providers.
func (cfg *QPConfig) provider() provider.QPConfig {
	c := provider.QPConfig{
		Type: cfg.Type, MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll, Queues: cfg.queues,
	}
	if cfg.SendCQ != nil {
		c.SendCQ = cfg.SendCQ.prov
	}
	if cfg.RecvCQ != nil {
		c.RecvCQ = cfg.RecvCQ.prov
	}
	if cfg.SRQ != nil {
		c.SRQ = cfg.SRQ.prov
	}
	return c
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// PD returns the QP's protection domain; nil for QP1, the connection
// manager's (Device.QPs).
func (q *QP) PD() *PD { return q.pd }

// Type returns the QP's transport service.
func (q *QP) Type() verbs.Type { return q.prov.Type() }

// Attr returns the QP's attributes (ibv_query_qp).
func (q *QP) Attr() verbs.Attr { return q.prov.Attr() }

// Status returns a snapshot of the QP's sequence state.
func (q *QP) Status() qp.Status { return q.prov.Status() }

// Traffic returns the packets, bytes and messages the QP has sent and
// received. An attached device's QPs are counted in the daemon, which
// shows them (softnic serve --metrics): here they are ErrNotSupported.
func (q *QP) Traffic() (verbs.Traffic, error) {
	if t, ok := q.prov.(provider.TrafficCounter); ok {
		return t.Traffic(), nil
	}
	return verbs.Traffic{}, fmt.Errorf("QP %#x: %w", q.num, unsupported("traffic"))
}

// Modify changes the QP's attributes and state (ibv_modify_qp).
func (q *QP) Modify(attr *verbs.Attr, mask verbs.AttrMask) error { return q.prov.Modify(attr, mask) }

// PostSend posts one send work request (ibv_post_send) and sends what it
// can at once; while an application polls the device's CQs (see CQ.Poll),
// what it posts leaves with that application's next poll instead, with
// everything posted to the device's QPs since, in as few system calls as
// it takes.
func (q *QP) PostSend(wr *verbs.SendWR) error { return q.prov.PostSend(wr, true) }

// PostSendDeferred posts a send work request without ringing the doorbell:
// this call sends nothing, so that several posts can leave in one batch
// (what FI_MORE asks for). The queued packets go out with the next
// PostSend, PostSends or RingDoorbell on the QP, or sooner if the device
// drains the QP for its own reasons (a response arrives, a timer fires):
// the deferral is a batching hint, never a promise to hold packets back.
func (q *QP) PostSendDeferred(wr *verbs.SendWR) error { return q.prov.PostSend(wr, false) }

// RingDoorbell sends what the QP has queued, such as the work requests of
// PostSendDeferred.
func (q *QP) RingDoorbell() error { return q.prov.RingDoorbell() }

// PostSends posts a list of send work requests, then sends; it returns how
// many were posted before an error (like ibv_post_send's bad_wr).
func (q *QP) PostSends(wrs []verbs.SendWR) (int, error) { return q.prov.PostSends(wrs) }

// PostSendBatch posts a list of send work requests as one batch, then
// sends: all of them, or none if one is refused or the send queue lacks
// room for them all (ErrNoMem), as ibv_wr_complete posts the work requests
// built since ibv_wr_start.
func (q *QP) PostSendBatch(wrs []verbs.SendWR) error { return q.prov.PostSendBatch(wrs) }

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *verbs.RecvWR) error { return q.prov.PostRecv(wr) }

// Destroy moves the QP to the error state, so that its outstanding WRs
// complete with WR_FLUSH_ERR, and removes it from the device
// (ibv_destroy_qp). Packets for it are dropped from then on.
func (q *QP) Destroy() error { return q.prov.Destroy() }
