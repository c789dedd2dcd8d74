package qp

import (
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Guard is the device's policy on peers whose requests fail their R_Key
// checks, as the requests of a peer guessing keys do. The responder asks
// it before it checks a request's R_Key and tells it of every refusal; the
// policy itself (a table of sources, a clock) is the driver's, so that the
// transport stays free of both. Its methods are called with the QP's own
// number and peer, from the goroutine that drives the QP, and must be
// quick: Held is asked on the data path.
type Guard interface {
	// Held reports whether the peer of QP qpn, at peer, is held back: its
	// requests that need an R_Key check are then dropped unanswered, as if
	// lost, whatever their key (a guesser ignoring the silence would
	// otherwise still learn of a success).
	Held(qpn uint32, peer netip.AddrPort) bool
	// Refused records that a request of that peer failed its R_Key check.
	Refused(qpn uint32, peer netip.AddrPort)
}

// Every refused R_Key check gets the same answer, the NAK "remote access
// error", and the same bookkeeping, whether the key names nothing, a
// region of another PD, one without the access asked for, or memory that
// does not hold the range: a guesser learns only that its guess failed.
// (rxe answers a misaligned atomic with "invalid request" once the key has
// passed, which tells a guesser that its key is good; softnic checks the
// address's alignment first, before the key.)

// remoteAccess checks the R_Key of request p for length bytes at va with
// access need, unless the Guard holds the peer back.
func (r *responder) remoteAccess(p *wire.Packet, rkey uint32, va, length uint64, need mr.Access) (mr.Span, outcome, failure) {
	q := r.q
	g := q.cfg.Guard
	if g != nil && g.Held(q.num, q.attr.Remote) {
		q.cnt.Inc(verbs.HeldAccess)
		return mr.Span{}, held, failure{}
	}
	s, err := q.cfg.Memory.Remote(rkey, va, length, need, r.peer(p))
	if err != nil {
		r.refused()
		return mr.Span{}, failed, accessError
	}
	return s, executed, failure{}
}

// refused tells the Guard of a refused R_Key check.
func (r *responder) refused() {
	q := r.q
	if g := q.cfg.Guard; g != nil {
		g.Refused(q.num, q.attr.Remote)
	}
}
