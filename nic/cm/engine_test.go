package cm

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The connection manager's engine on a simulated link with a fake clock:
// two engines, a and b, exchange the MADs their steps output, and the
// tests compare what crossed the link with what the IBTA and Linux's CM
// would send. The main scenarios are transcripts (transcript_test.go,
// testdata/*.txt) on this link; the tests here are those that look
// inside the engine or feed it MADs no engine sends.

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
	results map[*ID]result      // handshake outcomes not yet taken (result)
	// watch, if set, sees every step's output before its MADs go on the
	// link, and onSend every MAD put on it (the transcripts print them).
	watch  func(s *cmSide, out *Output)
	onSend func(from *cmSide, m *mad.MAD, tclass uint8, lost bool)
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

// step runs one step of side s at the current time, records its counts
// and handshake outcomes, shows its output to watch, and returns it.
func (l *cmLink) step(s *cmSide, f func(e *Engine, now qp.Time, out *Output)) Output {
	var out Output
	f(s.e, l.now, &out)
	for k, n := range out.Counts {
		s.cnt[k] += n
	}
	if l.watch != nil {
		l.watch(s, &out)
	}
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

// emit puts a step's MADs on the link. An engine visits its
// communications in no fixed order (Tick, Shutdown), so the MADs of one
// step leave sorted by their bytes: a scenario runs the same every time.
func (l *cmLink) emit(s *cmSide, out *Output) {
	slices.SortStableFunc(out.MADs, func(x, y MAD) int { return bytes.Compare(x.MAD[:], y.MAD[:]) })
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
		lost := l.drop != nil && l.drop(s, &mad)
		if l.onSend != nil {
			l.onSend(s, &mad, m.TrafficClass, lost)
		}
		if lost {
			l.log = append(l.log, line+" (lost)")
			continue
		}
		l.log = append(l.log, line)
		l.flights = append(l.flights, cmFlight{at: l.now.Add(cmLatency), from: s, mad: m.MAD})
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
	ln, err := l.b.e.Listen(mad.PortSpaceTCP, 7471, backlog)
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

// reqOf rebuilds the REQ b received for req.
func reqOf(t *testing.T, l *cmLink, req *ID) [mad.MADSize]byte {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, req.tid), REQ: *req.req}
	var b [mad.MADSize]byte
	if _, err := f.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	return b
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

// heldPort is the port of FuzzCMEngine's held listeners.
const heldPort = 7472

// FuzzCMEngine hands an engine that listens and has an established
// connection arbitrary MADs from its peer and from a stranger: nothing
// panics, every answer is a MAD that decodes, sent to the sender, and the
// engine's tables stay consistent. The corpus starts with the MADs of a
// whole connection's life. Its listeners on heldPort are held
// (Engine.Hold): they take no request.
func FuzzCMEngine(f *testing.F) {
	l := newCMLink(f)
	active, _ := l.handshake(time.Second)
	l.call(l.a, func(e *Engine, now qp.Time, out *Output) { e.Disconnect(now, active, out) })
	l.settle(time.Second)
	p := l.dialParams()
	for _, port := range []uint16{9999, heldPort} { // no listener: REJ
		p.Port = port
		l.connect(p)
		l.settle(time.Second)
	}
	// A resolution answered, and one for no listener.
	ul, err := l.b.e.ListenUD(mad.PortSpaceUDP, 7174, 4)
	if err != nil {
		f.Fatal(err)
	}
	for _, port := range []uint16{9999, 7174} {
		l.call(l.a, func(e *Engine, now qp.Time, out *Output) {
			e.Resolve(now, &ResolveParams{Peer: l.b.addr, Src: l.a.addr.Addr(), Port: port, CMTimeout: 12, CMRetries: 3}, out)
		})
	}
	l.run(time.Second, func() bool { return ul.Backlog() > 0 })
	l.call(l.b, func(e *Engine, now qp.Time, out *Output) {
		e.AcceptUD(now, e.NextRequest(ul), 0x22, RDMAUDPQKey, nil, out)
	})
	l.settle(time.Minute)
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
		if _, err := l.b.e.ListenUD(mad.PortSpaceUDP, 7174, 4); err != nil {
			t.Fatal(err)
		}
		held, err := l.b.e.Listen(mad.PortSpaceTCP, heldPort, 4)
		if err != nil {
			t.Fatal(err)
		}
		uheld, err := l.b.e.ListenUD(mad.PortSpaceUDP, heldPort, 4)
		if err != nil {
			t.Fatal(err)
		}
		l.b.e.Hold(held)
		l.b.e.Hold(uheld)
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
		if held.Backlog() != 0 || uheld.Backlog() != 0 {
			t.Fatalf("held listeners took requests (backlogs %d, %d)", held.Backlog(), uheld.Backlog())
		}
		for local, id := range l.b.e.ids {
			if id.local != local || id.state == Gone {
				t.Fatalf("table holds %#x as %#x in %s", local, id.local, id.state)
			}
		}
		for _, m := range []map[remoteKey]*ID{l.b.e.remotes, l.b.e.sidrs} {
			for key, id := range m {
				if key.comm != id.remote || key.peer != id.remoteSrc || l.b.e.ids[id.local] != id {
					t.Fatalf("remote table entry %+v for %#x is stale", key, id.local)
				}
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

func TestSIDRPeer(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.0.1:40000")
	for _, tc := range []struct {
		name string
		resv uint16
		want netip.AddrPort
	}{
		{"softnic's mark", sidrMark, src},
		{"reserved 0, as Linux sends it", 0, netip.MustParseAddrPort("10.0.0.1:4791")},
		{"another value", 0x1234, netip.MustParseAddrPort("10.0.0.1:4791")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sidrPeer(src, tc.resv); got != tc.want {
				t.Errorf("sidrPeer(%v, %#x) = %v, want %v", src, tc.resv, got, tc.want)
			}
		})
	}
}

// TestListenFreePort: a listener of port 0 gets a port of Linux's
// ephemeral range that no listener of its port space has, each its own,
// which an explicit Listen then finds busy; another port space's port of
// the same number is free.
func TestListenFreePort(t *testing.T) {
	e := New(1, Limits{}, rand.New(rand.NewPCG(1, 1)))
	taken := map[uint16]bool{}
	for i := range 64 {
		l, err := e.Listen(mad.PortSpaceTCP, 0, 1)
		if err != nil {
			t.Fatalf("listener %d of port 0: %v", i, err)
		}
		p := l.Port()
		if p < firstPort || p > lastPort || taken[p] {
			t.Fatalf("listener %d of port 0 got port %d (taken before: %v), want a free one of %d-%d", i, p, taken[p], firstPort, lastPort)
		}
		taken[p] = true
		if _, err := e.Listen(mad.PortSpaceTCP, p, 1); !errors.Is(err, mr.ErrBusy) {
			t.Errorf("Listen on port %d, taken by port 0's listener: %v, want ErrBusy", p, err)
		}
		if l, err := e.ListenUD(mad.PortSpaceUDP, p, 1); err != nil || l.Port() != p {
			t.Errorf("ListenUD on port %d of the UDP port space: port %v, %v", p, l, err)
		}
	}
}
