// Package spin decides how long a CQ waiter busy-polls before it sleeps,
// as Linux's busy_poll does for a socket and KVM's halt polling for an
// idle vCPU: a waiter woken through the runtime's netpoller costs two or
// more thread wakeups per completion, where one that polls (driving the
// embedded device itself, or watching an attached CQ's ring while the
// daemon writes it) finds its completion a round trip after it posted.
//
// Spinning pays only when the completion comes within the budget. When it
// does not (the peer is far, or the machine so loaded that the spinner and
// the peer share a CPU and the spin only delays the peer), each spin is a
// budget of CPU and of latency thrown away: after two spins in a row found
// nothing, waits sleep at once, and spin again only after 1, 2, 4 … up to
// MaxSkip waits that slept, until a spin finds its completion.
//
// Which of the two made the spins fail shows in the sleep that followed.
// A peer that was slow (descheduled) answered long after the spin: once it
// is back, a wait that slept at once and got its completion within the
// budget has the next wait spin again, without waiting out the skip. A
// spinner that kept the peer from running (the two on one CPU) got its
// completion soon after it stopped spinning: then short sleeps prove
// nothing, and only the skip brings the next spin.
package spin

import (
	"sync/atomic"
	"time"
)

// MaxSkip is the most waits that sleep at once between two spins once
// spinning keeps failing: the CPU a waiter spends for nothing is then a
// budget per MaxSkip waits.
const MaxSkip = 256

// Policy is the spinning of the waiters of one queue. Its zero value never
// spins; its methods are safe for concurrent use (waiters of one queue
// share it, and a race between them only shifts when spinning resumes).
type Policy struct {
	budget time.Duration
	fails  atomic.Int32 // spins in a row that found nothing
	skip   atomic.Int32 // waits left that sleep without spinning
	next   atomic.Int32 // the skip after the next failed spin
	slow   atomic.Bool  // the last failed spin's completion came past the budget
}

// NewPolicy returns a policy that spins for budget at most; budget ≤ 0
// never spins.
func NewPolicy(budget time.Duration) *Policy {
	p := &Policy{budget: max(budget, 0)}
	p.next.Store(1)
	return p
}

// Budget returns how long the waiter about to sleep spins first: 0 means
// it sleeps at once. A waiter given a budget reports its spin's outcome
// to Spun.
func (p *Policy) Budget() time.Duration {
	if p.budget == 0 {
		return 0
	}
	if s := p.skip.Load(); s > 0 {
		p.skip.CompareAndSwap(s, s-1)
		return 0
	}
	return p.budget
}

// Spun records whether a spin found what its waiter waited for.
func (p *Policy) Spun(found bool) {
	if found {
		p.fails.Store(0)
		p.next.Store(1)
		return
	}
	if p.fails.Add(1) < 2 {
		return
	}
	n := p.next.Load()
	p.skip.Store(n)
	p.next.Store(min(2*n, MaxSkip))
}

// Slept records the sleep of a waiter that found its completion after it:
// d is how long it slept, spun whether it spun (and failed) first.
func (p *Policy) Slept(d time.Duration, spun bool) {
	switch {
	case spun:
		p.slow.Store(d > p.budget)
	case d <= p.budget && p.slow.Load():
		p.skip.Store(0)
	}
}
