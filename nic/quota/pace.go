package quota

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pacer is a token bucket of admissions (accepts, attaches): Rate a
// second, at most Burst at once, full when first used. A Take that finds
// no token waits until the bucket holds Batch of them (at least one, at
// most Burst), so that a flood wakes its waiter once per Batch, not once
// per admission; it counts each wait (Paced). It is safe for concurrent
// use: waiters sleep apart from each other and race for the tokens when
// they wake.
type Pacer struct {
	Rate, Burst, Batch float64

	mu     sync.Mutex
	tokens float64
	last   time.Time // when tokens was brought up to date; zero: never
	paced  atomic.Uint64
	// now and sleep are time.Now and sleepUnless but in tests.
	now   func() time.Time
	sleep func(d time.Duration, done <-chan struct{}) bool
}

// Take takes a token, waiting for one if there is none, and reports false
// if done is closed first.
func (p *Pacer) Take(done <-chan struct{}) bool {
	now, sleep := p.now, p.sleep
	if now == nil {
		now, sleep = time.Now, sleepUnless
	}
	for {
		wait := p.take(now)
		if wait == 0 {
			return true
		}
		p.paced.Add(1)
		if !sleep(wait, done) {
			return false
		}
	}
}

// take takes a token and returns 0, or, with none, how long until the
// bucket holds Batch. It reads the clock under the lock: a time read
// before another taker's would take tokens back.
func (p *Pacer) take(now func() time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := now()
	if p.last.IsZero() {
		p.tokens = p.Burst
	} else {
		p.tokens = min(p.Burst, p.tokens+t.Sub(p.last).Seconds()*p.Rate)
	}
	p.last = t
	if p.tokens >= 1 {
		p.tokens--
		return 0
	}
	batch := min(max(p.Batch, 1), p.Burst)
	return time.Duration((batch - p.tokens) / p.Rate * float64(time.Second))
}

// Paced counts the Takes that waited (each wait once).
func (p *Pacer) Paced() uint64 { return p.paced.Load() }

// UserPacers paces each user's admissions apart (one Pacer per uid, of
// Rate and Burst): one user's flood waits on its own bucket, not on
// another's. A user's pacer is made at its first Take and kept: the users
// admitted are few. The zero value is ready to use once Rate and Burst
// are set; it is safe for concurrent use.
type UserPacers struct {
	Rate, Burst float64

	mu    sync.Mutex
	users map[int]*Pacer
}

// Take waits for uid's turn, and reports false if done is closed first.
func (u *UserPacers) Take(uid int, done <-chan struct{}) bool {
	u.mu.Lock()
	p := u.users[uid]
	if p == nil {
		if u.users == nil {
			u.users = make(map[int]*Pacer)
		}
		p = &Pacer{Rate: u.Rate, Burst: u.Burst}
		u.users[uid] = p
	}
	u.mu.Unlock()
	return p.Take(done)
}

// Paced counts the Takes of every user that waited.
func (u *UserPacers) Paced() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var n uint64
	for _, p := range u.users {
		n += p.Paced()
	}
	return n
}
