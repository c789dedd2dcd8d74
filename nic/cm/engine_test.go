package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The connection manager's engine on a simulated link with a fake clock:
// two engines, a and b, exchange the MADs their steps output, and the
// tests compare what crossed the link with what the IBTA and Linux's CM
// would send.

type cmSide struct {
	name string
	addr netip.AddrPort
	mtu  wire.MTU // the path MTU toward the other side
	e    *Engine
	cnt  Counts
}

type cmFlight struct {
	at   qp.Time
	from *cmSide
	mad  [mad.MADSize]byte
}

type cmLink struct {
	t       testing.TB
	now     qp.Time
	a, b    *cmSide
	flights []cmFlight
	// drop loses the MADs it returns true for.
	drop    func(from *cmSide, m *mad.MAD) bool
	log     []string
	sent    [][mad.MADSize]byte // every MAD put on the link, lost or not
	flushed []*ID
	results map[*ID]result // handshake outcomes not yet taken (result)
}

// result is the outcome of a handshake, as the events report it.
type result struct {
	rep *mad.REPFields
	err error
}

const cmLatency = 10 * time.Microsecond

func newCMSide(name, addr string, mtu wire.MTU, seed uint64) *cmSide {
	s := &cmSide{name: name, addr: netip.MustParseAddrPort(addr), mtu: mtu}
	s.e = New(seed, Limits{}, rand.New(rand.NewPCG(seed, seed)))
	return s
}

func newCMLink(t testing.TB) *cmLink {
	return &cmLink{
		t: t, results: make(map[*ID]result),
		a: newCMSide("a", "10.0.0.1:4791", wire.MTU4096, 1),
		b: newCMSide("b", "10.0.0.2:4791", wire.MTU4096, 2),
	}
}

func (l *cmLink) peer(s *cmSide) *cmSide {
	if s == l.a {
		return l.b
	}
	return l.a
}

// call runs one step of side s at the current time and puts its output on
// the link.
func (l *cmLink) call(s *cmSide, f func(e *Engine, now qp.Time, out *Output)) {
	out := l.step(s, f)
	l.emit(s, &out)
}

// step runs one step of side s at the current time, records its counts,
// flushes and handshake outcomes, and returns its output.
func (l *cmLink) step(s *cmSide, f func(e *Engine, now qp.Time, out *Output)) Output {
	var out Output
	f(s.e, l.now, &out)
	for k, n := range out.Counts {
		s.cnt[k] += n
	}
	l.flushed = append(l.flushed, out.Flush...)
	for _, ev := range out.Events {
		switch ev.Type {
		case EventReply:
			l.results[ev.ID] = result{rep: ev.ID.REP()}
		case EventEstablished, EventFailed:
			l.results[ev.ID] = result{err: ev.Err}
		}
	}
	return out
}

// result takes the handshake outcome of id, if it has one.
func (l *cmLink) result(id *ID) (result, bool) {
	r, ok := l.results[id]
	delete(l.results, id)
	return r, ok
}

func (l *cmLink) emit(s *cmSide, out *Output) {
	for _, m := range out.MADs {
		l.sent = append(l.sent, m.MAD)
		var mad mad.MAD
		if err := mad.Decode(m.MAD[:]); err != nil {
			l.t.Fatalf("%s sent an undecodable MAD: %v", s.name, err)
		}
		if m.Dst != l.peer(s).addr {
			l.t.Fatalf("%s sent %v to %v, not to its peer", s.name, mad.AttrID(), m.Dst)
		}
		line := s.name + "→" + l.peer(s).name + " " + mad.AttrID().String()
		if mad.REJ != nil {
			line += " (" + mad.REJ.Reason().String() + ")"
		}
		if l.drop != nil && l.drop(s, &mad) {
			l.log = append(l.log, line+" (lost)")
			continue
		}
		l.log = append(l.log, line)
		l.flights = append(l.flights, cmFlight{at: l.now.Add(cmLatency), from: s, mad: m.MAD})
	}
}

// dropFirst loses the first n MADs of attribute attr that side from sends.
func dropFirst(from *cmSide, attr mad.AttrID, n int) func(*cmSide, *mad.MAD) bool {
	return func(s *cmSide, m *mad.MAD) bool {
		if s == from && m.AttrID() == attr && n > 0 {
			n--
			return true
		}
		return false
	}
}

// run advances the link until done, asked whenever nothing more is due at
// the current time, returns true; it fails the test if nothing is left to
// happen or limit passes first.
func (l *cmLink) run(limit time.Duration, done func() bool) {
	l.t.Helper()
	end := l.now.Add(limit)
	for {
		if l.deliverDue() {
			continue
		}
		if done() {
			return
		}
		at, ok := l.next()
		if !ok {
			l.t.Fatalf("link idle before the scenario finished:\n%s", strings.Join(l.log, "\n"))
		}
		if at > end {
			l.t.Fatalf("scenario not finished after %v:\n%s", limit, strings.Join(l.log, "\n"))
		}
		l.now = max(l.now, at)
		for _, s := range []*cmSide{l.a, l.b} {
			l.call(s, func(e *Engine, now qp.Time, out *Output) { e.Tick(now, out) })
		}
	}
}

// settle runs until nothing is in flight and no timer is armed.
func (l *cmLink) settle(limit time.Duration) {
	l.t.Helper()
	l.run(limit, func() bool { _, busy := l.next(); return !busy })
}

