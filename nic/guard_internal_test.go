package nic

import (
	"fmt"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
)

// TestGuardBucket drives the guard's table with explicit times, with the
// default limits and others: a source is held back at its Refusals-th
// refusal in a row, earns one back every 1/Rate seconds, and is not pushed
// out of the table by a flood of new sources, however small the table;
// other sources are not held.
func TestGuardBucket(t *testing.T) {
	for _, l := range []AccessLimits{{}, {Refusals: 3, Rate: 10, Sources: 5}, {Refusals: 2, Rate: 0.5, Sources: 4096}} {
		l = l.WithDefaults()
		t.Run(fmt.Sprintf("%+v", l), func(t *testing.T) { testGuardBucket(t, l) })
	}
}

func testGuardBucket(t *testing.T, l AccessLimits) {
	var d embeddedDevice
	g := &d.guard
	g.init(&d, l)
	if len(g.sets)*guardWays != l.Sources {
		t.Errorf("%d sources remembered, want %d", len(g.sets)*guardWays, l.Sources)
	}
	at := func(s float64) qp.Time { return qp.Time(0).Add(time.Duration(s * float64(time.Second))) }
	src := func(i int) guardSource { return guardSource{ip: [16]byte{15: byte(i), 14: byte(i >> 8)}} }
	attacker, bystander := src(1), src(2)

	g.refused(bystander, at(1))
	for i := range l.Refusals {
		if g.held(attacker, at(1)) {
			t.Fatalf("held after %d refusals, want after %d", i, l.Refusals)
		}
		g.refused(attacker, at(1))
	}
	if !g.held(attacker, at(1)) || g.until.Load() == 0 {
		t.Fatalf("not held after %d refusals (until %d)", l.Refusals, g.until.Load())
	}
	if g.held(bystander, at(1)) {
		t.Error("a source with one refusal is held")
	}
	if n := d.devc.v[AccessHolds].Load(); n != 1 {
		t.Errorf("access_holds = %d, want 1", n)
	}

	// A flood of sources, each refused once, does not evict the held one.
	for i := range 10000 {
		g.refused(src(1000+i), at(1+0.1/l.Rate))
	}
	if !g.held(attacker, at(1+0.2/l.Rate)) {
		t.Error("the held source was pushed out of the table by new ones")
	}

	// One refusal is earned back after 1/Rate s.
	back := at(1 + 1/l.Rate)
	if end := qp.Time(g.until.Load()); end != back {
		t.Errorf("the hold ends at %v, want %v", end, back)
	}
	if g.held(attacker, back) {
		t.Error("still held once a refusal is earned back")
	}
	g.refused(attacker, back)
	if !g.held(attacker, back) {
		t.Error("not held again after the refusal earned back is spent")
	}
	if n := d.devc.v[AccessHolds].Load(); n != 2 {
		t.Errorf("access_holds = %d, want 2", n)
	}
}
