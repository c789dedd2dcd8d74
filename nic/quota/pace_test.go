package quota

import (
	"sync"
	"testing"
	"time"
)

// fakeSleeper is a Pacer's clock and sleep in a test: sleeping moves the
// clock, and records how long.
type fakeSleeper struct {
	mu    sync.Mutex
	clock time.Time
	slept []time.Duration
}

func (f *fakeSleeper) pace(p *Pacer) {
	p.now = func() time.Time {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.clock
	}
	p.sleep = func(d time.Duration, done <-chan struct{}) bool {
		select {
		case <-done:
			return false
		default:
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.slept = append(f.slept, d)
		f.clock = f.clock.Add(d)
		return true
	}
}

// TestPacer: a pacer lets its burst through at once, then waits for Batch
// tokens at a time at its rate, counting each wait, and stops waiting
// when done is closed.
func TestPacer(t *testing.T) {
	const batch = 32
	f := &fakeSleeper{clock: time.Unix(1000, 0)}
	p := &Pacer{Rate: 1000, Burst: 50, Batch: batch}
	f.pace(p)
	done := make(chan struct{})
	for i := range 50 {
		if !p.Take(done) || len(f.slept) != 0 {
			t.Fatalf("take %d of a burst of 50 waited %v", i, f.slept)
		}
	}
	for i := range 3 * batch {
		if !p.Take(done) {
			t.Fatalf("take %d past the burst: false", i)
		}
	}
	wait := batch * time.Millisecond // at 1000 a second
	if len(f.slept) != 3 || f.slept[0] != wait || f.slept[1] != wait || f.slept[2] != wait || p.Paced() != 3 {
		t.Errorf("%d takes past the burst waited %v (paced %d), want 3 waits of %v", 3*batch, f.slept, p.Paced(), wait)
	}
	f.clock = f.clock.Add(time.Hour) // refills no more than the burst
	for i := range 50 {
		if !p.Take(done) || len(f.slept) != 3 {
			t.Fatalf("take %d after an hour waited", i)
		}
	}
	close(done)
	if p.Take(done) {
		t.Error("take past the burst with done closed: true")
	}
}

// TestPacerConcurrent: takers on several goroutines at once get no more
// than the burst plus what the rate earns in the time they waited, and
// each gets its token.
func TestPacerConcurrent(t *testing.T) {
	for _, tc := range []struct {
		name         string
		burst, batch float64
	}{{"batch of one", 4, 0}, {"batch of four", 8, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSleeper{clock: time.Unix(1000, 0)}
			p := &Pacer{Rate: 100, Burst: tc.burst, Batch: tc.batch}
			f.pace(p)
			start := f.clock
			const takers, each = 8, 25
			var wg sync.WaitGroup
			for range takers {
				wg.Go(func() {
					for range each {
						if !p.Take(nil) {
							t.Error("Take with done nil: false")
						}
					}
				})
			}
			wg.Wait()
			earned := tc.burst + f.clock.Sub(start).Seconds()*p.Rate
			if takers*each > int(earned+0.5) {
				t.Errorf("%d takes in %v at 100 a second with a burst of %v: more than the %.1f earned", takers*each, f.clock.Sub(start), tc.burst, earned)
			}
			if p.Paced() == 0 {
				t.Error("no take waited")
			}
		})
	}
}

// TestUserPacers: each user has a bucket of its own, so one user's spent
// burst does not make another's first take wait; a take that must wait
// ends false once done is closed, and Paced counts it.
func TestUserPacers(t *testing.T) {
	u := &UserPacers{Rate: 0.001, Burst: 2} // a token every 1,000 s: a take past the burst waits
	closed := make(chan struct{})
	close(closed)
	for _, uid := range []int{1000, 1000, 1001, 1001} {
		if !u.Take(uid, closed) {
			t.Fatalf("user %d's take within its burst of 2 waited", uid)
		}
	}
	if u.Paced() != 0 {
		t.Fatalf("Paced %d after takes within each burst", u.Paced())
	}
	if u.Take(1000, closed) {
		t.Fatal("user 1000's third take did not wait for a token")
	}
	if !u.Take(1002, closed) {
		t.Fatal("user 1002's first take waited on the other users' buckets")
	}
	if u.Paced() != 1 {
		t.Errorf("Paced %d, want the one take that waited", u.Paced())
	}
}