func (l *cmLink) deliverDue() bool {
	slices.SortStableFunc(l.flights, func(x, y cmFlight) int { return int(x.at - y.at) })
	n := 0
	for n < len(l.flights) && l.flights[n].at <= l.now {
		f := l.flights[n]
		n++
		to := l.peer(f.from)
		var m mad.MAD
		if err := m.Decode(f.mad[:]); err != nil {
			l.t.Fatal(err)
		}
		l.call(to, func(e *Engine, now qp.Time, out *Output) { e.Receive(now, f.from.addr, to.mtu, &m, out) })
	}
	l.flights = l.flights[n:]
	return n > 0
}

func (l *cmLink) next() (qp.Time, bool) {
	t, ok := qp.Time(0), false
	consider := func(u qp.Time, armed bool) {
		if armed && (!ok || u < t) {
			t, ok = u, true
		}
	}
	for _, f := range l.flights {
		consider(f.at, true)
	}
	consider(l.a.e.Deadline())
	consider(l.b.e.Deadline())
	return t, ok
}

// expectLog compares what crossed the link with want.
func (l *cmLink) expectLog(want ...string) {
	l.t.Helper()
	if !slices.Equal(l.log, want) {
		l.t.Errorf("MADs on the link:\n  %s\nwant:\n  %s", strings.Join(l.log, "\n  "), strings.Join(want, "\n  "))
	}
}

// dialParams are a's REQ parameters: CM timeout 2^12 × 4.096 µs ≈ 16.8 ms
// plus an ACK timeout of 2^10 × 4.096 µs ≈ 4.2 ms per try.
func (l *cmLink) dialParams() *DialParams {
	return &DialParams{
		Peer: l.b.addr, Src: l.a.addr.Addr(), Port: 7471, QPN: 0x11, PSN: 0x123456, MTU: wire.MTU1024,
		Private: []byte("hello"), ResponderResources: 4, InitiatorDepth: 2, RetryCount: 7, RNRRetryCount: 7,
		ACKTimeout: 10, CMTimeout: 12, CMRetries: 3,
	}
}

func (l *cmLink) listen(backlog int) *Listener {
	l.t.Helper()
	ln, err := l.b.e.Listen(7471, backlog)
	if err != nil {
		l.t.Fatal(err)
	}
	return ln
}

func (l *cmLink) connect(p *DialParams) *ID {
	l.t.Helper()
	var id *ID
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) {
		var err error
		if id, err = e.Connect(now, p, out); err != nil {
			l.t.Fatal(err)
		}
	})
	return id
}

func (l *cmLink) acceptParams() *AcceptParams {
	return &AcceptParams{QPN: 0x22, PSN: 0x654321, Private: []byte("welcome"), ResponderResources: 2, InitiatorDepth: 4, RNRRetryCount: 6}
}

// handshake connects a to b: b accepts the first request, a answers the
// REP; it returns both sides' communications once both are established.
func (l *cmLink) handshake(limit time.Duration) (active, passive *ID) {
	l.t.Helper()
	ln := l.listen(8)
	active = l.connect(l.dialParams())
	l.run(limit, func() bool {
		if id := l.b.e.NextRequest(ln); id != nil {
			passive = id
			l.call(l.b, func(e *Engine, now qp.Time, out *Output) {
				if err := e.Accept(now, passive, l.acceptParams(), out); err != nil {
					l.t.Fatal(err)
				}
			})
		}
		if r, ok := l.result(active); ok {
			if r.err != nil {
				l.t.Fatalf("dial: %v", r.err)
			}
			l.call(l.a, func(e *Engine, _ qp.Time, out *Output) {
				if err := e.Establish(active, out); err != nil {
					l.t.Fatal(err)
				}
			})
		}
		return active.state == Established && passive != nil && passive.state == Established
	})
	return active, passive
}

func TestCMEngineHandshake(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(l *cmLink) func(*cmSide, *mad.MAD) bool
		log  []string
		// retries and dups are the retransmissions of a and b and the
		// duplicates each received.
		retries, dups [2]uint64
	}{
		{
			name: "clean",
			log:  []string{"a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse"},
		},
		{
			name: "REQ lost",
			drop: func(l *cmLink) func(*cmSide, *mad.MAD) bool {
				return dropFirst(l.a, mad.AttrConnectRequest, 1)
			},
			log:     []string{"a→b ConnectRequest (lost)", "a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse"},
			retries: [2]uint64{1, 0},
		},
		{
			// b sends its REP once: a's REQ timer runs out, and the
			// repeated REQ has b send the REP again, at once.
			name: "REP lost",
			drop: func(l *cmLink) func(*cmSide, *mad.MAD) bool {
				return dropFirst(l.b, mad.AttrConnectReply, 1)
			},
			log: []string{"a→b ConnectRequest", "b→a ConnectReply (lost)",
				"a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse"},
			retries: [2]uint64{1, 0},
			dups:    [2]uint64{0, 1},
		},
		{
			name: "REP lost twice",
			drop: func(l *cmLink) func(*cmSide, *mad.MAD) bool {
				return dropFirst(l.b, mad.AttrConnectReply, 2)
			},
			log: []string{"a→b ConnectRequest", "b→a ConnectReply (lost)", "a→b ConnectRequest", "b→a ConnectReply (lost)",
				"a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse"},
			retries: [2]uint64{2, 0},
			dups:    [2]uint64{0, 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newCMLink(t)
			if tc.drop != nil {
				l.drop = tc.drop(l)
			}
			active, passive := l.handshake(time.Second)
			l.settle(time.Second)
			l.expectLog(tc.log...)
			for i, s := range []*cmSide{l.a, l.b} {
				if got := s.cnt[TxRetries]; got != tc.retries[i] {
					t.Errorf("%s: cm_tx_retries = %d, want %d", s.name, got, tc.retries[i])
				}
				if got := s.cnt[RxDuplicates]; got != tc.dups[i] {
					t.Errorf("%s: cm_rx_duplicates = %d, want %d", s.name, got, tc.dups[i])
				}
				if got := s.cnt[Connected]; got != 1 {
					t.Errorf("%s: cm_established = %d, want 1", s.name, got)
				}
			}
			// What each side learnt of the other.
			if active.remote != passive.local || passive.remote != active.local {
				t.Errorf("communication IDs: a %#x→%#x, b %#x→%#x", active.local, active.remote, passive.local, passive.remote)
			}
			if active.remoteQPN != 0x22 || passive.remoteQPN != 0x11 || passive.localQPN != 0x22 {
				t.Errorf("QPNs: a knows %#x, b knows %#x and is %#x", active.remoteQPN, passive.remoteQPN, passive.localQPN)
			}
			req := passive.req
			if req.StartingPSN != 0x123456 || req.ResponderResources != 4 || req.InitiatorDepth != 2 ||
				req.PathMTU != wire.MTU1024 || req.PrimaryPath.LocalACKTimeout != 10 || req.MaxCMRetries != 3 ||
				!strings.HasPrefix(string(req.PrivateData[mad.CMAHeaderSize:]), "hello") {
				t.Errorf("b got REQ %+v", req)
			}
		})
	}
}

