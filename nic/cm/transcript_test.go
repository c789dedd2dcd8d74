package cm

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/datadriven"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// TestTranscripts runs the scenarios of testdata/*.txt on the simulated
// link of engine_test.go (two engines, a at 10.0.0.1:4791 and b at
// 10.0.0.2:4791, 10 µs apart, with a fake clock): each file is a story
// told as commands, and each command prints the MADs that crossed the
// link (with the time they were sent and their key fields; communication
// IDs by the names the transcript gives them), the events the engines
// output and what the command asks to see, in the datadriven format (see
// package internal/datadriven; -rewrite writes the outputs). The commands,
// and how to read a transcript without Go: testdata/README.md.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	datadriven.CheckDocumented(t, filepath.Join("testdata", "README.md"), files)
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			var e cmTranscript
			datadriven.RunTest(t, path, e.do)
		})
	}
}

// errQPFailed is why the end command ends a connection.
var errQPFailed = errors.New("QP failed: transport retry counter exceeded (RETRY_EXC_ERR)")

// cmTranscript is the state of one transcript.
type cmTranscript struct {
	l         *cmLink
	out       strings.Builder // what the link and the engines did since the last command
	ids       map[string]*ID
	names     map[uint32]string // communication IDs by name
	listeners map[lnKey]*Listener
}

type lnKey struct {
	side *cmSide
	port uint16
	ud   bool          // a listener of resolutions (listen H ud)
	ps   mad.PortSpace // TCP, or UDP if ud, unless ps=ib
}

func (e *cmTranscript) do(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd == "engines" {
		e.start(t, d)
		return "a 10.0.0.1:4791, b 10.0.0.2:4791\n"
	}
	if e.l == nil {
		d.Fatalf(t, "no engines yet")
	}
	e.l.t = t
	e.out.Reset()
	extra := e.run(t, d)
	return e.out.String() + extra
}

func (e *cmTranscript) start(t *testing.T, d *datadriven.TestData) {
	*e = cmTranscript{l: newCMLink(t), ids: map[string]*ID{}, names: map[uint32]string{}, listeners: map[lnKey]*Listener{}}
	if v, ok := d.Arg("b-mtu"); ok {
		mtu, ok := wire.MTUFromBytes(e.atoi(t, d, v[0]))
		if !ok {
			d.Fatalf(t, "no MTU %s", v[0])
		}
		e.l.b.mtu = mtu
	}
	e.l.watch = e.watch
	e.l.onSend = e.sent
}

// watch prints a step's events and flushes and names the requests that
// come in.
func (e *cmTranscript) watch(s *cmSide, out *Output) {
	// One step's events come in the engine's order per communication,
	// and in no fixed order across them (Tick): printed by name.
	evs := slices.Clone(out.Events)
	slices.SortStableFunc(evs, func(x, y Event) int { return strings.Compare(e.name(x.ID), e.name(y.ID)) })
	for _, ev := range evs {
		name := e.name(ev.ID)
		if ev.Type == EventRequest && name == "" {
			n := 1
			for e.ids[fmt.Sprintf("%s%d", s.name, n)] != nil {
				n++
			}
			name = fmt.Sprintf("%s%d", s.name, n)
			e.ids[name] = ev.ID
			e.names[ev.ID.local] = name
		}
		fmt.Fprintf(&e.out, "%v %s: %s %s", time.Duration(e.l.now), s.name, ev.Type, name)
		if ev.Type == EventListenerClosed {
			fmt.Fprintf(&e.out, "(port %d)", ev.Listener.Port())
		}
		if ev.Type == EventReply {
			fmt.Fprintf(&e.out, " (now %s)", ev.ID.state)
		}
		if ev.Type == EventResolved {
			r := ev.ID.SIDRREP()
			fmt.Fprintf(&e.out, " (qpn=%#x qkey=%#x private=%s)", r.QPN, r.QKey, text(r.PrivateData[:]))
		}
		if ev.Err != nil {
			fmt.Fprintf(&e.out, ": %v", ev.Err)
		}
		e.out.WriteString("\n")
		for _, sentinel := range []error{ErrConnRefused, ErrConnReset, ErrTimedOut, ErrClosed, mr.ErrAgain} {
			if errors.Is(ev.Err, sentinel) {
				fmt.Fprintf(&e.out, "  is %v\n", sentinel)
			}
		}
		var rej *RejectError
		if errors.As(ev.Err, &rej) {
			fmt.Fprintf(&e.out, "  REJ %v ari=%x private=%s (%d bytes)\n", rej.Reason, rej.ARI, text(rej.PrivateData), len(rej.PrivateData))
		}
		var sidr *SIDRError
		if errors.As(ev.Err, &sidr) {
			fmt.Fprintf(&e.out, "  SIDR_REP %v private=%s (%d bytes)\n", sidr.Status, text(sidr.PrivateData), len(sidr.PrivateData))
		}
	}
	flush := slices.Clone(out.Flush)
	slices.SortFunc(flush, func(x, y *ID) int { return strings.Compare(e.name(x), e.name(y)) })
	for _, id := range flush {
		fmt.Fprintf(&e.out, "%v %s: flush %s's QP\n", time.Duration(e.l.now), s.name, e.name(id))
	}
}

