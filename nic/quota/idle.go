package quota

import (
	"math"
	"time"
)

// IdleBudget is a token bucket of a process's requests for nothing, such
// as the looks at its queues that its doorbell causes and that find
// nothing (the daemon's doorbell budget): burst of them at once, rate a
// second after, and one more for each piece of work the process gives.
// Once spent, the process is not heard until the budget is back at a
// quarter of the burst (at most half the rate), a second at most. It is
// not safe for concurrent use.
type IdleBudget struct {
	burst, rate float64
	// resume is what the budget gets back to before the process is heard
	// again.
	resume float64

	tokens float64
	at     time.Time // when tokens was brought up to date; zero: never
	work   uint64    // the work counted then
}

// NewIdleBudget returns a full budget of burst requests at once and rate
// a second; both must be positive.
func NewIdleBudget(burst, rate int) IdleBudget {
	return IdleBudget{burst: float64(burst), rate: float64(rate), resume: float64(min(burst/4, rate/2))}
}

// Spend brings the budget up to date at now, with work the work the
// process has given so far (each earns a token), and takes n tokens. It
// returns how long the process is then not to be heard, 0 if the budget
// is not below zero. The debt is capped so that this is a second at most.
func (b *IdleBudget) Spend(now time.Time, work uint64, n int) time.Duration {
	if b.at.IsZero() {
		b.tokens = b.burst
	} else if now.After(b.at) {
		b.tokens += now.Sub(b.at).Seconds()*b.rate + float64(work-b.work)
	} else {
		b.tokens += float64(work - b.work)
	}
	b.at, b.work = now, work
	b.tokens = max(min(b.tokens, b.burst)-float64(n), b.resume-b.rate)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(math.Ceil((b.resume - b.tokens) * float64(time.Second) / b.rate))
}
