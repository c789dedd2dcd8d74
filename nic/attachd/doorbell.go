package attachd

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/spin"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// This file is the daemon's side of an attached process's doorbell. A
// process that posts to a ring whose Doorbell flag is set marks the QP in
// its doorbell page and, if the daemon sleeps, signals its doorbell
// eventfd (shm.Doorbell). The daemon then looks at the QPs marked, not at
// every QP of the process.
//
// A process can signal the eventfd and mark QPs without posting anything.
// Each look that finds nothing (a wakeup with no new work request, a mark
// of a QP with none) spends a token of the process's doorbell budget,
// which refills at DoorbellLimits.Rate tokens a second, plus one for each
// work request taken from its rings, up to DoorbellLimits.Burst. With the
// budget spent, the daemon stops listening to the process's eventfd (it
// leaves the runtime's poller, so that signals wake nothing) and ignores
// its marks until the budget is back at a quarter of the burst (or half
// the rate, if less), a second at most; the process's busy QPs still take new work requests as the device
// runs them. Waiting for a quarter of the burst rather than one token
// lets the daemon spend its wakeups for such a process in runs, a pause
// between runs, rather than a pause between each two: the pauses (timers,
// leaving and joining the poller) cost more than the wakeups.
//
// The bound: a process that rings for nothing costs the daemon at most
// the burst, then the rate, of wakeups or looks a second, whatever it
// does with its eventfd and its page (on a 2-core VM, a process flooding
// its doorbell from a tight loop cost the daemon 1.6% of a CPU, against
// 35 to 40% without the budget on the same busy machine, and a whole CPU
// on an idle one); and the time a look at one of its QPs holds that
// QP's lock, which no other process's traffic needs. Its own CPU is the
// kernel's to share out. softnic stat counts, per process, the doorbell's
// wakeups (doorbells), the signals they took (doorbell_signals: those that
// came together, before the daemon took them, count once), the
// wakeups that found nothing (doorbells_empty) and the times the doorbell
// went unheard (doorbells_throttled).

// DoorbellLimits bound what a process that rings its doorbell for nothing
// costs the daemon, and how long the daemon stays awake for a process
// that posts; see Config.Doorbell. Zero fields take the defaults.
type DoorbellLimits struct {
	// Burst is how many looks that find nothing a process may cause
	// before it is throttled (default 256).
	Burst int
	// Rate is how many such looks a second it may cause once throttled
	// (default 1000), besides one for each work request it posts.
	Rate int
	// Spin is how long the doorbell goroutine stays awake after it took
	// work requests from the process's rings: it drives the device and
	// looks for the process's next post, giving up the CPU between looks,
	// before it asks for a doorbell again and sleeps (see
	// session.spin). Default DefaultDoorbellSpin; negative never spins.
	Spin time.Duration
}

// Defaults of DoorbellLimits.
const (
	DefaultDoorbellBurst = 256
	DefaultDoorbellRate  = 1000
	DefaultDoorbellSpin  = nic.DefaultWaitSpin
)

// WithDefaults returns l with its counts that are not positive, and a
// zero Spin, set to their defaults.
func (l DoorbellLimits) WithDefaults() DoorbellLimits {
	if l.Burst <= 0 {
		l.Burst = DefaultDoorbellBurst
	}
	if l.Rate <= 0 {
		l.Rate = DefaultDoorbellRate
	}
	if l.Spin == 0 {
		l.Spin = DefaultDoorbellSpin
	}
	return l
}