func (e *cmTranscript) name(id *ID) string {
	if id == nil {
		return ""
	}
	return e.names[id.local]
}

func (e *cmTranscript) comm(c uint32) string {
	if n, ok := e.names[c]; ok {
		return n
	}
	return fmt.Sprintf("%#x", c)
}

// text is private data as text: up to its first zero byte; beyond 40
// bytes, their number, the first 8 and the last 8.
func text(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) > 40 {
		return fmt.Sprintf("%d bytes %q…%q", len(b), b[:8], b[len(b)-8:])
	}
	return strconv.Quote(string(b))
}

// pattern is n bytes of private data: "abcdefghijklmnopqrstuvwxyz" over
// and over.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// sent prints a MAD put on the link, with its traffic class if not 0.
func (e *cmTranscript) sent(from *cmSide, m *mad.MAD, tclass uint8, lost bool) {
	fmt.Fprintf(&e.out, "%v %s→%s %s", time.Duration(e.l.now), from.name, e.l.peer(from).name, e.describe(m))
	if tclass != 0 {
		fmt.Fprintf(&e.out, " tclass=%#x", tclass)
	}
	if lost {
		e.out.WriteString(" (lost)")
	}
	e.out.WriteString("\n")
}

// describe is a MAD's type and its key fields.
func (e *cmTranscript) describe(m *mad.MAD) string {
	var b strings.Builder
	b.WriteString(m.AttrID().String())
	switch {
	case m.REQ != nil:
		r := m.REQ
		private := r.PrivateData()
		if _, err := mad.DecodeCMAHeader(private); err == nil {
			private = private[mad.CMAHeaderSize:]
		} else {
			b.WriteString(" (no rdma_cm header)")
		}
		if tt := r.TransportServiceType(); tt != 0 {
			fmt.Fprintf(&b, " (transport service type %d, not RC)", tt)
		}
		fmt.Fprintf(&b, " comm=%s service=%v qpn=%#x psn=%#x mtu=%v resources=%d depth=%d cm-timeout=%d ack-timeout=%d cm-retries=%d private=%s",
			e.comm(r.LocalCommID()), r.ServiceID(), r.LocalQPN(), uint32(r.StartingPSN()), r.PathMTU(), r.ResponderResources(), r.InitiatorDepth(),
			r.RemoteCMResponseTimeout(), r.PrimaryPath().LocalACKTimeout(), r.MaxCMRetries(), text(private))
	case m.REP != nil:
		r := m.REP
		fmt.Fprintf(&b, " comm=%s remote=%s qpn=%#x psn=%#x resources=%d depth=%d rnr-retry=%d ack-delay=%d srq=%v guid=%s private=%s",
			e.comm(r.LocalCommID()), e.comm(r.RemoteCommID()), r.LocalQPN(), uint32(r.StartingPSN()), r.ResponderResources(), r.InitiatorDepth(),
			r.RNRRetryCount(), r.TargetACKDelay(), r.SRQ(), e.guid(r.LocalCAGUID()), text(r.PrivateData()))
	case m.REJ != nil:
		r := m.REJ
		fmt.Fprintf(&b, " comm=%s remote=%s (%v, rejecting the %v) ari=%x private=%s",
			e.comm(r.LocalCommID()), e.comm(r.RemoteCommID()), r.Reason(), r.MessageRejected(), r.ARI()[:r.ARILength()], text(r.PrivateData()))
	case m.MRA != nil:
		fmt.Fprintf(&b, " comm=%s remote=%s (of the %v) service-timeout=%d",
			e.comm(m.MRA.LocalCommID()), e.comm(m.MRA.RemoteCommID()), m.MRA.MessageMRAed(), m.MRA.ServiceTimeout())
	case m.RTU != nil:
		fmt.Fprintf(&b, " comm=%s remote=%s", e.comm(m.RTU.LocalCommID()), e.comm(m.RTU.RemoteCommID()))
	case m.DREQ != nil:
		fmt.Fprintf(&b, " comm=%s remote=%s qpn=%#x", e.comm(m.DREQ.LocalCommID()), e.comm(m.DREQ.RemoteCommID()), m.DREQ.RemoteQPN())
	case m.DREP != nil:
		fmt.Fprintf(&b, " comm=%s remote=%s", e.comm(m.DREP.LocalCommID()), e.comm(m.DREP.RemoteCommID()))
	case m.SIDRREQ != nil:
		r := m.SIDRREQ
		private := r.PrivateData()
		if _, err := mad.DecodeCMAHeader(private); err == nil {
			private = private[mad.CMAHeaderSize:]
		} else {
			b.WriteString(" (no rdma_cm header)")
		}
		fmt.Fprintf(&b, " request=%s service=%v private=%s", e.comm(r.RequestID()), r.ServiceID(), text(private))
	case m.SIDRREP != nil:
		r := m.SIDRREP
		fmt.Fprintf(&b, " request=%s (%v) service=%v qpn=%#x qkey=%#x private=%s",
			e.comm(r.RequestID()), r.Status(), r.ServiceID(), r.QPN(), r.QKey(), text(r.PrivateData()))
	}
	return b.String()
}

