// Package live is the live page of softnic serve --http: the device as a
// teacher puts it on a projector. Its QPs each with the QP state machine
// (RESET, INIT, RTR, RTS, SQD, SQE, ERR) and the current state lit, their
// PSNs and the work in flight; the regions with their keys, ranges and
// access; the counters as sparklines of their rates; and the last packets
// as a live ladder (package ladder), anomalies named.
//
// The page is one HTML file with its CSS and script inline, embedded in
// the binary: it loads nothing else, from the daemon or elsewhere. It reads
// the daemon by GET only: /events streams a snapshot as a Server-Sent Event
// twice a second, /state.json answers one snapshot (for scripts, and
// browsers without EventSource). A snapshot holds what softnic info, qp,
// mr and stat show, as their --json does, and the ladder drawn as SVG.
//
// A viewer cannot slow the daemon: the device writes its packets into a
// bounded Feed that overwrites its oldest; one goroutine turns them into
// the ladder and, while someone watches, into one snapshot per tick, which
// every viewer's stream sends when it can, skipping those it was too slow
// for; a stream stuck for 10 s is cut; at most MaxViewers watch at once.
package live

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
)

// Source is what the page shows of the daemon: each function returns a
// value for encoding/json, read by the page by the field names of softnic
// info, qp, mr and stat --json.
type Source struct {
	Info     func() any // softnic info's object
	QPs      func() any // {"rows": softnic qp's rows, "total": how many QPs there are}
	Regions  func() any // {"rows": softnic mr's rows, "total": how many regions there are}
	Counters func() any // softnic stat's object: counter names and values
	// Levels are the counters that are levels, such as connections_active,
	// rather than counts: the page draws their values, not their rates.
	Levels []string
}

// Tunables of the page.
const (
	Tick         = 500 * time.Millisecond // between two snapshots
	MaxViewers   = 32                     // event streams at once
	ShowArrows   = 20                     // the ladder's rows on the page
	ShowConvs    = 2                      // and its conversations, the most recent: each is 600 px wide
	KeepArrows   = 400                    // the ladder's memory, for its judgements
	ShowAnomaly  = 8                      // anomalies listed under the ladder
	writeTimeout = 10 * time.Second       // for one event to reach a viewer
)

//go:embed page.html
var page string

// Server serves the live page of one daemon.
type Server struct {
	src      Source
	feed     *Feed
	loopback bool
	page     []byte

	lmu     sync.Mutex // guards the ladder
	lad     *ladder.Ladder
	packets int    // given to ladders before lad
	skipped uint64 // packets the feed overwrote before the ladder saw them

	viewers atomic.Int32
	pmu     sync.Mutex
	event   []byte        // the last snapshot, as an event
	seq     uint64        // its number
	next    chan struct{} // closed when the next one is published

	quit chan struct{}
	done chan struct{}
}

// NewServer returns the live page of src, whose ladder shows the packets of
// feed. With loopbackOnly, it answers only requests addressed to a
// loopback name or address (the Host header): a web page elsewhere cannot
// read it through a DNS name rebound to 127.0.0.1. Run must be called to
// bring it to life.
func NewServer(src Source, feed *Feed, loopbackOnly bool) *Server {
	s := &Server{src: src, feed: feed, loopback: loopbackOnly, lad: newLadder(),
		next: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	s.page = []byte(strings.Replace(page, "/*LADDER STYLE*/", ladder.Style, 1))
	return s
}

func newLadder() *ladder.Ladder { return ladder.New(ladder.Options{Keep: KeepArrows}) }

// Run feeds the ladder and publishes snapshots until Close.
func (s *Server) Run() {
	defer close(s.done)
	t := time.NewTicker(Tick)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.take()
		if s.viewers.Load() > 0 {
			s.publish()
		}
	}
}

// Close stops Run and ends the event streams.
func (s *Server) Close() {
	close(s.quit)
	<-s.done
}

// take gives the ladder the packets of the feed. After a gap it starts a
// new ladder rather than judge across packets it did not see.
func (s *Server) take() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.feed.Take(func(n uint64) {
		s.skipped += n
		s.packets += s.lad.Packets()
		s.lad = newLadder()
	}, func(p *ladder.Packet) { s.lad.Add(p) })
}

// snapshot is what the page shows at one moment.
type snapshot struct {
	Time     time.Time  `json:"time"`
	Info     any        `json:"info"`
	QPs      any        `json:"qps"`
	Regions  any        `json:"regions"`
	Counters any        `json:"counters"`
	Levels   []string   `json:"levels"`
	Ladder   ladderView `json:"ladder"`
}

