package guard

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
)

// TestGuardBucket drives the guard's table with explicit times, with the
// default limits of nic.AccessLimits and others: a source is held back at
// its Refusals-th refusal in a row, earns one back every 1/Rate seconds,
// and is not pushed out of the table by a flood of new sources, however
// small the table; other sources are not held.
func TestGuardBucket(t *testing.T) {
	for _, c := range []Config{{Refusals: 16, Rate: 2, Sources: 256}, {Refusals: 3, Rate: 10, Sources: 8}, {Refusals: 2, Rate: 0.5, Sources: 4096}} {
		t.Run(fmt.Sprintf("%d/%g/%d", c.Refusals, c.Rate, c.Sources), func(t *testing.T) { testGuardBucket(t, c) })
	}
}

func testGuardBucket(t *testing.T, c Config) {
	holds := 0
	c.OnHold = func() { holds++ }
	c.Now = func() qp.Time { t.Fatal("the guard read the clock in a test that gives it the time"); return 0 }
	c.Source = func(uint32, netip.AddrPort) Source {
		t.Fatal("the guard asked for a source in a test that names it")
		return Source{}
	}
	var g Guard
	g.Init(c)
	if len(g.sets)*Ways != c.Sources {
		t.Errorf("%d sources remembered, want %d", len(g.sets)*Ways, c.Sources)
	}
	at := func(s float64) qp.Time { return qp.Time(0).Add(time.Duration(s * float64(time.Second))) }
	src := func(i int) Source { return Source{IP: [16]byte{15: byte(i), 14: byte(i >> 8)}} }
	attacker, bystander := src(1), src(2)

	g.refused(bystander, at(1))
	for i := range c.Refusals {
		if g.held(attacker, at(1)) {
			t.Fatalf("held after %d refusals, want after %d", i, c.Refusals)
		}
		g.refused(attacker, at(1))
	}
	if !g.held(attacker, at(1)) || g.until.Load() == 0 {
		t.Fatalf("not held after %d refusals (until %d)", c.Refusals, g.until.Load())
	}
	if g.held(bystander, at(1)) {
		t.Error("a source with one refusal is held")
	}
	if holds != 1 {
		t.Errorf("%d holds, want 1", holds)
	}

	// A flood of sources, each refused once, does not evict the held one.
	for i := range 10000 {
		g.refused(src(1000+i), at(1+0.1/c.Rate))
	}
	if !g.held(attacker, at(1+0.2/c.Rate)) {
		t.Error("the held source was pushed out of the table by new ones")
	}

	// One refusal is earned back after 1/Rate s.
	back := at(1 + 1/c.Rate)
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
	if holds != 2 {
		t.Errorf("%d holds, want 2", holds)
	}
}
