package qp

import (
	"time"

	"github.com/softnic/softnic/qp/internal/cwnd"
	"github.com/softnic/softnic/wire"
)

// The bounds of a readPacer: a round lasts at most paceRound, and at least
// paceFloor packets leave a round (10 µs rounds and 16 packets: 1.6 million
// a second; 100 µs rounds: 160,000).
const (
	paceRound = 100 * time.Microsecond
	paceFloor = 2 * cwnd.Min
)

// readPacer spaces the READ response packets of a responder. Unpaced, a
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
// (at most paceRound, so that a slow path is paced by time, not by its
// losses alone). wnd starts at paceFloor, grows by one with each new READ
// request (the requester's window moved: responses arrived) and halves on
// a loss, once a round, down to paceFloor again. The floor keeps random
// loss, which go-back-N already makes costly, from throttling READs to a
// trickle (TestPacedReads measures both).
type readPacer struct {
	wnd   int           // packets a round; 0: not paced (no loss yet)
	round time.Duration // the shortest round trip seen, at most paceRound
	left  int           // packets the current round has left
	start Time          // when the current round began
	cut   Time          // when wnd last shrank

	// sent is what left recently, to time round trips by: each entry a
	// run of consecutive PSNs sent at one time.
	sent [32]sentRun
	last int // index of the newest entry
}

// sentRun is a run of READ response PSNs first..last sent at time at.
type sentRun struct {
	at          Time
	first, last wire.PSN
	used        bool
}

// allow reports whether a READ response packet may leave at now.
func (p *readPacer) allow(now Time) bool {
	if p.wnd == 0 {
		return true
	}
	if now >= p.start.Add(p.round) {
		p.left, p.start = p.wnd, now
	}
	return p.left > 0
}

// sentAt records that READ response packet psn left at now.
func (p *readPacer) sentAt(now Time, psn wire.PSN) {
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

// next returns when the next round begins, if the current one is used up.
func (p *readPacer) next() (Time, bool) {
	return p.start.Add(p.round), p.wnd > 0 && p.left == 0
}

// progress grows the budget: a new READ request came.
func (p *readPacer) progress() {
	if p.wnd > 0 {
		p.wnd++
	}
}

// lost is told at now that the requester asked again for a READ from PSN
// psn on: the responses from psn on were lost (or are late).
func (p *readPacer) lost(now Time, psn wire.PSN) {
	for i, k := p.last, 0; k < len(p.sent); i, k = (i+len(p.sent)-1)%len(p.sent), k+1 {
		r := &p.sent[i]
		if r.used && !psn.Before(r.first) && !psn.After(r.last) {
			if rtt := min(now.Sub(r.at), paceRound); rtt > 0 && (p.round == 0 || rtt < p.round) {
				p.round = rtt
			}
			break
		}
	}
	switch {
	case p.round == 0:
		return // no round trip known yet: nothing to pace by
	case p.wnd == 0:
		p.wnd = paceFloor
	case now >= p.cut.Add(p.round):
		p.wnd = max(p.wnd/2, paceFloor)
	default:
		return // this round's loss already cut the budget
	}
	p.cut = now
	p.left = min(p.left, p.wnd)
}
