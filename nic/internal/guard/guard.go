// Package guard holds back the sources of requests that fail too many
// R_Key checks: the embedded device's qp.Guard.
//
// A peer that guesses rkeys fails R_Key checks, one per guess, and the
// transport tells the device of each (qp.Guard). The guard gives every
// source a bucket of Limits.Refusals refusals that refills at Limits.Rate a
// second; a source whose bucket runs dry is held back until it has earned
// one refusal again: its requests that need an R_Key check are then
// dropped unanswered, good key or not, so that guessing slows from the
// thousands a second a peer can otherwise try to the rate. A peer that
// uses its keys as it should fails none: each failure also ends its RC
// connection.
//
// A source is a peer's IP address: RoCE peers send from many UDP ports, and
// a connected QP takes packets only from its peer's address. Programs
// attached to a device share its address, so for a QP connected to another
// QP of the device the source is the uid that owns the sending QP (or the
// device itself); the device says which (Config.Source). The table is
// fixed when the guard is made (Limits.Sources, in sets of Ways); a new
// source takes the place of the least suspect one of its set.
package guard

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/qp"
)

// Ways is how many sources a set of the table holds: Limits.Sources is a
// multiple of it.
const Ways = 4

// Source names a source of requests.
type Source struct {
	IP [16]byte
	// Owner is 0 for a remote peer; for a QP of the device, 1 for one of
	// the device's own and 2+uid for an attached process's.
	Owner uint32
}

// Config is what a Guard needs of its device.
type Config struct {
	Refusals int     // a source's bucket: refusals in a row before it is held
	Rate     float64 // refusals a second a held source earns back
	Sources  int     // sources remembered, a multiple of Ways
	// Now is the device clock; Source names the source of the requests a
	// QP receives from its peer; OnHold is called each time a source is
	// held back (with the guard's lock held, so it must not call back).
	Now    func() qp.Time
	Source func(qpn uint32, peer netip.AddrPort) Source
	OnHold func()
}

type entry struct {
	src    Source
	used   bool
	tokens float64 // refusals left
	at     qp.Time // when tokens was last brought up to date
}

// Guard is a device's qp.Guard. Its zero value is not usable: call Init.
type Guard struct {
	cfg   Config
	burst float64 // Config.Refusals
	// until is when the last hold ends (a qp.Time), 0 once it has: while it
	// is 0, Held answers from it alone.
	until atomic.Int64
	seed  maphash.Seed

	mu   sync.Mutex
	sets [][Ways]entry
}

// Init sets the guard up with cfg.
func (g *Guard) Init(cfg Config) {
	g.cfg, g.seed, g.burst = cfg, maphash.MakeSeed(), float64(cfg.Refusals)
	g.sets = make([][Ways]entry, cfg.Sources/Ways)
}

// refill brings e's bucket up to date at now and returns it.
func (g *Guard) refill(e *entry, now qp.Time) float64 {
	e.tokens = min(g.burst, e.tokens+now.Sub(e.at).Seconds()*g.cfg.Rate)
	e.at = now
	return e.tokens
}

// Held implements qp.Guard.
func (g *Guard) Held(qpn uint32, peer netip.AddrPort) bool {
	until := g.until.Load()
	if until == 0 {
		return false
	}
	now := g.cfg.Now()
	if int64(now) >= until {
		g.until.CompareAndSwap(until, 0)
		return false
	}
	return g.held(g.cfg.Source(qpn, peer), now)
}

// Refused implements qp.Guard.
func (g *Guard) Refused(qpn uint32, peer netip.AddrPort) {
	g.refused(g.cfg.Source(qpn, peer), g.cfg.Now())
}

// held reports whether src is held back at now.
func (g *Guard) held(src Source, now qp.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.find(src, now, false)
	return e != nil && g.refill(e, now) < 1
}

// refused takes one refusal out of src's bucket at now, and holds src
// back if that empties it.
func (g *Guard) refused(src Source, now qp.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.find(src, now, true)
	before := g.refill(e, now)
	e.tokens = max(0, before-1)
	if e.tokens >= 1 {
		return
	}
	if before >= 1 {
		g.cfg.OnHold()
	}
	end := int64(now.Add(time.Duration((1 - e.tokens) / g.cfg.Rate * float64(time.Second))))
	if end > g.until.Load() {
		g.until.Store(end)
	}
}

// find returns src's entry or, with add, makes one in place of a free or
// the least suspect entry of its set. g.mu is held.
func (g *Guard) find(src Source, now qp.Time, add bool) *entry {
	set := &g.sets[maphash.Comparable(g.seed, src)%uint64(len(g.sets))]
	var victim *entry
	for i := range set {
		e := &set[i]
		switch {
		case e.used && e.src == src:
			return e
		case !add:
		case !e.used:
			victim = e
		case victim == nil || victim.used && g.refill(e, now) > g.refill(victim, now):
			victim = e
		}
	}
	if victim != nil {
		*victim = entry{src: src, used: true, tokens: g.burst, at: now}
	}
	return victim
}
