package qp_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/wirefmt"
)

// This file is the test bench of the transport: hosts with a region table,
// CQs and one QP each, joined by a simulated link with a fake clock. Packets
// travel as real encoded RoCEv2 with sealed ICRCs, so a corrupted bit is
// dropped by the receiver's ICRC check, as on the NIC.

const (
	regionSize = 1 << 20
	testMTU    = 1024
)

type host struct {
	name   string
	addr   netip.AddrPort
	mem    *mr.Table
	pd     mr.PDHandle
	cq     *qp.CQ // send and receive completions
	qp     *qp.QP
	buf    []byte // a registered region, remote read/write/atomic
	region *mr.Region
	wcs    []verbs.WC // completions polled so far
	cnt    *verbs.Counters
}

func newHost(t testing.TB, name string, ip string, typ verbs.Type, qpn uint32, cfg qp.Config) *host {
	t.Helper()
	h := newNode(t, name, ip)
	h.attach(t, typ, qpn, cfg)
	return h
}

// newNode returns a host without a QP yet: its region table, protection
// domain, CQ and registered region.
func newNode(t testing.TB, name string, ip string) *host {
	t.Helper()
	h := &host{name: name, addr: netip.MustParseAddrPort(ip + ":4791")}
	h.mem = mr.NewTable(mr.Config{})
	var err error
	if h.pd, err = h.mem.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if h.cq, err = qp.NewCQ(4096); err != nil {
		t.Fatal(err)
	}
	h.buf = make([]byte, regionSize)
	h.region, err = h.mem.Register(h.pd, h.buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic|mr.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.reset(t)
		if err := h.mem.Deregister(h.region); err != nil {
			t.Error(err)
		}
		h.mem.Close()
	})
	return h
}

// sibling returns a second host on h's node: another QP sharing h's
// address, region table, protection domain, CQ and region.
func (h *host) sibling(t testing.TB, name string, typ verbs.Type, qpn uint32, cfg qp.Config) *host {
	t.Helper()
	s := &host{name: name, addr: h.addr, mem: h.mem, pd: h.pd, cq: h.cq, buf: h.buf, region: h.region}
	t.Cleanup(func() { s.reset(t) })
	s.attach(t, typ, qpn, cfg)
	return s
}

// attach creates the host's QP.
func (h *host) attach(t testing.TB, typ verbs.Type, qpn uint32, cfg qp.Config) {
	t.Helper()
	cfg.Type, cfg.PD, cfg.Memory = typ, h.pd, h.mem
	if cfg.SendCQ == nil {
		cfg.SendCQ, cfg.RecvCQ = h.cq, h.cq
	}
	if cfg.Counters == nil {
		cfg.Counters = new(verbs.Counters)
	}
	h.cnt = cfg.Counters
	var err error
	if h.qp, err = qp.New(qpn, cfg); err != nil {
		t.Fatal(err)
	}
}

// reset moves the host's QP to RESET, which drops its references to the
// region's memory.
func (h *host) reset(t testing.TB) {
	if h.qp != nil {
		if err := h.qp.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState); err != nil {
			t.Error(err)
		}
	}
}

// va returns the remote address of offset off of the host's region.
func (h *host) va(off uint64) uint64 { return h.region.Addr() + off }

// sge returns an SGE for n bytes at offset off of the host's region.
func (h *host) sge(off uint64, n uint32) verbs.SGE {
	return verbs.SGE{Addr: h.region.Addr() + off, Length: n, LKey: h.region.LKey()}
}

func (h *host) counter(c verbs.CounterID) uint64 { return h.cnt.Get(c) }

// poll moves the host's new completions into h.wcs and returns them.
func (h *host) poll() []verbs.WC {
	var buf [64]verbs.WC
	start := len(h.wcs)
	for {
		n, err := h.cq.Poll(buf[:])
		if n == 0 || err != nil {
			break
		}
		h.wcs = append(h.wcs, buf[:n]...)
	}
	return h.wcs[start:]
}

// onlyWC polls h and returns its one new completion; there must be exactly
// one.
func (h *host) onlyWC(t testing.TB) verbs.WC {
	t.Helper()
	wcs := h.poll()
	if len(wcs) != 1 {
		t.Fatalf("%s has %d new completions %v, want one", h.name, len(wcs), wcs)
	}
	return wcs[0]
}