// The REP a dialer waits for carries the acceptor's choices.
func TestCMEngineREPFields(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(1)
	active := l.connect(l.dialParams())
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	passive := l.b.e.NextRequest(ln)
	ap := l.acceptParams()
	ap.SRQ = true
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, passive, ap, out) })
	var r result
	l.run(time.Second, func() bool { var ok bool; r, ok = l.result(active); return ok })
	if r.err != nil || r.rep == nil {
		t.Fatalf("result %+v", r)
	}
	rep := r.rep
	if rep.LocalQPN != 0x22 || rep.StartingPSN != 0x654321 || rep.ResponderResources != 2 || rep.InitiatorDepth != 4 ||
		rep.RNRRetryCount != 6 || rep.TargetACKDelay != TargetACKDelay || rep.LocalCAGUID != l.b.e.guid || !rep.SRQ ||
		string(rep.PrivateData[:7]) != "welcome" {
		t.Errorf("REP %+v", rep)
	}
	if active.state != RepRcvd {
		t.Errorf("dialer in %s after the REP, want REP_RCVD", active.state)
	}
}

func TestCMEngineNoListener(t *testing.T) {
	l := newCMLink(t)
	id := l.connect(l.dialParams())
	var r result
	l.run(time.Second, func() bool { var ok bool; r, ok = l.result(id); return ok })
	l.expectLog("a→b ConnectRequest", "b→a ConnectReject (invalid service ID)")
	var rej *RejectError
	if !errors.As(r.err, &rej) || rej.Reason != mad.RejectInvalidServiceID || !errors.Is(r.err, ErrConnRefused) {
		t.Fatalf("dial error %v, want a REJ for an invalid service ID", r.err)
	}
	if msg := r.err.Error(); !strings.Contains(msg, "10.0.0.2:4791") || !strings.Contains(msg, "port 7471") {
		t.Errorf("error %q does not name the address and port", msg)
	}
	if len(l.a.e.ids) != 0 || len(l.b.e.ids) != 0 {
		t.Errorf("communications left: a %d, b %d", len(l.a.e.ids), len(l.b.e.ids))
	}
}

// A REQ that never gets an answer is sent 1 + max CM retries times, each
// waiting the CM response timeout plus the path's ACK timeout.
func TestCMEngineTimeout(t *testing.T) {
	l := newCMLink(t)
	l.drop = func(*cmSide, *mad.MAD) bool { return true }
	p := l.dialParams()
	id := l.connect(p)
	var r result
	l.run(time.Minute, func() bool { var ok bool; r, ok = l.result(id); return ok })
	if !errors.Is(r.err, ErrTimedOut) || !strings.Contains(r.err.Error(), "10.0.0.2:4791 port 7471") {
		t.Fatalf("dial error %v, want a timeout naming 10.0.0.2:4791 port 7471", r.err)
	}
	if want := qp.Time(4 * (Duration(p.CMTimeout) + Duration(p.ACKTimeout))); l.now != want {
		t.Errorf("gave up at %v, want %v (4 tries)", time.Duration(l.now), time.Duration(want))
	}
	if len(l.log) != 4 || l.a.cnt[TxRetries] != 3 {
		t.Errorf("%d REQs sent, %d retries; want 4 and 3", len(l.log), l.a.cnt[TxRetries])
	}
	if len(l.a.e.ids) != 0 {
		t.Errorf("%d communications left", len(l.a.e.ids))
	}
}