func (e *cmTranscript) guid(g uint64) string {
	for _, s := range []*cmSide{e.l.a, e.l.b} {
		if s.e.guid == g {
			return s.name
		}
	}
	return fmt.Sprintf("%#x", g)
}

func (e *cmTranscript) atoi(t *testing.T, d *datadriven.TestData, s string) int {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return int(n)
}

// intArg returns the argument key as a number, or def.
func (e *cmTranscript) intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if v, ok := d.Arg(key); ok && len(v) == 1 {
		return e.atoi(t, d, v[0])
	}
	return def
}

func (e *cmTranscript) durArg(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return v
}

// side is the command's first argument, a or b.
func (e *cmTranscript) side(t *testing.T, d *datadriven.TestData) *cmSide {
	if len(d.CmdArgs) > 0 {
		switch d.CmdArgs[0].Key {
		case "a":
			return e.l.a
		case "b":
			return e.l.b
		}
	}
	d.Fatalf(t, "the first argument must be a or b")
	return nil
}

// id is the command's second argument, the name of a communication.
func (e *cmTranscript) id(t *testing.T, d *datadriven.TestData) *ID {
	if len(d.CmdArgs) < 2 || e.ids[d.CmdArgs[1].Key] == nil {
		d.Fatalf(t, "the second argument must name a communication")
	}
	return e.ids[d.CmdArgs[1].Key]
}