type flight struct {
	at   qp.Time
	seq  int
	to   *host
	data []byte
	env  wire.Envelope
}

type sim struct {
	t       testing.TB
	now     qp.Time
	a, b    *host
	latency time.Duration
	inj     *netem.Injector
	flights []flight
	// sorted says flights is in delivery order.
	sorted bool
	seq    int
	// drop, when set, loses the packets it returns true for: scenario tests
	// use it to lose a chosen PSN.
	drop func(from *host, p *wire.Packet) bool
	// path, when set, shapes the link instead of latency and inj.
	path    *path
	trace   strings.Builder
	tracing bool
	badICRC int
	txbuf   []byte
	pkt     wire.Packet
	// psnShift turns a's PSNs into the ones the golden transcripts were
	// recorded with (a starting at goldenPSNA); show is scratch for it.
	psnShift uint32
	show     []byte
	showPkt  wire.Packet
}

func newSim(t testing.TB, a, b *host) *sim {
	return &sim{t: t, a: a, b: b, latency: 5 * time.Microsecond, txbuf: make([]byte, qp.MaxPacketSize), tracing: true,
		psnShift: uint32(goldenPSNA - psnA)}
}

func (s *sim) logf(format string, args ...any) {
	if s.tracing {
		fmt.Fprintf(&s.trace, "%8.3fms ", float64(s.now)/1e6)
		fmt.Fprintf(&s.trace, format, args...)
		s.trace.WriteByte('\n')
	}
}

// symbolic rewrites the addresses and keys of the hosts' regions in a
// packet summary (random from run to run) as names: va=b+0x40, rkey=b.
func (s *sim) symbolic(line string) string {
	fields := strings.Fields(line)
	for i, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok || (k != "va" && k != "rkey") {
			continue
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			continue
		}
		for _, h := range []*host{s.a, s.b} {
			switch {
			case k == "rkey" && uint32(n) == h.region.RKey():
				fields[i] = "rkey=" + h.name
			case k == "rkey" && uint32(n)^h.region.RKey() < 0x1000:
				fields[i] = fmt.Sprintf("rkey=%s^%#x", h.name, uint32(n)^h.region.RKey())
			case k == "va" && n >= h.region.Addr() && n-h.region.Addr() < 1<<32:
				fields[i] = fmt.Sprintf("va=%s+%#x", h.name, n-h.region.Addr())
			}
		}
	}
	return strings.Join(fields, " ")
}

// summary describes for the trace a packet h sent (decoded in s.pkt). The
// PSNs of a's requests and of the responses to them are shown as they would
// be had a started at goldenPSNA, so that a run whose PSNs wrap
// (TestPSNWrap) must produce the golden transcript of the same scenario.
func (s *sim) summary(h *host, data []byte) string {
	p := &s.pkt
	if s.psnShift != 0 && (h == s.a) == p.OpCode().IsRequest() {
		s.show = append(s.show[:0], data...)
		if err := s.showPkt.Decode(s.show); err != nil {
			s.t.Fatal(err)
		}
		s.showPkt.BTH.SetPSN(p.BTH.PSN().Add(s.psnShift))
		p = &s.showPkt
	}
	return s.symbolic(string(wirefmt.AppendSummary(nil, p)))
}

func (s *sim) peer(h *host) *host {
	if h == s.a {
		return s.b
	}
	return s.a
}

// transmitAll drains every packet both QPs want to send onto the link.
func (s *sim) transmitAll() bool {
	moved := false
	for _, h := range []*host{s.a, s.b} {
		for sent := 0; ; sent++ {
			n, route := h.qp.Transmit(s.txbuf, s.now)
			dst := route.Dst
			if n == 0 {
				break
			}
			if sent > 100000 {
				s.t.Fatalf("%s keeps transmitting at %v: %+v", h.name, s.now, h.qp.Status())
			}
			moved = true
			data := slices.Clone(s.txbuf[:n])
			env := wire.Envelope{Src: h.addr, Dst: dst}
			env.Seal(data)
			to := s.peer(h)
			if dst.Addr() != to.addr.Addr() {
				s.t.Fatalf("%s sent to %v, not to its peer %v", h.name, dst, to.addr)
			}
			if err := s.pkt.Decode(data); err != nil {
				s.t.Fatalf("%s sent an undecodable packet: %v", h.name, err)
			}
			line := s.summary(h, data)
			if s.drop != nil && s.drop(h, &s.pkt) {
				s.logf("%s→%s %s  [dropped]", h.name, to.name, line)
				continue
			}
			fate := netem.Fate{CorruptBit: -1}
			if s.inj != nil {
				fate = s.inj.Decide(data)
			}
			if fate.Drop {
				continue
			}
			s.logf("%s→%s %s", h.name, to.name, line)
			if fate.CorruptBit >= 0 {
				data[fate.CorruptBit/8] ^= 1 << (fate.CorruptBit % 8)
			}
			if s.path != nil {
				if at, ok := s.path.admit(s, to, len(data)); ok {
					s.sendAt(to, data, env, at)
				}
				continue
			}
			s.send(to, data, env, s.latency+fate.Delay)
			if fate.Duplicate {
				s.send(to, slices.Clone(data), env, s.latency+2*time.Microsecond)
			}
		}
	}
	return moved
}