// doorbell is the daemon's side of a process's doorbell: its eventfd, its
// page, and the budget of the process's looks that found nothing.
//
// The daemon never reads or writes the process's eventfd, whose open file
// description the process holds (and can make blocking): it waits on an
// epoll fd of its own in which the eventfd is registered edge-triggered
// (shm.NewEpoll, shm.Waiter), and wakes its own doorbell goroutine with a
// second eventfd, its own, registered there too.
type doorbell struct {
	page     *shm.Mapping
	db       shm.Doorbell   // in page
	needWake *atomic.Uint32 // in page

	// fd is the process's eventfd, own the daemon's, and epfd the epoll fd
	// that waits for both; -1 once closed. The daemon signals own under
	// fdMu's read lock (signal), and closes them under the write lock.
	fdMu sync.RWMutex
	fd   int
	own  int
	epfd int

	// listening is a copy of epfd as the runtime's poller watches it, nil
	// while the doorbell goroutine does not listen; stopped once the
	// process detached.
	mu        sync.Mutex
	listening *shm.Waiter
	stopped   bool

	// poked tells the doorbell goroutine that the daemon has work for it
	// (session.fail), which a look at the marks would not see.
	poked atomic.Bool

	lookFn func() bool // b.look, bound once for await

	pollingSaid bool // the doorbell goroutine logged that it cannot listen

	budgetMu sync.Mutex
	budget   quota.IdleBudget
	// spinning is how long the doorbell goroutine stays awake after it
	// took work requests (DoorbellLimits.Spin).
	spinning *spin.Policy
	// quietUntil is when the process's marks are looked at again (Unix
	// nanoseconds), 0 when they are: a busy-polling reader skips them
	// until then.
	quietUntil atomic.Int64
}

// open makes the eventfds, the epoll fd and the page.
func (b *doorbell) open() (err error) {
	b.fd, b.own, b.epfd = -1, -1, -1
	defer func() {
		if err != nil {
			b.closeFDs()
		}
	}()
	if b.fd, err = shm.NewEventFD(); err != nil {
		return err
	}
	if b.own, err = shm.NewEventFD(); err != nil {
		return err
	}
	if b.epfd, err = shm.NewEpoll(b.fd, b.own); err != nil {
		return err
	}
	if b.page, err = shm.Create("softnic-doorbell", shm.DoorbellSize); err != nil {
		return err
	}
	b.db, _ = shm.NewDoorbell(b.page.Bytes())
	b.needWake = b.db.NeedWake()
	b.lookFn = b.look
	return nil
}

// fds returns the descriptors the process maps its doorbell with: the
// eventfd, then the page.
func (b *doorbell) fds() []int { return []int{b.fd, b.page.FD()} }

// listen returns the doorbell's wait for the doorbell goroutine (await),
// in the runtime's poller: a copy of the epoll fd, which leaves the poller
// when deafen closes it. It returns nil once the process detached.
func (b *doorbell) listen() (*shm.Waiter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return nil, nil
	}
	if b.listening == nil {
		fd, err := shm.DupFD(b.epfd)
		if err != nil {
			return nil, fmt.Errorf("doorbell epoll fd: dup: %w", err)
		}
		if b.listening, err = shm.NewWaiter(fd, "softnic-doorbell"); err != nil {
			return nil, fmt.Errorf("doorbell: %w", err)
		}
	}
	return b.listening, nil
}

// await waits, with w from listen, for the process to signal its eventfd
// (or the daemon its own), adds the signals it takes to signals as it
// takes them (each a wakeup of the epoll fd, which folds the signals that
// came together), and reports whether one ended the wait, as opposed to a
// QP marked before it waited. It takes the signals that came before it
// and then looks at the marks (look): a post marks its QP before it
// signals, so a signal before the look is for a mark the look sees, or
// for a post the goroutine took before it waited, whose signal is then
// counted at once although the wait goes on.
func (b *doorbell) await(w *shm.Waiter, signals *atomic.Uint64) (woke bool, err error) {
	return w.Wait(b.lookFn, signals)
}

// look is await's look: whether a QP is marked or the daemon poked.
func (b *doorbell) look() bool { return b.db.Pending() || b.poked.Swap(false) }

// deafen stops listening: signals of the eventfd wake nothing until listen.
func (b *doorbell) deafen() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.listening != nil {
		b.listening.Close()
		b.listening = nil
	}
}

