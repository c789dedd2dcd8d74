package nic

import (
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
)

// TestGuardBucket drives the guard's table with explicit times: a source is
// held back at its guardBurst-th refusal in a row, earns one back every
// 1/guardRate seconds, and is not pushed out of the table by a flood of
// new sources; other sources are not held.
func TestGuardBucket(t *testing.T) {
	var d embeddedDevice
	g := &d.guard
	g.init(&d)
	at := func(s float64) qp.Time { return qp.Time(0).Add(time.Duration(s * float64(time.Second))) }
	src := func(i int) guardSource { return guardSource{ip: [16]byte{15: byte(i), 14: byte(i >> 8)}} }
	attacker, bystander := src(1), src(2)

	g.refused(bystander, at(1))
	for i := range guardBurst {
		if g.held(attacker, at(1)) {
			t.Fatalf("held after %d refusals, want after %d", i, guardBurst)
		}
		g.refused(attacker, at(1))
	}
	if !g.held(attacker, at(1)) || g.until.Load() == 0 {
		t.Fatalf("not held after %d refusals (until %d)", guardBurst, g.until.Load())
	}
	if g.held(bystander, at(1)) {
		t.Error("a source with one refusal is held")
	}
	if n := d.devc.v[AccessHolds].Load(); n != 1 {
		t.Errorf("access_holds = %d, want 1", n)
	}

	// A flood of sources, each refused once, does not evict the held one.
	for i := range 10000 {
		g.refused(src(1000+i), at(1.1))
	}
	if !g.held(attacker, at(1.2)) {
		t.Error("the held source was pushed out of the table by new ones")
	}

	// One refusal is earned back after 1/guardRate s.
	if end := qp.Time(g.until.Load()); end != at(1+1.0/guardRate) {
		t.Errorf("the hold ends at %v, want %v", end, at(1+1.0/guardRate))
	}
	if g.held(attacker, at(1+1.0/guardRate)) {
		t.Error("still held once a refusal is earned back")
	}
	g.refused(attacker, at(1+1.0/guardRate))
	if !g.held(attacker, at(1+1.0/guardRate)) {
		t.Error("not held again after the refusal earned back is spent")
	}
	if n := d.devc.v[AccessHolds].Load(); n != 2 {
		t.Errorf("access_holds = %d, want 2", n)
	}
}