func (s *sim) send(to *host, data []byte, env wire.Envelope, delay time.Duration) {
	s.sendAt(to, data, env, s.now.Add(delay))
}

func (s *sim) sendAt(to *host, data []byte, env wire.Envelope, at qp.Time) {
	s.seq++
	s.flights = append(s.flights, flight{at: at, seq: s.seq, to: to, data: data, env: env})
	s.sorted = false
}

// path shapes the link as Linux's netem does, for the tests that measure
// how long transfers take over a bad network: each way, packets leave at
// Rate bytes a second (0: at once), a Loss share is lost, the rest arrive
// Delay later but for a Reorder share that arrives without the delay
// (overtaking the others, as netem's reorder does), and at most Limit
// packets may be on the way at once (netem's queue limit): the packets of
// a burst beyond it are lost.
type path struct {
	Delay         time.Duration
	Loss, Reorder float64
	Limit         int
	Rate          float64
	rng           *rand.Rand
	free          map[*host]qp.Time // when the way to a host is next free to send
	queued        map[*host]int     // packets on the way to a host
	lost, full    int
}

// admit decides the fate of an n-byte packet s sends to host to now: when
// it arrives, or that it is lost.
func (p *path) admit(s *sim, to *host, n int) (qp.Time, bool) {
	if p.queued[to] >= p.Limit {
		p.full++
		return 0, false
	}
	if p.rng.Float64() < p.Loss {
		p.lost++
		return 0, false
	}
	at := max(s.now, p.free[to])
	if p.Rate > 0 {
		at = at.Add(time.Duration(float64(n) / p.Rate * float64(time.Second)))
	}
	p.free[to] = at
	p.queued[to]++
	if p.rng.Float64() >= p.Reorder {
		at = at.Add(p.Delay)
	}
	return at, true
}

// deliverDue hands every packet whose time has come to its receiver.
func (s *sim) deliverDue() bool {
	if !s.sorted {
		slices.SortFunc(s.flights, func(x, y flight) int {
			if x.at != y.at {
				return int(x.at - y.at)
			}
			return x.seq - y.seq
		})
		s.sorted = true
	}
	n := 0
	for n < len(s.flights) && s.flights[n].at <= s.now {
		f := &s.flights[n]
		n++
		if s.path != nil {
			s.path.queued[f.to]--
		}
		if err := f.env.Check(f.data); err != nil {
			s.badICRC++
			continue
		}
		if err := s.pkt.Decode(f.data); err != nil {
			continue // a corrupted byte the ICRC happened to miss cannot get here; be safe
		}
		f.to.qp.Receive(&s.pkt, &f.env, s.now)
	}
	s.flights = s.flights[n:]
	return n > 0
}

// next returns the earliest time anything is due: a packet or a QP timer.
func (s *sim) next() (qp.Time, bool) {
	t, ok := qp.Time(0), false
	consider := func(u qp.Time) {
		if !ok || u < t {
			t, ok = u, true
		}
	}
	for _, f := range s.flights {
		consider(f.at)
	}
	for _, h := range []*host{s.a, s.b} {
		if d, armed := h.qp.Deadline(); armed {
			consider(d)
		}
	}
	return t, ok
}