func (e *cmTranscript) private(t *testing.T, d *datadriven.TestData, def string) []byte {
	if v, ok := d.Arg("private"); ok && len(v) == 1 {
		return []byte(v[0])
	}
	if v, ok := d.Arg("private-len"); ok && len(v) == 1 {
		return pattern(e.atoi(t, d, v[0]))
	}
	return []byte(def)
}

var attrNames = map[string]mad.AttrID{
	"REQ": mad.AttrConnectRequest, "REP": mad.AttrConnectReply, "RTU": mad.AttrReadyToUse, "MRA": mad.AttrMsgRcptAck,
	"REJ": mad.AttrConnectReject, "DREQ": mad.AttrDisconnectRequest, "DREP": mad.AttrDisconnectReply,
	"SIDR_REQ": mad.AttrServiceIDResReq, "SIDR_REP": mad.AttrServiceIDResReqResp,
}

func (e *cmTranscript) run(t *testing.T, d *datadriven.TestData) string {
	l := e.l
	errOut := func(err error) string {
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		return ""
	}
	switch d.Cmd {
	case "limits":
		s := e.side(t, d)
		s.e.lim = Limits{
			HalfOpen:          e.intArg(t, d, "half-open", 0),
			HalfOpenPerSource: e.intArg(t, d, "per-source", 0),
			RejectRate:        e.intArg(t, d, "reject-rate", 0),
			RejectBurst:       e.intArg(t, d, "reject-burst", 0),
		}
		if v, ok := d.Arg("handshake"); ok {
			s.e.lim.Handshake = e.durArg(t, d, v[0])
		}
		s.e.lim = s.e.lim.WithDefaults()
	case "listen":
		s := e.side(t, d)
		k := e.lnKey(t, d, s)
		listen := s.e.Listen
		if k.ud {
			listen = s.e.ListenUD
		}
		ln, err := listen(k.ps, k.port, e.intArg(t, d, "backlog", 8))
		if err != nil {
			return errOut(err)
		}
		if _, held := d.Arg("held"); held {
			s.e.Hold(ln)
		}
		e.listeners[k] = ln
	case "open":
		s := e.side(t, d)
		ln := e.listeners[e.lnKey(t, d, s)]
		if ln == nil {
			d.Fatalf(t, "open H [ud] [port=N] [backlog=N] needs a listener")
		}
		s.e.Open(ln, e.intArg(t, d, "backlog", 8))
	case "unlisten":
		s := e.side(t, d)
		ln := e.listeners[e.lnKey(t, d, s)]
		if ln == nil {
			d.Fatalf(t, "unlisten H [port=N] needs a listener")
		}
		l.call(s, func(en *Engine, now qp.Time, out *Output) { en.Unlisten(now, ln, out) })
	case "connect":
		s := e.side(t, d)
		if len(d.CmdArgs) < 2 {
			d.Fatalf(t, "connect H NAME")
		}
		p := l.dialParams()
		p.Peer, p.Src = l.peer(s).addr, s.addr.Addr()
		p.Port = uint16(e.intArg(t, d, "port", int(p.Port)))
		p.QPN = uint32(e.intArg(t, d, "qpn", int(p.QPN)))
		p.CMTimeout = uint8(e.intArg(t, d, "cm-timeout", int(p.CMTimeout)))
		p.ACKTimeout = uint8(e.intArg(t, d, "ack-timeout", int(p.ACKTimeout)))
		p.CMRetries = uint8(e.intArg(t, d, "cm-retries", int(p.CMRetries)))
		p.Private = e.private(t, d, "hello")
		p.PortSpace = e.portSpace(t, d, 0)
		p.TrafficClass = uint8(e.intArg(t, d, "tclass", 0))
		name := d.CmdArgs[1].Key
		var err error
		out := l.step(s, func(en *Engine, now qp.Time, out *Output) {
			var id *ID
			if id, err = en.Connect(now, p, out); err == nil {
				e.ids[name] = id
				e.names[id.local] = name
			}
		})
		l.emit(s, &out)
		return errOut(err)
	case "next":
		s := e.side(t, d)
		ln := e.listeners[e.lnKey(t, d, s)]
		if ln == nil {
			d.Fatalf(t, "next H [port=N] needs a listener")
		}
		id := s.e.NextRequest(ln)
		if id == nil {
			return "no request\n"
		}
		return fmt.Sprintf("%s: request of %s from %v port %d\n", e.name(id), e.comm(id.remote), id.peer, id.port)
	case "resolve":
		s := e.side(t, d)
		if len(d.CmdArgs) < 2 {
			d.Fatalf(t, "resolve H NAME")
		}
		p := &ResolveParams{
			Peer: l.peer(s).addr, Src: s.addr.Addr(), Port: uint16(e.intArg(t, d, "port", 7174)),
			Private: e.private(t, d, "hello"), PortSpace: e.portSpace(t, d, 0),
			CMTimeout: uint8(e.intArg(t, d, "cm-timeout", 12)), CMRetries: uint8(e.intArg(t, d, "cm-retries", 3)),
		}
		name := d.CmdArgs[1].Key
		var err error
		out := l.step(s, func(en *Engine, now qp.Time, out *Output) {
			var id *ID
			if id, err = en.Resolve(now, p, out); err == nil {
				e.ids[name] = id
				e.names[id.local] = name
			}
		})
		l.emit(s, &out)
		return errOut(err)
	case "accept-ud":
		s, id := e.side(t, d), e.id(t, d)
		var err error
		l.call(s, func(en *Engine, now qp.Time, out *Output) {
			err = en.AcceptUD(now, id, uint32(e.intArg(t, d, "qpn", 0x22)), uint32(e.intArg(t, d, "qkey", RDMAUDPQKey)),
				e.private(t, d, "welcome"), out)
		})
		return errOut(err)
	case "accept":
		s, id := e.side(t, d), e.id(t, d)
		ap := l.acceptParams()
		_, ap.SRQ = d.Arg("srq")
		ap.Private = e.private(t, d, "welcome")
		var err error
		l.call(s, func(en *Engine, now qp.Time, out *Output) { err = en.Accept(now, id, ap, out) })
		return errOut(err)
	case "reject":
		s, id := e.side(t, d), e.id(t, d)
		var err error
		l.call(s, func(en *Engine, now qp.Time, out *Output) {
			err = en.Reject(now, id, mad.RejectConsumer, e.private(t, d, ""), out)
		})
		return errOut(err)
	case "establish":
		s, id := e.side(t, d), e.id(t, d)
		var err error
		l.call(s, func(en *Engine, _ qp.Time, out *Output) { err = en.Establish(id, out) })
		return errOut(err)
	case "first-request":
		s, id := e.side(t, d), e.id(t, d)
		l.call(s, func(en *Engine, _ qp.Time, out *Output) { en.CommEstablished(id, out) })
	case "disconnect":
		s, id := e.side(t, d), e.id(t, d)
		var sentDREQ bool
		l.call(s, func(en *Engine, now qp.Time, out *Output) { sentDREQ = en.Disconnect(now, id, out) })
		if !sentDREQ {
			return "no DREQ\n"
		}
	case "end":
		s, id := e.side(t, d), e.id(t, d)
		l.call(s, func(en *Engine, _ qp.Time, out *Output) { en.End(id, errQPFailed, out) })
	case "abort":
		s, id := e.side(t, d), e.id(t, d)
		l.call(s, func(en *Engine, now qp.Time, out *Output) { en.Abort(now, id, out) })
	case "shutdown":
		s := e.side(t, d)
		l.call(s, func(en *Engine, now qp.Time, out *Output) { en.Shutdown(now, out) })
	case "drop":
		v, ok := d.Arg("from")
		if !ok || (v[0] != "a" && v[0] != "b") {
			d.Fatalf(t, "drop from=a|b")
		}
		from := l.a
		if v[0] == "b" {
			from = l.b
		}
		var attr mad.AttrID
		if v, ok := d.Arg("type"); ok {
			if attr, ok = attrNames[v[0]]; !ok {
				d.Fatalf(t, "no MAD type %q", v[0])
			}
		}
		left := 1
		if v, ok := d.Arg("count"); ok {
			if v[0] == "all" {
				left = -1
			} else {
				left = e.atoi(t, d, v[0])
			}
		}
		prev := l.drop
		l.drop = func(s *cmSide, m *mad.MAD) bool {
			if s == from && (attr == 0 || m.AttrID() == attr) && left != 0 {
				left--
				return true
			}
			return prev != nil && prev(s, m)
		}
	case "duplicate":
		id := e.id2(t, d)
		from := l.a
		if id.peer == l.b.addr {
			from = l.b
		}
		l.flights = append(l.flights, cmFlight{at: l.now, from: from, mad: reqOf(t, l, id)})
		e.deliver()
	case "inject":
		e.inject(t, d)
	case "deliver":
		e.deliver()
	case "tick":
		if len(d.CmdArgs) != 1 {
			d.Fatalf(t, "tick DURATION")
		}
		e.advance(e.durArg(t, d, d.CmdArgs[0].Key))
	case "settle":
		limit := time.Minute
		if v, ok := d.Arg("limit"); ok {
			limit = e.durArg(t, d, v[0])
		}
		l.settle(limit)
	case "state":
		id := e.id(t, d)
		s := id.state.String()
		if id.err != nil {
			s += fmt.Sprintf(": %v", id.err)
		}
		return s + "\n"
	case "timer":
		s := e.side(t, d)
		at, ok := s.e.Deadline()
		if !ok {
			return "none\n"
		}
		return fmt.Sprintf("at %v (in %v)\n", time.Duration(at), time.Duration(at-l.now))
	case "counts":
		s := e.side(t, d)
		var b strings.Builder
		for c := range NumCounters {
			if s.cnt[c] != 0 {
				fmt.Fprintf(&b, "%s %d\n", c, s.cnt[c])
			}
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "tables":
		s := e.side(t, d)
		var names []string
		for _, id := range s.e.ids {
			names = append(names, e.comm(id.local)+" "+id.state.String())
		}
		slices.Sort(names)
		var keys []lnKey
		ud := false
		for k := range e.listeners {
			if k.side == s {
				keys = append(keys, k)
				ud = ud || k.ud
			}
		}
		slices.SortFunc(keys, func(a, b lnKey) int {
			if a.ud != b.ud {
				return cmp.Compare(btoi(a.ud), btoi(b.ud))
			}
			return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.ps, b.ps))
		})
		backlogs := ""
		for _, k := range keys {
			name := "backlog"
			if k.ud {
				name = "ud-" + name
			}
			if k.ps == mad.PortSpaceIB {
				name = "ib-" + name
			}
			backlogs += fmt.Sprintf(" %s(%d)=%d", name, k.port, e.listeners[k].Backlog())
		}
		if len(s.e.sidrs) > 0 || ud {
			backlogs = fmt.Sprintf(" resolutions=%d", len(s.e.sidrs)) + backlogs
		}
		return fmt.Sprintf("communications=%d %v half-open=%d sources=%d%s\n",
			len(s.e.ids), names, s.e.halfOpen, len(s.e.halfOpenBy), backlogs)
	default:
		d.Fatalf(t, "unknown command")
	}
	return ""
}

