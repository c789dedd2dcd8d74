package daemon

import (
	"sync/atomic"
	"time"
)

// DefaultSendRate is how many SENDs a second the daemon takes from its
// peers, all together, unless Config.SendRate says otherwise.
const DefaultSendRate = 10000

// sendPacer paces the daemon's receive buffers: a buffer a SEND filled is
// posted again 1/SendRate after the one before at the soonest, so that
// RecvBuffers SENDs go at once and then SendRate a second. Beyond, the
// buffers run out and the device answers the peers' SENDs with RNR NAKs,
// on which a requester waits its min_rnr_timer before it sends again: a
// peer that floods the daemon with SENDs costs it SendRate receptions a
// second and little more for the rest, instead of as many as it can send
// (60,000 a second and more on a 2-core machine, which doubled another
// peer's p99 WRITE latency). The daemon's SENDs are its log's: what it
// does with them needs no more.
//
// The receive loop alone calls hold and take; held is read by stat.
type sendPacer struct {
	gap   time.Duration    // 1/rate
	next  time.Time        // the soonest the next buffer goes back
	now   func() time.Time // time.Now, or a test's clock
	timer *time.Timer      // hold's, reused
	held  atomic.Uint64    // the buffers hold kept back (receives_paced)
}

func newSendPacer(rate int, now func() time.Time) *sendPacer {
	p := &sendPacer{gap: time.Second / time.Duration(rate), now: now, timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	return p
}

// hold waits until the buffer of one more SEND may be posted again, or
// until done is closed.
func (p *sendPacer) hold(done <-chan struct{}) {
	wait := p.take()
	if wait == 0 {
		return
	}
	p.held.Add(1)
	p.timer.Reset(wait)
	select {
	case <-p.timer.C:
	case <-done:
	}
}

// take returns how long to wait before the buffer of one more SEND is
// posted again.
func (p *sendPacer) take() time.Duration {
	now := p.now()
	if p.next.Before(now) {
		p.next = now
	}
	wait := p.next.Sub(now)
	p.next = p.next.Add(p.gap)
	return wait
}
