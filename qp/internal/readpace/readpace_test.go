package readpace

import (
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

// TestReadPacer drives a Pacer with explicit times: unpaced until a
// re-request times a round trip, then Floor packets a round of that
// round trip (capped at Round), one more for each new READ, halved on
// a later loss once a round but not below Floor.
func TestReadPacer(t *testing.T) {
	const base = wire.PSN(0xFFFF00) // PSNs wrap on the way
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	var p Pacer
	send := func(now time.Duration, first, n int) int { // sends up to n PSNs from first; returns how many left
		sent := 0
		for i := range n {
			if !p.Allow(now) {
				break
			}
			p.SentAt(now, base.Add(uint32(first+i)))
			sent++
		}
		return sent
	}
	if got := send(us(0), 0, 1000); got != 1000 {
		t.Fatalf("unpaced: %d of 1000 sent", got)
	}
	p.Lost(us(40), base.Add(5000)) // never sent: no round trip
	if p.wnd != 0 {
		t.Fatalf("paced (wnd %d) without a round trip", p.wnd)
	}
	p.Lost(us(50), base.Add(500))
	if p.wnd != Floor || p.round != 50*time.Microsecond {
		t.Fatalf("after a loss 50 µs after sending: wnd %d, round %v; want %d, 50µs", p.wnd, p.round, Floor)
	}
	if got := send(us(60), 500, 100); got != Floor {
		t.Fatalf("a paced round sent %d, want %d", got, Floor)
	}
	if at, ok := p.Next(); !ok || at != us(110) {
		t.Fatalf("next round at %v, %v; want 110µs", at, ok)
	}
	if got := send(us(109), 600, 100); got != 0 {
		t.Fatalf("%d sent before the round ended", got)
	}
	for range 24 {
		p.Progress()
	}
	if got := send(us(110), 600, 100); got != Floor+24 {
		t.Fatalf("after 24 new READs a round sent %d, want %d", got, Floor+24)
	}
	p.Lost(us(130), base.Add(600))
	if p.wnd != (Floor+24)/2 {
		t.Fatalf("after another loss wnd %d, want %d", p.wnd, (Floor+24)/2)
	}
	p.Lost(us(140), base.Add(610)) // the same round: no second cut
	if p.wnd != (Floor+24)/2 {
		t.Fatalf("a second loss within a round cut wnd to %d", p.wnd)
	}
	p.Lost(us(200), base.Add(620))
	if p.wnd != Floor {
		t.Fatalf("wnd %d, want the floor %d", p.wnd, Floor)
	}
	// A slow path is paced in rounds of Round, not of its round trip.
	var q Pacer
	q.SentAt(us(0), base)
	q.Lost(us(10000), base)
	if q.round != Round {
		t.Errorf("round %v after a 10 ms round trip, want %v", q.round, Round)
	}
}
