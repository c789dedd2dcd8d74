// Package readpace paces the READ response packets of an RC responder
// (package qp): how many may leave a round once the requester's repeated
// requests show them lost. It is pure arithmetic on what the responder
// tells it, on the driver's clock (nanoseconds, as qp.Time).
package readpace

import (
	"time"

	"github.com/softnic/softnic/qp/internal/cwnd"
	"github.com/softnic/softnic/wire"
)

// The bounds of a Pacer: a round lasts at most Round, and at least
// Floor packets leave a round (10 µs rounds and 16 packets: 1.6 million
// a second; 100 µs rounds: 160,000).
const (
	Round = 100 * time.Microsecond
	Floor = 2 * cwnd.Min
)

// Pacer spaces the READ response packets of a responder. Unpaced, a
// READ's responses leave in one burst (1 MiB is 1024 packets at MTU 1024)
// and overflow a queue on a long path, and each time the requester asks
// for the rest again the rest leaves in one burst again; rxe sends them so.
// Nothing acknowledges READ responses, so the pacer learns from the
// requester's requests, as a requester learns from ACKs: a request asking
// again for part of a READ says some of its responses were lost, and how
// long after they left it came is a round trip.
//
// From the first such loss on, the responder sends at most wnd READ
// response packets a round, a round being the shortest round trip seen
// (at most Round, so that a slow path is paced by time, not by its
// losses alone). wnd starts at Floor, grows by one with each new READ
// request (the requester's window moved: responses arrived) and halves on
// a loss, once a round, down to Floor again. The floor keeps random
// loss, which go-back-N already makes costly, from throttling READs to a
// trickle (package qp's TestPacedReads measures both).
type Pacer struct {
	wnd   int           // packets a round; 0: not paced (no loss yet)
	round time.Duration // the shortest round trip seen, at most Round
	left  int           // packets the current round has left
	start time.Duration // when the current round began
	cut   time.Duration // when wnd last shrank

	// sent is what left recently, to time round trips by: each entry a
	// run of consecutive PSNs sent at one time.
	sent [32]sentRun
	last int // index of the newest entry
}

// sentRun is a run of READ response PSNs first..last sent at time at.
type sentRun struct {
	at          time.Duration
	first, last wire.PSN
	used        bool
}

// Allow reports whether a READ response packet may leave at now.
func (p *Pacer) Allow(now time.Duration) bool {
	if p.wnd == 0 {
		return true
	}
	if now >= p.start+p.round {
		p.left, p.start = p.wnd, now
	}
	return p.left > 0
}

// SentAt records that READ response packet psn left at now.
func (p *Pacer) SentAt(now time.Duration, psn wire.PSN) {
	if p.wnd > 0 {
		p.left--
	}
	r := &p.sent[p.last]
	if r.used && r.at == now && r.last.Add(1) == psn {
		r.last = psn
		return
	}
	p.last = (p.last + 1) % len(p.sent)
	p.sent[p.last] = sentRun{at: now, first: psn, last: psn, used: true}
}

// Next returns when the next round begins, if the current one is used up.
func (p *Pacer) Next() (time.Duration, bool) {
	return p.start + p.round, p.wnd > 0 && p.left == 0
}

// Progress grows the budget: a new READ request came.
func (p *Pacer) Progress() {
	if p.wnd > 0 {
		p.wnd++
	}
}

// Lost is told at now that the requester asked again for a READ from PSN
// psn on: the responses from psn on were lost (or are late).
func (p *Pacer) Lost(now time.Duration, psn wire.PSN) {
	for i, k := p.last, 0; k < len(p.sent); i, k = (i+len(p.sent)-1)%len(p.sent), k+1 {
		r := &p.sent[i]
		if r.used && !psn.Before(r.first) && !psn.After(r.last) {
			if rtt := min(now-r.at, Round); rtt > 0 && (p.round == 0 || rtt < p.round) {
				p.round = rtt
			}
			break
		}
	}
	switch {
	case p.round == 0:
		return // no round trip known yet: nothing to pace by
	case p.wnd == 0:
		p.wnd = Floor
	case now >= p.cut+p.round:
		p.wnd = max(p.wnd/2, Floor)
	default:
		return // this round's loss already cut the budget
	}
	p.cut = now
	p.left = min(p.left, p.wnd)
}

// Window returns the packets a round the pacer lets go; 0 while it does
// not pace.
func (p *Pacer) Window() int { return p.wnd }
