package nic

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/qp"
)

// A peer that guesses rkeys fails R_Key checks, one per guess, and the
// transport tells the device of each (qp.Guard). The device gives every
// source a bucket of AccessLimits.Refusals refusals that refills at
// AccessLimits.Rate a second; a source whose bucket runs dry is held back
// until it has earned one refusal again: its requests that need an R_Key
// check are then dropped unanswered, good key or not, so that guessing
// slows from the thousands a second a peer can otherwise try to the rate.
// A peer that uses its keys as it should fails none: each failure also
// ends its RC connection.
//
// A source is a peer's IP address: RoCE peers send from many UDP ports, and
// a connected QP takes packets only from its peer's address. Programs
// attached to this device share its address, so for a QP connected to
// another QP of the device the source is the uid that owns the sending QP
// (or the device itself). The table is fixed when the device opens
// (AccessLimits.Sources, in sets of guardWays); a new source takes the
// place of the least suspect one of its set.
const guardWays = 4

// AccessLimits bound how fast one source may fail R_Key checks (guess
// keys); see Config.Access. Zero fields take the defaults noted.
type AccessLimits struct {
	// Refusals is how many R_Key checks a source may fail in a row before
	// it is held back (default 16).
	Refusals int
	// Rate is how many refusals a second a held source earns back
	// (default 2): the pace of a guesser's tries once held.
	Rate float64
	// Sources is how many sources the device remembers (default 256,
	// rounded up to a multiple of 4); a new one takes the place of the
	// least suspect.
	Sources int
}

// Defaults of AccessLimits.
const (
	DefaultAccessRefusals = 16
	DefaultAccessRate     = 2
	DefaultAccessSources  = 256
)

// WithDefaults returns l with its zero fields set to their defaults, and
// Sources rounded up to a multiple of 4.
func (l AccessLimits) WithDefaults() AccessLimits {
	l.Refusals = cmp.Or(l.Refusals, DefaultAccessRefusals)
	l.Rate = cmp.Or(l.Rate, DefaultAccessRate)
	l.Sources = (cmp.Or(l.Sources, DefaultAccessSources) + guardWays - 1) / guardWays * guardWays
	return l
}

// Check returns an error wrapping ErrInvalid if a limit is negative or
// past what the device keeps (a million sources).
func (l AccessLimits) Check() error {
	if l.Refusals < 0 || l.Rate < 0 || l.Sources < 0 || l.Sources > 1<<20 {
		return fmt.Errorf("access limits %+v: negative, or more than %d sources: %w", l, 1<<20, ErrInvalid)
	}
	return nil
}

// guardSource names a source of requests.
type guardSource struct {
	ip [16]byte
	// owner is 0 for a remote peer; for a QP of this device, 1 for one of
	// the device's own and 2+uid for an attached process's.
	owner uint32
}

type guardEntry struct {
	src    guardSource
	used   bool
	tokens float64 // refusals left
	at     qp.Time // when tokens was last brought up to date
}

// guard is the device's qp.Guard.
type guard struct {
	d     *embeddedDevice
	burst float64 // AccessLimits.Refusals
	rate  float64 // AccessLimits.Rate; tests slow it down
	// until is when the last hold ends (a qp.Time), 0 once it has: while it
	// is 0, Held answers from it alone.
	until atomic.Int64
	seed  maphash.Seed

	mu   sync.Mutex
	sets [][guardWays]guardEntry
}

// init sets the guard up for d with the limits l (WithDefaults applied).
func (g *guard) init(d *embeddedDevice, l AccessLimits) {
	g.d, g.seed, g.burst, g.rate = d, maphash.MakeSeed(), float64(l.Refusals), l.Rate
	g.sets = make([][guardWays]guardEntry, l.Sources/guardWays)
}

// refill brings e's bucket up to date at now and returns it.
func (g *guard) refill(e *guardEntry, now qp.Time) float64 {
	e.tokens = min(g.burst, e.tokens+now.Sub(e.at).Seconds()*g.rate)
	e.at = now
	return e.tokens
}

// Held implements qp.Guard.
func (g *guard) Held(qpn uint32, peer netip.AddrPort) bool {
	until := g.until.Load()
	if until == 0 {
		return false
	}
	now := g.d.now()
	if int64(now) >= until {
		g.until.CompareAndSwap(until, 0)
		return false
	}
	return g.held(g.d.guardSource(qpn, peer), now)
}

// Refused implements qp.Guard.
func (g *guard) Refused(qpn uint32, peer netip.AddrPort) {
	g.refused(g.d.guardSource(qpn, peer), g.d.now())
}

// held reports whether src is held back at now.
func (g *guard) held(src guardSource, now qp.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.find(src, now, false)
	return e != nil && g.refill(e, now) < 1
}

// refused takes one refusal out of src's bucket at now, and holds src
// back if that empties it.
func (g *guard) refused(src guardSource, now qp.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.find(src, now, true)
	before := g.refill(e, now)
	e.tokens = max(0, before-1)
	if e.tokens >= 1 {
		return
	}
	if before >= 1 {
		g.d.devc.inc(AccessHolds)
	}
	end := int64(now.Add(time.Duration((1 - e.tokens) / g.rate * float64(time.Second))))
	if end > g.until.Load() {
		g.until.Store(end)
	}
}

// find returns src's entry or, with add, makes one in place of a free or
// the least suspect entry of its set. g.mu is held.
func (g *guard) find(src guardSource, now qp.Time, add bool) *guardEntry {
	set := &g.sets[maphash.Comparable(g.seed, src)%uint64(len(g.sets))]
	var victim *guardEntry
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
		*victim = guardEntry{src: src, used: true, tokens: g.burst, at: now}
	}
	return victim
}

// guardSource returns the source of the requests QP qpn receives from its
// peer (see guard).
func (d *embeddedDevice) guardSource(qpn uint32, peer netip.AddrPort) guardSource {
	src := guardSource{ip: peer.Addr().As16()}
	q := d.lookup(qpn)
	if q == nil {
		return src
	}
	p := q.peer.Load()
	if p&peerLocal == 0 {
		return src
	}
	src.owner = 1
	if s := d.lookup(p &^ peerLocal); s != nil && s.queues != nil {
		src.owner = 2 + s.queues.Owner()
	}
	return src
}