// ladderView is the ladder as the page shows it.
type ladderView struct {
	SVG       string           `json:"svg"`       // the last arrows (WriteSVG); "" before the first packet
	Packets   int              `json:"packets"`   // the packets the ladder has been given
	Skipped   uint64           `json:"skipped"`   // those the feed overwrote first, under a load the page cannot follow
	Summary   string           `json:"summary"`   // of the arrows shown
	Anomalies []ladder.Anomaly `json:"anomalies"` // the last ones named
}

// build takes a snapshot.
func (s *Server) build() *snapshot {
	snap := &snapshot{Time: time.Now(), Info: s.src.Info(), QPs: s.src.QPs(), Regions: s.src.Regions(),
		Counters: s.src.Counters(), Levels: s.src.Levels}
	s.lmu.Lock()
	defer s.lmu.Unlock()
	arrows, convs := shown(s.lad.Arrows(), s.lad.Conversations())
	v := &snap.Ladder
	v.Packets, v.Skipped = s.packets+s.lad.Packets(), s.skipped
	if len(arrows) > 0 {
		var b bytes.Buffer
		ladder.WriteSVG(&b, arrows, convs)
		v.SVG, v.Summary = b.String(), ladder.Summary(arrows)
	}
	an := s.lad.Anomalies()
	v.Anomalies = an[max(len(an)-ShowAnomaly, 0):]
	return snap
}

// shown picks the arrows the page draws: the last ShowArrows of the
// ShowConvs conversations most recently active, and those conversations.
// Conversations of data (RC, UC, UD) come before the connection manager's,
// which are shown only when fewer data conversations are active.
func shown(arrows []ladder.Arrow, convs []ladder.Conversation) ([]ladder.Arrow, []ladder.Conversation) {
	cm := map[int]bool{}
	for _, c := range convs {
		cm[c.ID] = c.Transport == "CM"
	}
	var data, mads []int // conversation IDs, the most recent first
	from := max(len(arrows)-ShowArrows*4, 0)
	for i := len(arrows) - 1; i >= from; i-- {
		id := arrows[i].Conv
		if ids := &data; !slices.Contains(data, id) && !slices.Contains(mads, id) {
			if cm[id] {
				ids = &mads
			}
			*ids = append(*ids, id)
		}
	}
	picked := append(data, mads...)[:min(len(data)+len(mads), ShowConvs)]
	var out []ladder.Arrow
	for _, a := range arrows[from:] {
		if slices.Contains(picked, a.Conv) {
			out = append(out, a)
		}
	}
	out = out[max(len(out)-ShowArrows, 0):]
	var cs []ladder.Conversation
	for _, c := range convs {
		if slices.ContainsFunc(out, func(a ladder.Arrow) bool { return a.Conv == c.ID }) {
			cs = append(cs, c)
		}
	}
	return out, cs
}

// publish takes a snapshot and hands it to the event streams.
func (s *Server) publish() {
	data, err := json.Marshal(s.build())
	if err != nil {
		return // the sources' values always encode
	}
	ev := make([]byte, 0, len(data)+32)
	ev = append(append(append(ev, "event: state\ndata: "...), data...), "\n\n"...)
	s.pmu.Lock()
	s.event, s.seq = ev, s.seq+1
	close(s.next)
	s.next = make(chan struct{})
	s.pmu.Unlock()
}

// current returns the last event, its number, and a channel closed when
// the next is published.
func (s *Server) current() ([]byte, uint64, chan struct{}) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.event, s.seq, s.next
}

// Handler returns the page's HTTP handler: GET only.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(s.page)
	})
	mux.HandleFunc("GET /state.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.build())
	})
	mux.HandleFunc("GET /events", s.events)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Everything the page needs is in it: nothing may be fetched from
		// elsewhere.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "+
			"img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		if s.loopback && !loopbackHost(r.Host) {
			http.Error(w, "softnic serve --http: this page answers requests for localhost or a loopback address only "+
				"(serve it with --http-allow-remote to show it to other hosts)", http.StatusMisdirectedRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a request's Host names this host by a
// loopback address or as localhost.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// events streams snapshots to one viewer, as Server-Sent Events, until
// the viewer leaves or the server closes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.viewers.Add(1) > MaxViewers {
		s.viewers.Add(-1)
		http.Error(w, "too many viewers of the live page", http.StatusServiceUnavailable)
		return
	}
	defer s.viewers.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var sent uint64
	for {
		ev, seq, next := s.current()
		if ev != nil && seq != sent {
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := w.Write(ev); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent = seq
		}
		select {
		case <-next:
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		}
	}
}
