package shm

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// A wakeup between the daemon and an attached process is an eventfd one
// side signals (Signal) and an epoll fd, the waiting end, in which the
// eventfd is registered edge-triggered (NewEpoll): each signal queues one
// event in the epoll fd, which makes it readable; the waiter waits for
// that readiness and takes the event (Waiter), and nobody reads the
// eventfd. The point is that the daemon never reads, writes or waits on a
// descriptor whose open file description a process holds: a process can
// clear O_NONBLOCK on what it holds (it lives in the description, shared
// with whoever else holds it) and then fill an eventfd's counter or empty
// it, so that the daemon's next write, or its read after it saw the
// eventfd readable, would block for ever. So for the daemon's wakeups of
// a process (a CQ's), the daemon keeps the eventfd and hands the process
// the epoll fd, through which nothing can be done to the eventfd
// (epoll_ctl names a descriptor of the caller's own); for a process's
// doorbell, the process holds the eventfd it signals and the daemon waits
// on an epoll fd of its own. The counter is never read: it would take
// 2^64-2 signals to fill it, and a signal that found it full would fail
// with EAGAIN on the signaller's non-blocking description, which Signal
// ignores.

// Waiter waits for the wakeups of an epoll fd of NewEpoll's in the
// runtime's poller. One goroutine at a time calls Wait; SetDeadline and
// Close may come from any.
type Waiter struct {
	f   *os.File
	raw syscall.RawConn
	fn  func(uintptr) bool // w.take, bound once

	// Wait's state, for fn.
	ready  func() bool
	taken  *atomic.Uint64
	looked bool
	woke   bool
}

// NewWaiter returns a Waiter of epfd, an epoll fd of wakeups, which it
// owns from then on (closed on error too). epfd is made non-blocking, as
// the runtime's poller needs.
func NewWaiter(epfd int, name string) (*Waiter, error) {
	if err := setNonblock(epfd); err != nil {
		CloseFD(epfd)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f := os.NewFile(uintptr(epfd), name)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	w := &Waiter{f: f, raw: raw}
	w.fn = w.take
	return w, nil
}

// Wait takes the wakeups that came before it, then calls ready and, unless
// it reports true, waits until a wakeup comes and takes it. It adds the
// wakeups it takes to taken (unless nil) as it takes them, and returns
// whether one that came after ready's look ended it (woke), or an error
// once the deadline passed or the Waiter is closed. Taking what came
// before the look is what keeps a wakeup from being lost or ending the
// wait for nothing: a signal after the look ends the wait, and one before
// it is for something the look saw, as the signaller signals after it
// publishes (or, for a waiter that arms the signaller in ready, for an
// earlier arming), or for something the waiter took before it waited.
// Such a wait goes on, for as long as no wakeup comes, with the earlier
// ones counted already.
func (w *Waiter) Wait(ready func() bool, taken *atomic.Uint64) (woke bool, err error) {
	w.ready, w.taken, w.looked, w.woke = ready, taken, false, false
	err = w.raw.Read(w.fn)
	w.ready, w.taken = nil, nil
	return w.woke, err
}

// take is Wait's callback: the first call takes the wakeups there are and
// looks (ready), the next ones, once the poller saw the epoll fd readable,
// take the wakeups and end the wait if there were any.
func (w *Waiter) take(fd uintptr) bool {
	n := takeWakeups(int(fd))
	if w.taken != nil && n > 0 {
		w.taken.Add(uint64(n))
	}
	if !w.looked {
		w.looked = true
		return w.ready()
	}
	w.woke = n > 0
	return w.woke
}

// FD returns the epoll fd, for a caller that waits on it beside other
// descriptors (in an epoll set of its own) instead of in Wait; it takes
// what made it readable with Take.
func (w *Waiter) FD() int {
	fd := -1
	w.raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// Take takes the wakeups signalled, waiting up to wait for one when none
// was, and returns how many it took. It is for a caller that waits on FD,
// not in Wait.
func (w *Waiter) Take(wait time.Duration) int {
	n := 0
	w.raw.Control(func(fd uintptr) { n = takeWakeupsWaiting(int(fd), wait) })
	return n
}

// SetDeadline ends a Wait under way, and those to come, at t (the zero
// time: never).
func (w *Waiter) SetDeadline(t time.Time) error { return w.f.SetReadDeadline(t) }

// Close closes the epoll fd; a Wait under way returns an error.
func (w *Waiter) Close() error { return w.f.Close() }
