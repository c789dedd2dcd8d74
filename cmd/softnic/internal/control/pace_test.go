package control

import (
	"testing"
	"time"
)

// TestPacer: a pacer lets its burst through at once, then waits for
// paceBatch tokens at a time at its rate, counting each wait, and stops
// waiting when done is closed.
func TestPacer(t *testing.T) {
	clock := time.Unix(1000, 0)
	var slept []time.Duration
	done := make(chan struct{})
	p := pacer{rate: 1000, burst: 50,
		now: func() time.Time { return clock },
		sleep: func(d time.Duration, done <-chan struct{}) bool {
			select {
			case <-done:
				return false
			default:
			}
			slept = append(slept, d)
			clock = clock.Add(d)
			return true
		}}
	for i := range 50 {
		if !p.take(done) || len(slept) != 0 {
			t.Fatalf("take %d of a burst of 50 waited %v", i, slept)
		}
	}
	for i := range 3 * paceBatch {
		if !p.take(done) {
			t.Fatalf("take %d past the burst: false", i)
		}
	}
	batch := paceBatch * time.Millisecond // at 1000 a second
	if len(slept) != 3 || slept[0] != batch || slept[1] != batch || slept[2] != batch || p.paced.Load() != 3 {
		t.Errorf("%d takes past the burst waited %v (paced %d), want 3 waits of %v", 3*paceBatch, slept, p.paced.Load(), batch)
	}
	clock = clock.Add(time.Hour) // refills no more than the burst
	for i := range 50 {
		if !p.take(done) || len(slept) != 3 {
			t.Fatalf("take %d after an hour waited", i)
		}
	}
	close(done)
	if p.take(done) {
		t.Error("take past the burst with done closed: true")
	}
}