func TestCMEngineRejectByListener(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(1)
	id := l.connect(l.dialParams())
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	req := l.b.e.NextRequest(ln)
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) {
		if err := e.Reject(now, req, mad.RejectConsumer, []byte("go away"), out); err != nil {
			t.Fatal(err)
		}
	})
	var r result
	l.run(time.Second, func() bool { var ok bool; r, ok = l.result(id); return ok })
	var rej *RejectError
	if !errors.As(r.err, &rej) || rej.Reason != mad.RejectConsumer || string(rej.PrivateData[:7]) != "go away" ||
		len(rej.PrivateData) != mad.REJPrivateDataSize || errors.Is(r.err, ErrConnRefused) {
		t.Fatalf("dial error %#v", r.err)
	}
	// The same REQ again (a retransmission that crossed the REJ) gets the
	// same REJ, not a second request for the listener.
	l.flights = append(l.flights, cmFlight{at: l.now, from: l.a, mad: reqOf(t, l, req)})
	l.settle(time.Second)
	l.expectLog("a→b ConnectRequest", "b→a ConnectReject (consumer reject)", "b→a ConnectReject (consumer reject)")
	if len(ln.backlog) != 0 {
		t.Error("the duplicate REQ reached the listener")
	}
}

// reqOf rebuilds the REQ b received for req.
func reqOf(t *testing.T, l *cmLink, req *ID) [mad.MADSize]byte {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, req.tid), REQ: *req.req}
	var b [mad.MADSize]byte
	if _, err := f.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	return b
}

// A duplicate of a REQ the application has not answered yet gets an MRA,
// and the requester then waits the MRA's service timeout before trying
// again, coming back while the request is still held; the application's
// late answer still connects, once.
func TestCMEngineDuplicateREQWhilePending(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(4)
	p := l.dialParams()
	id := l.connect(p)
	l.run(time.Second, func() bool { return l.a.cnt[TxRetries] == 1 && len(l.flights) == 0 })
	l.expectLog("a→b ConnectRequest", "a→b ConnectRequest", "b→a MsgRcptAck")
	if len(ln.backlog) != 1 || len(l.b.e.ids) != 1 || l.b.cnt[RxDuplicates] != 1 {
		t.Fatalf("b holds %d requests and %d communications after a duplicate REQ", len(ln.backlog), len(l.b.e.ids))
	}
	// b holds the request 4 × (16.8 + 4.2) + 16.8 ≈ 101 ms from its REQ
	// (handshakeTime); the MRA, 21 ms in, asks for 2^14 × 4.096 µs ≈ 67
	// ms, the most that with a's ACK timeout brings its next REQ within.
	req := l.b.e.NextRequest(ln)
	at, _ := l.a.e.Deadline()
	if want := l.now.Add(Duration(14) + Duration(p.ACKTimeout)); at != want || at > req.expires {
		t.Errorf("after the MRA a's timer is due at %v, want %v, before b drops the request at %v",
			time.Duration(at), time.Duration(want), time.Duration(req.expires))
	}
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, req, l.acceptParams(), out) })
	l.run(time.Second, func() bool {
		if _, ok := l.result(id); ok {
			l.call(l.a, func(e *Engine, _ qp.Time, out *Output) { e.Establish(id, out) })
		}
		return req.state == Established
	})
	if id.state != Established {
		t.Errorf("dialer in %s", id.state)
	}
}

// The MRA asks for rdma_cm's service timeout when the request is held
// longer than that and the requester's ACK timeout, and otherwise for the
// longest wait that ends before the request is dropped.
func TestMRAServiceTimeout(t *testing.T) {
	const ack = 14 // 67 ms
	for _, tc := range []struct {
		name string
		left time.Duration // until the request is dropped
		want uint8
	}{
		{"held longer than rdma_cm asks", Duration(MRAServiceTimeout) + Duration(ack), MRAServiceTimeout},
		{"held for days", 48 * time.Hour, MRAServiceTimeout},
		{"20 s (the default hold)", 20 * time.Second, 22}, // 17.2 s
		{"just short of 2^16 after the ACK timeout", Duration(16) + Duration(ack) - 1, 15},
		{"exactly 2^16 after it", Duration(16) + Duration(ack), 16},
		{"less than the ACK timeout", Duration(ack) / 2, 0},
		{"already past", -time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := qp.Time(time.Hour)
			id := &ID{req: &mad.REQFields{}, expires: now.Add(tc.left)}
			id.req.PrimaryPath.LocalACKTimeout = ack
			if got := mraServiceTimeout(now, id); got != tc.want {
				t.Errorf("service timeout %d (%v), want %d (%v)", got, Duration(got), tc.want, Duration(tc.want))
			}
		})
	}
}

// A REP lost after an MRA goes again in answer to the REQ the requester
// sends when the MRA's wait is over, which comes while the request is
// still held: the dialer connects, rather than waiting rdma_cm's 69 s for
// a request dropped long before.
func TestCMEngineREPLostAfterMRA(t *testing.T) {
	l := newCMLink(t)
	l.drop = dropFirst(l.b, mad.AttrConnectReply, 1)
	ln := l.listen(4)
	id := l.connect(l.dialParams())
	// The application is slow to answer: a sends its REQ again, and b
	// answers with an MRA.
	l.run(time.Second, func() bool { return l.a.cnt[TxRetries] == 1 && len(l.flights) == 0 })
	req := l.b.e.NextRequest(ln)
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, req, l.acceptParams(), out) })
	l.run(time.Second, func() bool {
		if _, ok := l.result(id); ok && id.state == RepRcvd {
			l.call(l.a, func(e *Engine, _ qp.Time, out *Output) { e.Establish(id, out) })
		}
		return req.state == Established && len(l.flights) == 0
	})
	l.expectLog("a→b ConnectRequest", "a→b ConnectRequest", "b→a MsgRcptAck", "b→a ConnectReply (lost)",
		"a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse")
	if id.state != Established || l.now > req.expires {
		t.Errorf("dialer %s at %v; b drops the request at %v", id.state, time.Duration(l.now), time.Duration(req.expires))
	}
}

func TestCMEngineDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		activeEnd bool // the dialer disconnects; else the acceptor
		drop      string
		log       []string
	}{
		{name: "dialer", activeEnd: true, log: []string{"a→b DisconnectRequest", "b→a DisconnectReply"}},
		{name: "acceptor", log: []string{"b→a DisconnectRequest", "a→b DisconnectReply"}},
		{name: "dialer, DREQ lost", activeEnd: true, drop: "DREQ",
			log: []string{"a→b DisconnectRequest (lost)", "a→b DisconnectRequest", "b→a DisconnectReply"}},
		{name: "acceptor, DREP lost", drop: "DREP",
			log: []string{"b→a DisconnectRequest", "a→b DisconnectReply (lost)", "b→a DisconnectRequest", "a→b DisconnectReply"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newCMLink(t)
			active, passive := l.handshake(time.Second)
			l.settle(time.Second)
			l.log = nil
			closer, closerSide, other := active, l.a, passive
			if !tc.activeEnd {
				closer, closerSide, other = passive, l.b, active
			}
			switch tc.drop {
			case "DREQ":
				l.drop = dropFirst(closerSide, mad.AttrDisconnectRequest, 1)
			case "DREP":
				l.drop = dropFirst(l.peer(closerSide), mad.AttrDisconnectReply, 1)
			}
			l.call(closerSide, func(e *Engine, now qp.Time, out *Output) {
				if !e.Disconnect(now, closer, out) {
					t.Fatal("disconnect sent no DREQ")
				}
			})
			l.run(time.Second, func() bool { return closer.state == Timewait })
			l.expectLog(tc.log...)
			if !closer.settled {
				t.Error("Close would still wait after the DREP")
			}
			if closer.err != nil || !errors.Is(other.err, ErrConnReset) {
				t.Errorf("ended with %v and %v; want nil for the closer, ECONNRESET for the peer", closer.err, other.err)
			}
			if len(l.flushed) != 1 || l.flushed[0] != other {
				t.Errorf("QPs flushed: %d, want the peer's", len(l.flushed))
			}
			l.settle(time.Second) // timewait ends
			if closer.state != Gone || other.state != Gone || len(l.a.e.ids)+len(l.b.e.ids) != 0 {
				t.Errorf("after timewait: %s and %s, %d communications left", closer.state, other.state, len(l.a.e.ids)+len(l.b.e.ids))
			}
			for _, s := range []*cmSide{l.a, l.b} {
				if got := s.cnt[Disconnected]; got != 1 {
					t.Errorf("%s: cm_disconnected = %d, want 1", s.name, got)
				}
			}
		})
	}
}

// A DREQ for no known connection gets a DREP, as Linux answers it; a REQ
// repeated after its connection ended gets REJ "stale connection".
func TestCMEngineStaleMessages(t *testing.T) {
	l := newCMLink(t)
	active, passive := l.handshake(time.Second)
	l.settle(time.Second)
	l.log = nil
	stale := reqOf(t, l, passive)
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) { e.Disconnect(now, active, out) })
	l.run(time.Second, func() bool { return passive.state == Timewait && len(l.flights) == 0 })
	l.flights = append(l.flights, cmFlight{at: l.now, from: l.a, mad: stale})
	l.run(time.Second, func() bool { return len(l.flights) == 0 })
	l.settle(time.Second)
	dreq := mad.MADFields{Header: mad.CMHeader(mad.AttrDisconnectRequest, 77)}
	dreq.DREQ = mad.DREQFields{LocalCommID: 0x1234, RemoteCommID: 0x5678, RemoteQPN: 0x99}
	var b [mad.MADSize]byte
	if _, err := dreq.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	l.flights = append(l.flights, cmFlight{at: l.now, from: l.a, mad: b})
	l.settle(time.Second)
	l.expectLog("a→b DisconnectRequest", "b→a DisconnectReply", "b→a ConnectReject (stale connection)", "b→a DisconnectReply")
}

// Beyond the backlog a REQ is dropped without an answer; its
// retransmission gets in once the application has taken the first.
func TestCMEngineBacklog(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(1)
	first := l.connect(l.dialParams())
	p := l.dialParams()
	p.QPN = 0x12
	second := l.connect(p)
	l.run(time.Second, func() bool { return len(l.flights) == 0 })
	if got := l.b.cnt[RxDropped]; len(ln.backlog) != 1 || got != 1 {
		t.Fatalf("backlog %d, cm_rx_dropped %d; want 1 and 1", len(ln.backlog), got)
	}
	if l.b.e.NextRequest(ln).remote != first.local {
		t.Fatal("the first REQ is not the one queued")
	}
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	if l.b.e.NextRequest(ln).remote != second.local {
		t.Fatal("the retransmitted second REQ is not the one queued")
	}
	// Both REQs are sent again at the same time: the first is a duplicate
	// of a request the application holds, which gets an MRA.
	l.expectLog("a→b ConnectRequest", "a→b ConnectRequest", "a→b ConnectRequest", "a→b ConnectRequest", "b→a MsgRcptAck")
}

// A softnic listener with a smaller MTU rejects a REQ asking for more and
// names its own in the ARI.
func TestCMEngineMTU(t *testing.T) {
	l := newCMLink(t)
	l.b.mtu = wire.MTU512
	l.listen(1)
	id := l.connect(l.dialParams())
	var r result
	l.run(time.Second, func() bool { var ok bool; r, ok = l.result(id); return ok })
	var rej *RejectError
	if !errors.As(r.err, &rej) || rej.Reason != mad.RejectInvalidMTU || !slices.Equal(rej.ARI, []byte{byte(wire.MTU512)}) {
		t.Fatalf("dial error %#v, want REJ invalid MTU naming 512", r.err)
	}
}

