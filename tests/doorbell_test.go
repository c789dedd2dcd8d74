package tests

import (
	"fmt"
	"testing"
	"time"
)

// TestDoorbellFlood: a process signals its doorbell eventfd as fast as it
// can without posting anything, with or without marking every one of its
// QPs in its doorbell page as rung. Another attached process's 64 KiB
// WRITEs keep within 2× of their throughput and p99 latency without the
// flood; the daemon counts the flood against the flooding process and
// wakes for it no more than the README says: 256 times, then 1,000 a
// second.
func TestDoorbellFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("builds softnic and runs processes")
	}
	d := startServe(t, buildSoftnic(t))
	by := newBystander(t, d.control)
	for _, attack := range []string{"doorbell-signals", "doorbell-marks"} {
		t.Run(attack, func(t *testing.T) {
			a := startAttacker(t, attack, d.control)
			began := time.Now()
			var attacking time.Duration
			var since time.Time
			by.checkUnderAttack(t, 9, 120*time.Millisecond, 2, func(on bool) {
				if on {
					since = time.Now()
				} else {
					attacking += time.Since(since)
				}
				a.attack(t, on)
			})

			var stat map[string]uint64
			d.inspect(t, "stat", &stat)
			c := func(name string) uint64 { return stat[fmt.Sprintf("pid%d_%s", a.pid, name)] }
			t.Logf("attacker: %d signals in %v, %d heard (%d empty), throttled %d times",
				c("doorbell_signals"), attacking.Round(time.Millisecond), c("doorbells"), c("doorbells_empty"), c("doorbells_throttled"))
			// The budget refills while the attacker is stopped too.
			took := time.Since(began)
			if most := 256 + uint64(1000*took.Seconds()); c("doorbells") > most {
				t.Errorf("the daemon woke %d times for the attacker's doorbell in %v, more than %d", c("doorbells"), took, most)
			}
			if c("doorbells_empty") == 0 || c("doorbells_throttled") == 0 || c("doorbell_signals") < 10*c("doorbells") {
				t.Errorf("the flood is not counted as such: %d signals, %d wakeups, %d empty, throttled %d times",
					c("doorbell_signals"), c("doorbells"), c("doorbells_empty"), c("doorbells_throttled"))
			}
		})
	}
}