// lnKey is the listener the command names: side, [ud], [port=N] (7471).
func (e *cmTranscript) lnKey(t *testing.T, d *datadriven.TestData, s *cmSide) lnKey {
	_, ud := d.Arg("ud")
	def := mad.PortSpaceTCP
	if ud {
		def = mad.PortSpaceUDP
	}
	return lnKey{s, uint16(e.intArg(t, d, "port", 7471)), ud, e.portSpace(t, d, def)}
}

// portSpace is the port space of argument ps (tcp, udp or ib), def
// without it.
func (e *cmTranscript) portSpace(t *testing.T, d *datadriven.TestData, def mad.PortSpace) mad.PortSpace {
	v, ok := d.Arg("ps")
	if !ok {
		return def
	}
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, mad.PortSpaceUDP, mad.PortSpaceIB} {
		if len(v) == 1 && strings.EqualFold(v[0], ps.String()) {
			return ps
		}
	}
	d.Fatalf(t, "ps=%v: tcp, udp or ib", v)
	return 0
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// id2 is id for commands whose first argument is the name.
func (e *cmTranscript) id2(t *testing.T, d *datadriven.TestData) *ID {
	if len(d.CmdArgs) < 1 || e.ids[d.CmdArgs[0].Key] == nil {
		d.Fatalf(t, "the argument must name a communication")
	}
	return e.ids[d.CmdArgs[0].Key]
}