// Messages from an address that is not the connection's peer, or naming
// unknown communication IDs, change nothing.
func TestCMEngineIgnoresStrangers(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(1)
	id := l.connect(l.dialParams())
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	req := l.b.e.NextRequest(ln)
	rep := l.step(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, req, l.acceptParams(), out) })
	var m mad.MAD
	if err := m.Decode(rep.MADs[0].MAD[:]); err != nil {
		t.Fatal(err)
	}
	stranger := netip.MustParseAddrPort("10.0.0.3:4791")
	out := l.step(l.a, func(e *Engine, now qp.Time, out *Output) { e.Receive(now, stranger, l.a.mtu, &m, out) })
	if _, ok := l.result(id); ok || len(out.MADs) != 0 || id.state != ReqSent {
		t.Fatalf("a REP from %v moved the dialer to %s", stranger, id.state)
	}
	for _, attr := range []mad.AttrID{mad.AttrReadyToUse, mad.AttrConnectReply, mad.AttrDisconnectReply, mad.AttrMsgRcptAck, mad.AttrConnectReject} {
		f := mad.MADFields{Header: mad.CMHeader(attr, 1)}
		var b [mad.MADSize]byte
		f.Encode(b[:])
		if err := m.Decode(b[:]); err != nil {
			t.Fatal(err)
		}
		more := l.step(l.a, func(e *Engine, now qp.Time, out *Output) { e.Receive(now, l.b.addr, l.a.mtu, &m, out) })
		out.MADs = append(out.MADs, more.MADs...)
	}
	if len(out.MADs) != 0 || id.state != ReqSent || l.a.cnt[RxDropped] != 6 {
		t.Errorf("unknown messages: %d answers, state %s, cm_rx_dropped %d", len(out.MADs), id.state, l.a.cnt[RxDropped])
	}
}

// A dialer that gives up (its context ends) rejects with reason timeout
// and its CA GUID, and the listener's pending request is withdrawn.
func TestCMEngineAbort(t *testing.T) {
	l := newCMLink(t)
	ln := l.listen(1)
	id := l.connect(l.dialParams())
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	req := l.b.e.NextRequest(ln)
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) { e.Abort(now, id, out) })
	l.settle(time.Second)
	l.expectLog("a→b ConnectRequest", "a→b ConnectReject (timeout)")
	if req.state != Gone || !errors.Is(req.err, ErrConnReset) {
		t.Fatalf("withdrawn request: %s, %v", req.state, req.err)
	}
	var err error
	out := l.step(l.b, func(e *Engine, now qp.Time, out *Output) { err = e.Accept(now, req, l.acceptParams(), out) })
	if !errors.Is(err, ErrConnReset) || len(out.MADs) != 0 {
		t.Errorf("accepting a withdrawn request: %v", err)
	}
}

// Closing the device disconnects established connections (one DREQ, not
// waited for) and fails every handshake with ErrClosed.
func TestCMEngineShutdown(t *testing.T) {
	l := newCMLink(t)
	active, passive := l.handshake(time.Second)
	l.settle(time.Second)
	l.log = nil
	pending := l.connect(l.dialParams())
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) { e.Shutdown(now, out) })
	slices.Sort(l.log[1:]) // the engine visits its communications in no particular order
	l.expectLog("a→b ConnectRequest", "a→b ConnectReject (timeout)", "a→b DisconnectRequest")
	if r, _ := l.result(pending); !errors.Is(r.err, ErrClosed) || !errors.Is(active.err, ErrClosed) {
		t.Errorf("after shutdown: handshake %v, connection %v", r.err, active.err)
	}
	if len(l.a.e.ids) != 0 {
		t.Errorf("%d communications left", len(l.a.e.ids))
	}
	var out Output
	if _, err := l.a.e.Connect(l.now, l.dialParams(), &out); !errors.Is(err, ErrClosed) {
		t.Errorf("connect after shutdown: %v", err)
	}
	l.run(time.Second, func() bool { return passive.state == Timewait })
	if !errors.Is(passive.err, ErrConnReset) {
		t.Errorf("peer ended with %v", passive.err)
	}
}

// FuzzCMEngine hands an engine that listens and has an established
// connection arbitrary MADs from its peer and from a stranger: nothing
// panics, every answer is a MAD that decodes, sent to the sender, and the
// engine's tables stay consistent. The corpus starts with the MADs of a
// whole connection's life.
func FuzzCMEngine(f *testing.F) {
	l := newCMLink(f)
	active, _ := l.handshake(time.Second)
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) { e.Disconnect(now, active, out) })
	l.settle(time.Second)
	p := l.dialParams()
	p.Port = 9999 // no listener: REJ
	l.connect(p)
	l.settle(time.Second)
	for _, sent := range l.sent {
		f.Add(sent[:], false)
		f.Add(sent[:], true)
	}
	f.Fuzz(func(t *testing.T, b []byte, stranger bool) {
		var m mad.MAD
		if m.Decode(b) != nil {
			return
		}
		l := newCMLink(t)
		l.handshake(time.Second)
		l.settle(time.Second)
		from := l.a.addr
		if stranger {
			from = netip.MustParseAddrPort("10.0.0.9:4791")
		}
		var out Output
		l.b.e.Receive(l.now, from, l.b.mtu, &m, &out)
		l.b.e.Tick(l.now.Add(time.Hour), &out)
		for _, answer := range out.MADs {
			var a mad.MAD
			if err := a.Decode(answer.MAD[:]); err != nil || answer.Dst != from && answer.Dst != l.a.addr {
				t.Fatalf("answer to %v: %v to %v", from, err, answer.Dst)
			}
		}
		for local, id := range l.b.e.ids {
			if id.local != local || id.state == Gone {
				t.Fatalf("table holds %#x as %#x in %s", local, id.local, id.state)
			}
		}
		for key, id := range l.b.e.remotes {
			if key.comm != id.remote || key.peer != id.remoteSrc || l.b.e.ids[id.local] != id {
				t.Fatalf("remote table entry %+v for %#x is stale", key, id.local)
			}
		}
	})
}