// stop ends the doorbell goroutine's listening for good: a read under way
// returns.
func (b *doorbell) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.deafen()
}

// poke wakes the doorbell goroutine for work of the daemon's.
func (b *doorbell) poke() {
	b.poked.Store(true)
	b.signal()
}

// signal wakes the doorbell goroutine with the daemon's own eventfd,
// unless it is closed.
func (b *doorbell) signal() {
	b.fdMu.RLock()
	defer b.fdMu.RUnlock()
	if b.own >= 0 {
		shm.Signal(b.own)
	}
}

// close closes the descriptors and unmaps the page, once the doorbell
// goroutine and the busy-polling readers are done with them.
func (b *doorbell) close() {
	b.fdMu.Lock()
	b.closeFDs()
	b.fdMu.Unlock()
	b.page.Close()
}

// closeFDs closes the eventfds and the epoll fd that are open.
func (b *doorbell) closeFDs() {
	for _, fd := range []*int{&b.fd, &b.own, &b.epfd} {
		if *fd >= 0 {
			shm.CloseFD(*fd)
			*fd = -1
		}
	}
}

// spend takes n tokens from the budget for looks that found nothing, at
// now, with work the work requests taken from the process's rings so far.
// It returns how long to ignore the process's doorbell, 0 if the budget
// is not spent; then the doorbell is quiet until that time.
func (b *doorbell) spend(now time.Time, work uint64, n int) time.Duration {
	b.budgetMu.Lock()
	pause := b.budget.Spend(now, work, n)
	b.budgetMu.Unlock()
	if pause > 0 {
		b.quietUntil.Store(now.Add(pause).UnixNano())
	}
	return pause
}

