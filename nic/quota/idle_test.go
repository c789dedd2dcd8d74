package quota

import (
	"fmt"
	"testing"
	"time"
)

// TestIdleBudget spends budgets of a doorbell's default limits (256 at
// once, 1,000 a second) and of others with explicit times.
func TestIdleBudget(t *testing.T) {
	for _, l := range []struct{ burst, rate int }{{256, 1000}, {16, 100}, {4096, 10}, {1, 1}} {
		t.Run(fmt.Sprintf("burst %d rate %d", l.burst, l.rate), func(t *testing.T) { testIdleBudget(t, l.burst, l.rate) })
	}
}

func testIdleBudget(t *testing.T, burst, rate int) {
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	resume, work := min(burst/4, rate/2), uint64(min(burst, 50))
	// A token short waits until the budget is back at a quarter of the
	// burst (half the rate if less).
	short := time.Duration(resume+1) * (time.Second / time.Duration(rate))
	tick := 1000 / float64(rate) // ms to earn a token
	type spend struct {
		at    time.Time
		work  uint64
		n     int
		pause time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []spend
	}{
		{"a burst is free", []spend{{t0, 0, burst, 0}}},
		{"one past the burst waits", []spend{{t0, 0, burst + 1, short}}},
		{"time refills", []spend{{t0, 0, burst, 0}, {ms(float64(work) * tick), 0, int(work), 0}, {ms(float64(work) * tick), 0, 1, short}}},
		{"refills no further than the burst", []spend{{t0, 0, 1, 0}, {ms(60000), 0, burst, 0}, {ms(60000), 0, 1, short}}},
		{"work earns tokens", []spend{{t0, 0, burst, 0}, {t0, work, int(work), 0}, {t0, work, 1, short}}},
		{"the pause is a second at most", []spend{{t0, 0, 1 << 20, time.Second}, {t0, 0, 1 << 20, time.Second}}},
		{"a clock going back refills nothing", []spend{{t0, 0, burst, 0}, {ms(-500), 0, 1, short}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewIdleBudget(burst, rate)
			for i, s := range tc.steps {
				if got := b.Spend(s.at, s.work, s.n); got != s.pause {
					t.Errorf("step %d: Spend(%v, work %d, %d) = %v, want %v", i, s.at.Sub(t0), s.work, s.n, got, s.pause)
				}
			}
		})
	}
}