func TestCMPeerAddr(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.0.1:40000")
	at4791 := netip.MustParseAddrPort("10.0.0.1:4791")
	for _, tc := range []struct {
		name string
		guid uint64
		want netip.AddrPort
	}{
		{"softnic device", GUID(src), src},
		{"another softnic device", GUID(netip.MustParseAddrPort("[fd00::7]:0")), src},
		{"rxe, GUID from MAC 52:54:00:77:00:0c (rping.pcap)", 0x505400fffe77000c, at4791},
		{"rxe whose MAC starts 00:73:6e", 0x02736efffe000001, at4791},
		{"ConnectX GUID", 0x0c42a10300a1b2c3, at4791},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := peerAddr(src, tc.guid); got != tc.want {
				t.Errorf("peerAddr(%v, %#x) = %v, want %v", src, tc.guid, got, tc.want)
			}
		})
	}
}

// The RTU is lost: the acceptor does not send its REP again (the
// requester, established, would not answer it), and the first request on
// its QP establishes the connection instead, as the QP's
// communication-established event does in Linux. Without one, the
// acceptor gives up after the handshake time, without a word.
func TestCMEngineRTULost(t *testing.T) {
	for _, firstRequest := range []bool{true, false} {
		t.Run(fmt.Sprintf("first request %v", firstRequest), func(t *testing.T) {
			l := newCMLink(t)
			l.drop = dropFirst(l.a, mad.AttrReadyToUse, 1)
			ln := l.listen(1)
			active := l.connect(l.dialParams())
			var passive *ID
			l.run(time.Second, func() bool {
				if id := l.b.e.NextRequest(ln); id != nil {
					passive = id
					l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, passive, l.acceptParams(), out) })
				}
				if _, ok := l.result(active); ok {
					l.call(l.a, func(e *Engine, _ qp.Time, out *Output) { e.Establish(active, out) })
				}
				return active.state == Established && len(l.flights) == 0
			})
			if firstRequest {
				l.call(l.b, func(e *Engine, _ qp.Time, out *Output) { e.CommEstablished(passive, out) })
				if r, ok := l.result(passive); !ok || r.err != nil || passive.state != Established {
					t.Fatalf("after the first request: %s, result %v", passive.state, r.err)
				}
			}
			l.settle(time.Minute)
			l.expectLog("a→b ConnectRequest", "b→a ConnectReply", "a→b ReadyToUse (lost)")
			if firstRequest {
				if passive.state != Established || l.b.cnt[Connected] != 1 || l.b.e.halfOpen != 0 {
					t.Errorf("acceptor %s, cm_established %d, %d half-open", passive.state, l.b.cnt[Connected], l.b.e.halfOpen)
				}
				return
			}
			r, _ := l.result(passive)
			if !errors.Is(r.err, ErrTimedOut) || passive.state != Gone || l.b.cnt[HandshakeTimeouts] != 1 ||
				len(l.b.e.ids) != 0 || l.b.e.halfOpen != 0 || len(l.b.e.halfOpenBy) != 0 {
				t.Errorf("acceptor without RTU: %s, %v, cm_handshake_timeouts %d, %d communications, %d half-open",
					passive.state, r.err, l.b.cnt[HandshakeTimeouts], len(l.b.e.ids), l.b.e.halfOpen)
			}
			if want := qp.Time(l.b.e.handshakeTime(passive.req)); l.now < want || l.now > want+qp.Time(time.Millisecond) {
				t.Errorf("acceptor gave up at %v, want %v", time.Duration(l.now), time.Duration(want))
			}
		})
	}
}

// A REQ from an address that never answers (spoofed) brings that address
// one REP per REQ it sends, and nothing more: then, after the handshake
// time, the request is dropped, counted.
func TestCMEngineNoAmplification(t *testing.T) {
	for _, reqs := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d REQs", reqs), func(t *testing.T) {
			l := newCMLink(t)
			l.drop = func(from *cmSide, _ *mad.MAD) bool { return from == l.b } // a never hears b
			ln := l.listen(1)
			p := l.dialParams()
			p.CMRetries = uint8(reqs - 1)
			l.connect(p)
			l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
			req := l.b.e.NextRequest(ln)
			l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, req, l.acceptParams(), out) })
			l.settle(time.Minute)
			var fromA, fromB int
			for _, line := range l.log {
				if strings.HasPrefix(line, "a→b") {
					fromA++
				} else {
					fromB++
				}
			}
			if fromA != reqs || fromB != reqs {
				t.Errorf("%d MADs to b brought %d from b; want %d each:\n%s", fromA, fromB, reqs, strings.Join(l.log, "\n"))
			}
			if got := l.b.cnt[HandshakeTimeouts]; got != 1 || len(l.b.e.ids) != 0 || l.b.e.halfOpen != 0 {
				t.Errorf("cm_handshake_timeouts %d, %d communications, %d half-open; want 1, 0, 0", got, len(l.b.e.ids), l.b.e.halfOpen)
			}
		})
	}
}

