package qp

import (
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

// TestReadPacer drives a readPacer with explicit times: unpaced until a
// re-request times a round trip, then paceFloor packets a round of that
// round trip (capped at paceRound), one more for each new READ, halved on
// a later loss once a round but not below paceFloor.
func TestReadPacer(t *testing.T) {
	const base = wire.PSN(0xFFFF00) // PSNs wrap on the way
	us := func(n int) Time { return Time(0).Add(time.Duration(n) * time.Microsecond) }
	var p readPacer
	send := func(now Time, first, n int) int { // sends up to n PSNs from first; returns how many left
		sent := 0
		for i := range n {
			if !p.allow(now) {
				break
			}
			p.sentAt(now, base.Add(uint32(first+i)))
			sent++
		}
		return sent
	}
	if got := send(us(0), 0, 1000); got != 1000 {
		t.Fatalf("unpaced: %d of 1000 sent", got)
	}
	p.lost(us(40), base.Add(5000)) // never sent: no round trip
	if p.wnd != 0 {
		t.Fatalf("paced (wnd %d) without a round trip", p.wnd)
	}
	p.lost(us(50), base.Add(500))
	if p.wnd != paceFloor || p.round != 50*time.Microsecond {
		t.Fatalf("after a loss 50 µs after sending: wnd %d, round %v; want %d, 50µs", p.wnd, p.round, paceFloor)
	}
	if got := send(us(60), 500, 100); got != paceFloor {
		t.Fatalf("a paced round sent %d, want %d", got, paceFloor)
	}
	if at, ok := p.next(); !ok || at != us(110) {
		t.Fatalf("next round at %v, %v; want 110µs", at, ok)
	}
	if got := send(us(109), 600, 100); got != 0 {
		t.Fatalf("%d sent before the round ended", got)
	}
	for range 24 {
		p.progress()
	}
	if got := send(us(110), 600, 100); got != paceFloor+24 {
		t.Fatalf("after 24 new READs a round sent %d, want %d", got, paceFloor+24)
	}
	p.lost(us(130), base.Add(600))
	if p.wnd != (paceFloor+24)/2 {
		t.Fatalf("after another loss wnd %d, want %d", p.wnd, (paceFloor+24)/2)
	}
	p.lost(us(140), base.Add(610)) // the same round: no second cut
	if p.wnd != (paceFloor+24)/2 {
		t.Fatalf("a second loss within a round cut wnd to %d", p.wnd)
	}
	p.lost(us(200), base.Add(620))
	if p.wnd != paceFloor {
		t.Fatalf("wnd %d, want the floor %d", p.wnd, paceFloor)
	}
	// A slow path is paced in rounds of paceRound, not of its round trip.
	var q readPacer
	q.sentAt(us(0), base)
	q.lost(us(10000), base)
	if q.round != paceRound {
		t.Errorf("round %v after a 10 ms round trip, want %v", q.round, paceRound)
	}
}