// run advances the simulation until done reports true, failing the test if
// the link goes idle first or limit of simulated time passes. done is asked
// whenever everything due at the current time has happened.
func (s *sim) run(limit time.Duration, done func() bool) {
	s.t.Helper()
	end := s.now.Add(limit)
	for {
		if s.transmitAll() || s.deliverDue() {
			continue
		}
		if done() {
			return
		}
		t, ok := s.next()
		if !ok {
			s.t.Fatalf("link idle before the scenario finished\n%s\na: %+v\nb: %+v\n%s", tail(s.trace.String(), 40), s.a.qp.Status(), s.b.qp.Status(), qp.DumpSQ(s.a.qp))
		}
		if t > end {
			s.t.Fatalf("scenario not finished after %v\n%s\na: %+v\nb: %+v", limit, tail(s.trace.String(), 40), s.a.qp.Status(), s.b.qp.Status())
		}
		if t > s.now {
			s.now = t
		}
		s.a.qp.Tick(s.now)
		s.b.qp.Tick(s.now)
	}
}

// settle runs until nothing is in flight, nothing waits to be sent and no
// timer is armed.
func (s *sim) settle(limit time.Duration) {
	s.t.Helper()
	s.run(limit, func() bool {
		_, busy := s.next()
		return !busy
	})
}

// waitWC runs until h has n completions in total and returns them.
func (s *sim) waitWC(h *host, n int, limit time.Duration) []verbs.WC {
	s.t.Helper()
	s.run(limit, func() bool { h.poll(); return len(h.wcs) >= n })
	return h.wcs
}

// connect moves both QPs to RTS, each the other's peer.
func connect(t testing.TB, a, b *host, attr verbs.Attr) {
	t.Helper()
	pa, pb := psnA, wire.PSN(0xFFFFF0) // b's PSNs wrap soon
	for _, x := range []struct {
		h, peer *host
		sq, rq  wire.PSN
	}{{a, b, pa, pb}, {b, a, pb, pa}} {
		typ := x.h.qp.Type()
		init := verbs.Attr{State: verbs.Init, AccessFlags: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic, QKey: 0x11111111}
		mask := verbs.AttrState | verbs.AttrAccessFlags
		if typ == verbs.UD {
			mask = verbs.AttrState | verbs.AttrQKey
		}
		if err := x.h.qp.Modify(&init, mask); err != nil {
			t.Fatal(err)
		}
		rtr := attr
		rtr.State = verbs.RTR
		rtr.Remote, rtr.DestQPN, rtr.RQPSN = x.peer.addr, x.peer.qp.Num(), x.rq
		if rtr.PathMTU == 0 {
			rtr.PathMTU = testMTU
		}
		rtrMask := verbs.AttrState | verbs.AttrRemote | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if typ == verbs.RC {
			rtrMask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
		if typ == verbs.UD {
			rtrMask = verbs.AttrState
		}
		if err := x.h.qp.Modify(&rtr, rtrMask); err != nil {
			t.Fatal(err)
		}
		rts := attr
		rts.State, rts.SQPSN = verbs.RTS, x.sq
		rtsMask := verbs.AttrState | verbs.AttrSQPSN
		if typ == verbs.RC {
			rtsMask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxRdAtomic
		}
		if err := x.h.qp.Modify(&rts, rtsMask); err != nil {
			t.Fatal(err)
		}
	}
}

// defaultAttr is what the tests connect with unless they say otherwise:
// a 4 ms ACK timeout (timeout 10), 7 retries, RNR retries forever.
func defaultAttr() verbs.Attr {
	return verbs.Attr{Timeout: 10, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 16, MaxDestRdAtomic: 16}
}

// pair returns two connected RC hosts and their simulation.
func pair(t testing.TB, attr verbs.Attr) (*sim, *host, *host) {
	return pairOf(t, verbs.RC, attr)
}

// pairOf returns two hosts with QPs of type typ, in RTS and, for RC and UC,
// connected to each other, and their simulation.
func pairOf(t testing.TB, typ verbs.Type, attr verbs.Attr) (*sim, *host, *host) {
	a := newHost(t, "a", "10.0.0.1", typ, 0x11, qp.Config{})
	b := newHost(t, "b", "10.0.0.2", typ, 0x22, qp.Config{})
	connect(t, a, b, attr)
	return newSim(t, a, b), a, b
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n-1):], "\n")
}

// psnA is a's first PSN; TestPSNWrap changes it so that a's PSNs wrap.
// goldenPSNA is the one the golden transcripts were recorded with.
var psnA = goldenPSNA

const goldenPSNA = wire.PSN(0x100)
