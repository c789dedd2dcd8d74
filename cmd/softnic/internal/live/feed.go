package live

import (
	"strings"
	"sync"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// FeedSize is how many packets a Feed holds between two drains: the live
// ladder shows at most that many packets per tick.
const FeedSize = 1024

// feedBytes is how much of each packet a Feed keeps: every header, and all
// of a connection manager MAD (UD, 256 bytes of payload). What a longer
// packet carries past it is payload, which the ladder does not read: it is
// given zeros of the packet's length instead.
const feedBytes = 512

// Feed holds the packets a device traces until the live page's ladder
// takes them. Trace, on the device's goroutines, copies at most feedBytes
// of a packet into a ring of FeedSize slots under a mutex held for that
// copy alone; when the ring is full the oldest packet is overwritten and
// counted, so however far behind the page falls, the device never waits.
type Feed struct {
	mu    sync.Mutex
	cur   *ring  // filled by Trace
	spare *ring  // drained by Take, outside the lock
	buf   []byte // Take's: a long packet rebuilt
}

type ring struct {
	slots       []slot
	start, n    int
	overwritten uint64
}

// slot is one packet of a ring.
type slot struct {
	time time.Time
	env  wire.Envelope
	note string
	lost bool
	bad  bool // its receiver found its ICRC bad (or the fault injector broke it)
	len  int  // the packet's length
	kept int  // bytes of data held
	data [feedBytes]byte
}

// NewFeed returns an empty Feed.
func NewFeed() *Feed {
	return &Feed{cur: &ring{slots: make([]slot, FeedSize)}, spare: &ring{slots: make([]slot, FeedSize)}}
}

// Trace is a nic.Config.Trace function that feeds f. A packet a device
// sends to itself (two of its QPs connected to each other) is traced as
// sent and again as received, and one the fault injector delays as held
// and again as released; f keeps each once.
func (f *Feed) Trace(p *nic.TracePacket) {
	if p.Dir == nic.Received && p.Env.Src == p.Env.Dst || p.Dir == nic.Sent && p.Note == nic.NoteFaultDelayed {
		return // the packet's other trace is kept: a delayed one is traced again when it leaves
	}
	f.mu.Lock()
	r := f.cur
	if r.n == len(r.slots) {
		r.start = (r.start + 1) % len(r.slots)
		r.overwritten++
	} else {
		r.n++
	}
	s := &r.slots[(r.start+r.n-1)%len(r.slots)]
	s.time, s.env, s.note, s.len = p.Time, p.Env, p.Note, len(p.Data)
	s.lost = p.Dir == nic.Sent && p.Note == nic.NoteFaultDropped
	s.bad = strings.Contains(p.Note, "ICRC") || strings.Contains(p.Note, "corrupted")
	s.kept = copy(s.data[:], p.Data)
	f.mu.Unlock()
}

// Take calls add with each packet traced since the last Take, oldest
// first. If packets were overwritten before it could take them, it first
// calls gap with their number: the packets that follow are not those that
// came before. The packets' data is valid during the call only. One
// goroutine takes.
func (f *Feed) Take(gap func(overwritten uint64), add func(*ladder.Packet)) {
	f.mu.Lock()
	r := f.cur
	f.cur, f.spare = f.spare, r
	f.mu.Unlock()
	if r.overwritten > 0 {
		gap(r.overwritten)
	}
	for i := range r.n {
		s := &r.slots[(r.start+i)%len(r.slots)]
		data := s.data[:s.kept]
		if s.kept < s.len {
			if cap(f.buf) < s.len {
				f.buf = make([]byte, s.len)
			}
			data = f.buf[:s.len]
			clear(data[copy(data, s.data[:s.kept]):])
		}
		icrc := wire.ICRCOK
		if s.bad {
			icrc = wire.ICRCBad
		}
		add(&ladder.Packet{Time: s.time, Env: s.env, Data: data, ICRC: icrc, Lost: s.lost, Note: s.note})
	}
	r.start, r.n, r.overwritten = 0, 0, 0
}