// deliver runs the link until nothing is in flight, firing the timers
// that fall due meanwhile.
func (e *cmTranscript) deliver() {
	l := e.l
	for len(l.flights) > 0 {
		at, _ := l.next()
		e.to(at)
	}
}

// advance runs the link for d.
func (e *cmTranscript) advance(d time.Duration) {
	l := e.l
	end := l.now.Add(d)
	for {
		at, ok := l.next()
		if !ok || at > end {
			break
		}
		e.to(at)
	}
	l.now = end
}

// to moves the clock to at, if later, and delivers and fires what is due.
func (e *cmTranscript) to(at qp.Time) {
	l := e.l
	l.now = max(l.now, at)
	for l.deliverDue() {
	}
	for _, s := range []*cmSide{l.a, l.b} {
		l.call(s, func(en *Engine, now qp.Time, out *Output) { en.Tick(now, out) })
	}
}

// inject has a MAD no engine of the link sent arrive at the command's
// side, and prints it and the answers.
func (e *cmTranscript) inject(t *testing.T, d *datadriven.TestData) {
	l, s := e.l, e.side(t, d)
	if len(d.CmdArgs) < 2 {
		d.Fatalf(t, "inject H TYPE [from=ADDR] …")
	}
	attr, ok := attrNames[d.CmdArgs[1].Key]
	if !ok {
		d.Fatalf(t, "no MAD type %q", d.CmdArgs[1].Key)
	}
	from := l.peer(s).addr
	if v, ok := d.Arg("from"); ok {
		var err error
		if from, err = netip.ParseAddrPort(v[0]); err != nil {
			d.Fatalf(t, "%v", err)
		}
	}
	comm, remote := e.commArg(t, d, "comm", 1), e.commArg(t, d, "remote", 0)
	f := mad.MADFields{Header: mad.CMHeader(attr, uint64(comm))}
	switch attr {
	case mad.AttrConnectRequest:
		port := uint16(e.intArg(t, d, "port", 7471))
		mtu, ok := wire.MTUFromBytes(e.intArg(t, d, "mtu", 1024))
		if !ok {
			d.Fatalf(t, "no MTU")
		}
		// The longest hold the wire allows, as the half-open limits see
		// requesters.
		f.REQ = mad.REQFields{
			LocalCommID: comm, ServiceID: mad.RDMACMServiceID(mad.PortSpaceTCP, port), LocalQPN: 0x11,
			PathMTU: mtu, PKey: 0xFFFF, MaxCMRetries: 15, LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20,
			TransportServiceType: uint8(e.intArg(t, d, "transport", 0)),
		}
		if v, ok := d.Arg("service"); ok {
			f.REQ.ServiceID = mad.ServiceID(e.atoi(t, d, v[0]))
		}
		if v, ok := d.Arg("cma"); !ok || v[0] != "false" {
			cma := mad.NewCMAHeader(netip.AddrPortFrom(from.Addr(), 40000), s.addr.Addr())
			mad.CMAHeader(f.REQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
		}
	case mad.AttrConnectReply:
		f.REP = mad.REPFields{LocalCommID: comm, RemoteCommID: remote, LocalQPN: uint32(e.intArg(t, d, "qpn", 0x22))}
	case mad.AttrReadyToUse:
		f.RTU = mad.RTUFields{LocalCommID: comm, RemoteCommID: remote}
	case mad.AttrConnectReject:
		f.REJ = mad.REJFields{
			LocalCommID: comm, RemoteCommID: remote, Reason: mad.RejectReason(e.intArg(t, d, "reason", int(mad.RejectConsumer))),
			MessageRejected: e.message(t, d),
		}
	case mad.AttrMsgRcptAck:
		f.MRA = mad.MRAFields{
			LocalCommID: comm, RemoteCommID: remote, MessageMRAed: e.message(t, d),
			ServiceTimeout: uint8(e.intArg(t, d, "service-timeout", 0)),
		}
	case mad.AttrDisconnectRequest:
		f.DREQ = mad.DREQFields{LocalCommID: comm, RemoteCommID: remote, RemoteQPN: uint32(e.intArg(t, d, "qpn", 0x11))}
	case mad.AttrDisconnectReply:
		f.DREP = mad.DREPFields{LocalCommID: comm, RemoteCommID: remote}
	case mad.AttrServiceIDResReq:
		var mark uint16 = sidrMark
		if v, ok := d.Arg("mark"); ok && v[0] == "false" {
			mark = 0
		}
		f.SIDRREQ = mad.SIDRREQFields{RequestID: comm, PKey: 0xFFFF, Resv16: mark,
			ServiceID: mad.RDMACMServiceID(mad.PortSpaceUDP, uint16(e.intArg(t, d, "port", 7174)))}
		if v, ok := d.Arg("service"); ok {
			f.SIDRREQ.ServiceID = mad.ServiceID(e.atoi(t, d, v[0]))
		}
		if v, ok := d.Arg("cma"); !ok || v[0] != "false" {
			cma := mad.NewCMAHeader(netip.AddrPortFrom(from.Addr(), 40000), s.addr.Addr())
			mad.CMAHeader(f.SIDRREQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
		}
	case mad.AttrServiceIDResReqResp:
		f.SIDRREP = mad.SIDRREPFields{RequestID: comm, Status: mad.SIDRStatus(e.intArg(t, d, "status", 0)),
			QPN: uint32(e.intArg(t, d, "qpn", 0x22)), QKey: RDMAUDPQKey}
	}
	var b [mad.MADSize]byte
	if _, err := f.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	var m mad.MAD
	if err := m.Decode(b[:]); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&e.out, "%v %v→%s %s\n", time.Duration(l.now), from, s.name, e.describe(&m))
	out := l.step(s, func(en *Engine, now qp.Time, out *Output) { en.Receive(now, from, s.mtu, &m, out) })
	for _, o := range out.MADs {
		var a mad.MAD
		if err := a.Decode(o.MAD[:]); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&e.out, "%v %s→%v %s\n", time.Duration(l.now), s.name, o.Dst, e.describe(&a))
	}
}

// commArg is the argument key as a communication ID: a number, or the
// local ID of the communication it names; def if absent.
func (e *cmTranscript) commArg(t *testing.T, d *datadriven.TestData, key string, def uint32) uint32 {
	v, ok := d.Arg(key)
	if !ok || len(v) != 1 {
		return def
	}
	if id := e.ids[v[0]]; id != nil {
		return id.local
	}
	return uint32(e.atoi(t, d, v[0]))
}

// message is the message=REQ|REP|other argument (REQ if absent).
func (e *cmTranscript) message(t *testing.T, d *datadriven.TestData) mad.CMMessage {
	v, ok := d.Arg("message")
	if !ok {
		return mad.CMMessageREQ
	}
	for _, m := range []mad.CMMessage{mad.CMMessageREQ, mad.CMMessageREP, mad.CMMessageOther} {
		if v[0] == m.String() {
			return m
		}
	}
	d.Fatalf(t, "no message %q", v[0])
	return 0
}