// quiet reports whether the process's marks are to be ignored now.
func (b *doorbell) quiet() bool {
	u := b.quietUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// configure sets the doorbell's budget and spin to the limits l
// (WithDefaults applied).
func (b *doorbell) configure(l DoorbellLimits) {
	b.budget = quota.NewIdleBudget(l.Burst, l.Rate)
	b.spinning = spin.NewPolicy(l.Spin)
}

// doorbellLoop serves the process's doorbell: it takes the new work
// requests of the QPs marked in the doorbell page, spins for a while if
// it took any (spin), then sleeps on the doorbell eventfd. NeedWake tells
// posters whether it sleeps: set before the last look at the marks, so
// that a post either is seen by that look or finds NeedWake set and
// signals.
func (s *session) doorbellLoop() {
	defer close(s.bellDone)
	defer s.bell.deafen()
	defer s.unpoll()
	woke := false
	work := s.work()
	for {
		s.bell.needWake.Store(0)
		for {
			rang, ok := s.pass(woke)
			if !ok {
				return
			}
			woke = false
			if !rang {
				break
			}
		}
		if w := s.work(); w != work {
			work = w
			if s.spin() {
				continue
			}
		}
		if !s.srv.busy.Load() {
			// While the device busy-polls, its reader takes the posts, and
			// turns the doorbell on again when it stops.
			s.bell.needWake.Store(1)
			rang, ok := s.pass(false)
			if !ok {
				return
			}
			if rang {
				continue
			}
		}
		s.unpoll()
		w, err := s.bell.listen()
		if w == nil && err == nil {
			return
		}
		rang := false
		if err == nil {
			rang, err = s.bell.await(w, &s.cnt[cntDoorbellSignals])
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			// Out of descriptors, say: the process's marks are looked at
			// every millisecond until the doorbell can be heard again.
			if !s.bell.pollingSaid {
				s.bell.pollingSaid = true
				s.log.Warn("doorbell unheard: polling the process's queues instead", slog.Any("error", err))
			}
			s.bell.deafen()
			if !s.pause(time.Millisecond) {
				return
			}
			continue
		}
		if !rang {
			continue // a QP marked before the wait
		}
		woke = true
		s.cnt[cntDoorbells].Add(1)
	}
}

// spin keeps the doorbell goroutine awake after it took work requests
// from the process's rings, until the process posts again (a QP marked)
// or the daemon pokes, and reports whether one of them came; it gives up
// once the budget the doorbell's spinning policy gives
// (DoorbellLimits.Spin) has passed since the spin began or since the last
// completion written to the process, whichever came later: the budget is
// the time the process has to post again once it has its completion, a
// process asleep in CQ.Wait included (it wakes in tens of microseconds),
// not counting the time its request took. It spins twice the budget at
// most: a process streaming requests, whose posts need no doorbell while
// its QP has requests outstanding, gets completions all along, and would
// otherwise keep the goroutine spinning as long as the stream lasts.
// Meanwhile it drives the device, which processes on this goroutine the
// answers to what it sent, and writes the process's completions, and
// gives up the CPU between looks (shm.Yield) so that, on a host of few
// CPUs, the process and the peer run. A process that waits for its
// completion spinning (its CQ.Wait does for nic.Config.WaitSpin) or
// polling then posts its next request to a daemon that is awake: without
// the spin each of its operations costs the daemon two wakeups from
// sleep, one for the doorbell and one for the answer, which on a VM whose
// idle CPUs are slow to wake cost more than the operation. NeedWake stays
// clear, so the process's posts signal nothing. The spin only follows
// work: a process that posts nothing, or whose next post keeps coming
// after the budget, gets no spin, or one in MaxSkip doorbells (package
// nic/internal/spin), and a daemon whose device busy-polls, its reader
// polling the rings and the socket already, none.
func (s *session) spin() bool {
	if s.srv.busy.Load() {
		return false
	}
	budget := s.bell.spinning.Budget()
	if budget == 0 {
		return false
	}
	start := time.Now()
	end, limit := start.Add(budget), start.Add(2*budget)
	cqes := s.cnt[cntCQEs].Load()
	for {
		if s.bell.db.Pending() || s.bell.poked.Load() {
			s.bell.spinning.Spun(true)
			return true
		}
		now := time.Now()
		if n := s.cnt[cntCQEs].Load(); n != cqes {
			cqes, end = n, now.Add(budget)
			if end.After(limit) {
				end = limit
			}
		}
		if s.ctx.Err() != nil || now.After(end) {
			s.bell.spinning.Spun(false)
			s.unpoll()
			return false
		}
		if s.srv.edev != nil {
			s.srv.edev.Poll()
			s.polled = true
		}
		shm.Yield()
	}
}

// unpoll hands the device's socket back to its reader if the doorbell
// goroutine polled the device while it spun (hooks.Device.Poll): the
// goroutine is about to sleep, and what arrives next is the reader's to
// read.
func (s *session) unpoll() {
	if s.polled {
		s.polled = false
		s.srv.edev.StopPolling()
	}
}

// pass is one look of the doorbell goroutine: it fails the QPs to fail,
// and services the QPs marked. A look just after a wakeup that finds no
// work request counts as an empty wakeup. Looks that found nothing spend
// the doorbell's budget; when it is spent, pass waits until it is not.
// It reports whether any QP was marked, and false ok once the process
// detached.
func (s *session) pass(woke bool) (rang, ok bool) {
	s.mu.Lock()
	failing := s.failing
	s.failing = nil
	s.mu.Unlock()
	for _, h := range failing {
		h.pub.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
	worked, idle, self := s.scan(true)
	if self {
		// The packets went to the device's own socket: processed here,
		// they reach their QP without waking the device's reader.
		s.srv.edev.Drive()
	}
	worked += len(failing)
	if woke && worked == 0 {
		s.cnt[cntDoorbellsEmpty].Add(1)
		idle = max(idle, 1)
	}
	if idle > 0 {
		if d := s.bell.spend(time.Now(), s.work(), idle); d > 0 {
			s.cnt[cntDoorbellsThrottled].Add(1)
			s.bell.deafen()
			s.unpoll()
			if !s.pause(d) {
				return false, false
			}
		}
	}
	return worked+idle > 0, true
}

// pause waits for d, or until the process detaches (false).
func (s *session) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// work counts the work requests taken from the process's rings.
func (s *session) work() uint64 {
	return s.cnt[cntSendWQEs].Load() + s.cnt[cntRecvWQEs].Load()
}

// addQPLocked gives h a doorbell slot, the lowest free, and publishes it;
// s.mu is held.
func (s *session) addQPLocked(h *hostedQP) error {
	slot := slices.Index(s.slots, nil)
	if slot < 0 {
		if len(s.slots) >= shm.MaxSlots {
			return fmt.Errorf("%d QPs, as many as a process's doorbell tells apart: %w", len(s.slots), nic.ErrNoMem)
		}
		slot = len(s.slots)
		s.slots = append(s.slots, nil)
	}
	h.slot = uint32(slot)
	s.slots[slot] = h
	s.byQPN[h.q.Num()] = h
	s.snapQPs()
	return nil
}

// removeQPLocked frees h's slot; s.mu is held.
func (s *session) removeQPLocked(h *hostedQP) {
	if int(h.slot) < len(s.slots) && s.slots[h.slot] == h {
		s.slots[h.slot] = nil
	}
	delete(s.byQPN, h.q.Num())
	s.snapQPs()
}

// snapQPs publishes slots for the goroutines that service the QPs (the
// doorbell goroutine, a busy-polling reader); s.mu is held.
func (s *session) snapQPs() {
	qps := slices.Clone(s.slots)
	s.qpSnap.Store(&qps)
}

// pollQueues is a busy-polling reader's look at the process's queues; it
// reports whether there were new work requests. With doorbell set it
// turns the process's doorbell on first (the reader stops polling),
// otherwise off; while polling, a QP whose lock is taken is left marked
// for the next pass, and a process whose doorbell budget is spent is
// skipped until it is not.
func (s *session) pollQueues(doorbell bool) bool {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	if s.unpolled {
		return false
	}
	if doorbell {
		s.bell.needWake.Store(1)
	} else {
		if s.bell.needWake.Load() != 0 {
			s.bell.needWake.Store(0)
		}
		if s.bell.quiet() {
			return false
		}
	}
	// The last look before the doorbell takes over must not skip a QP: a
	// post that found the doorbell off is in its ring, and marked.
	worked, idle, _ := s.scan(doorbell)
	if idle > 0 && s.bell.spend(time.Now(), s.work(), idle) > 0 {
		s.cnt[cntDoorbellsThrottled].Add(1)
	}
	return worked > 0
}

// scan services each QP marked in the doorbell page once. It returns how
// many had new work requests, and how many had none (a mark of no QP
// counts too), and whether any sent to a QP of the daemon's own device.
// Unless wait is set, a QP whose lock is taken is marked again for the
// next scan, and counts as neither.
func (s *session) scan(wait bool) (worked, idle int, self bool) {
	qps := s.qpSnap.Load()
	for slot := range s.bell.db.Take {
		var h *hostedQP
		if qps != nil && int(slot) < len(*qps) {
			h = (*qps)[slot]
		}
		switch {
		case h == nil:
			idle++
			continue
		case wait:
			h.q.Lock()
		case !h.q.TryLock():
			s.bell.db.Mark(slot)
			continue
		}
		w, toSelf := h.serviceLocked()
		h.q.Unlock()
		if w {
			worked++
		} else {
			idle++
		}
		self = self || toSelf
	}
	return worked, idle, self
}

// fail has the doorbell goroutine move h's QP to the error state: the
// caller holds locks Modify takes.
func (s *session) fail(h *hostedQP) {
	s.mu.Lock()
	s.failing = append(s.failing, h)
	s.mu.Unlock()
	s.bell.poke()
}

// wake signals the process's doorbell from the daemon.
func (s *session) wake() { s.bell.signal() }
