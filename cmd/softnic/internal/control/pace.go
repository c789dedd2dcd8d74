package control

import (
	"sync/atomic"
	"time"
)

// paceBatch is how many accepts the accept loop waits for at once when
// connections come faster than AcceptRate: a flood wakes it once per
// batch, not per connection.
const paceBatch = 32

// pacer is a token bucket of accepts: rate a second, at most burst at
// once. Full when first used.
type pacer struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	paced       atomic.Uint64 // the waits
	// now and sleep are time.Now and sleepUnless but in tests.
	now   func() time.Time
	sleep func(d time.Duration, done <-chan struct{}) bool
}

// take takes a token, waiting for paceBatch of them if there is none, and
// reports false if done is closed first.
func (p *pacer) take(done <-chan struct{}) bool {
	now, sleep := p.now, p.sleep
	if now == nil {
		now, sleep = time.Now, sleepUnless
	}
	for {
		t := now()
		if p.last.IsZero() {
			p.tokens = p.burst
		} else {
			p.tokens = min(p.burst, p.tokens+t.Sub(p.last).Seconds()*p.rate)
		}
		p.last = t
		if p.tokens >= 1 {
			p.tokens--
			return true
		}
		p.paced.Add(1)
		if !sleep(time.Duration((min(paceBatch, p.burst)-p.tokens)/p.rate*float64(time.Second)), done) {
			return false
		}
	}
}

// sleepUnless waits d and reports true, or false if done is closed first.
func sleepUnless(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