// A REQ asking for the longest timeouts and the most retries the wire
// carries is held no longer than CMLimits.Handshake, and the waits the
// engine takes from it later are bounded too.
func TestCMEngineHugeTimeouts(t *testing.T) {
	l := newCMLink(t)
	l.drop = func(from *cmSide, _ *mad.MAD) bool { return from == l.b }
	ln := l.listen(1)
	p := l.dialParams()
	p.CMTimeout, p.ACKTimeout, p.CMRetries = 31, 31, 15
	l.connect(p)
	l.run(time.Second, func() bool { return len(ln.backlog) == 1 })
	req := l.b.e.NextRequest(ln)
	if req.timeout > 2*Duration(MaxHonouredTimeout) || req.ackTimeout > MaxHonouredTimeout {
		t.Errorf("the acceptor would wait %v per DREQ and a timewait of %v", req.timeout, Duration(req.ackTimeout))
	}
	at, ok := l.b.e.Deadline()
	if !ok || at != l.now.Add(DefaultHandshake) {
		t.Errorf("the request is held until %v, want %v after the REQ", time.Duration(at), DefaultHandshake)
	}
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, req, l.acceptParams(), out) })
	l.run(time.Minute, func() bool { return req.state == Gone })
	if l.now > qp.Time(DefaultHandshake+time.Second) {
		t.Errorf("the request was dropped at %v", time.Duration(l.now))
	}
}

// Requests beyond the half-open limits are rejected with "no resources",
// and counted; the limit per source keeps one address from taking every
// slot, and slots come back when their requests end.
func TestCMEngineHalfOpenLimits(t *testing.T) {
	l := newCMLink(t)
	l.b.e.lim = Limits{HalfOpen: 5, HalfOpenPerSource: 3, Handshake: time.Second}
	ln := l.listen(16)
	other := netip.MustParseAddrPort("10.0.0.7:4791") // another requester, as b sees it
	req := func(from netip.AddrPort, comm uint32) mad.RejectReason {
		t.Helper()
		f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, uint64(comm))}
		f.REQ = mad.REQFields{
			LocalCommID: comm, ServiceID: mad.RDMACMServiceID(mad.PortSpaceTCP, 7471), LocalQPN: 0x11,
			PathMTU: wire.MTU1024, PKey: 0xFFFF, MaxCMRetries: 15, LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20,
		}
		cma := mad.NewCMAHeader(netip.AddrPortFrom(from.Addr(), 40000), l.b.addr.Addr())
		mad.CMAHeader(f.REQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
		var b [mad.MADSize]byte
		if _, err := f.Encode(b[:]); err != nil {
			t.Fatal(err)
		}
		var m mad.MAD
		if err := m.Decode(b[:]); err != nil {
			t.Fatal(err)
		}
		out := l.step(l.b, func(e *Engine, now qp.Time, out *Output) { e.Receive(now, from, l.b.mtu, &m, out) })
		if len(out.MADs) == 0 {
			return 0
		}
		var a mad.MAD
		if err := a.Decode(out.MADs[0].MAD[:]); err != nil || a.REJ == nil {
			t.Fatalf("answer to REQ %#x: %v", comm, err)
		}
		return a.REJ.Reason()
	}
	for i := range uint32(4) {
		want := mad.RejectReason(0)
		if i == 3 {
			want = mad.RejectNoResources
		}
		if got := req(l.a.addr, 100+i); got != want {
			t.Errorf("REQ %d from a: answer %v, want %v", i, got, want)
		}
	}
	for i := range uint32(3) {
		want := mad.RejectReason(0)
		if i == 2 {
			want = mad.RejectNoResources // 5 in all
		}
		if got := req(other, 200+i); got != want {
			t.Errorf("REQ %d from %v: answer %v, want %v", i, other, got, want)
		}
	}
	if got := l.b.cnt[RejectedBusy]; got != 2 || len(ln.backlog) != 5 || l.b.e.halfOpen != 5 {
		t.Errorf("cm_rejected_busy %d, backlog %d, %d half-open; want 2, 5, 5", got, len(ln.backlog), l.b.e.halfOpen)
	}
	// The application takes one of a's and accepts it: still half-open
	// until the RTU. The others end when the handshake time runs out.
	first := l.b.e.NextRequest(ln)
	l.step(l.b, func(e *Engine, now qp.Time, out *Output) { e.Accept(now, first, l.acceptParams(), out) })
	if got := req(l.a.addr, 300); got != mad.RejectNoResources {
		t.Errorf("REQ from a while its 3 wait: %v", got)
	}
	l.now = l.now.Add(time.Second)
	l.step(l.b, func(e *Engine, now qp.Time, out *Output) { e.Tick(now, out) })
	if l.b.e.halfOpen != 0 || len(l.b.e.halfOpenBy) != 0 || l.b.cnt[HandshakeTimeouts] != 5 {
		t.Fatalf("after the handshake time: %d half-open (%v), cm_handshake_timeouts %d", l.b.e.halfOpen, l.b.e.halfOpenBy, l.b.cnt[HandshakeTimeouts])
	}
	if got := req(l.a.addr, 400); got != 0 {
		t.Errorf("REQ from a after its requests ended: %v", got)
	}
}
