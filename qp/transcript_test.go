package qp_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/datadriven"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestTranscripts runs the scenarios of testdata/transcripts: each file is
// a story told as commands (connect two QPs, post work, lose chosen
// packets, run the link) and the packets, completions, counters and
// memory each command must produce, in the datadriven format (see package
// internal/datadriven; -rewrite writes the outputs). The commands, and
// how to read a transcript without Go: testdata/README.md.
func TestTranscripts(t *testing.T) { runTranscripts(t, datadriven.Rewriting()) }

func runTranscripts(t *testing.T, rewrite bool) {
	files, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	datadriven.CheckDocumented(t, filepath.Join("testdata", "README.md"), files)
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			var e transcriptEnv
			datadriven.RunTestRewriting(t, path, rewrite, e.do)
		})
	}
}

// transcriptEnv is the state of one transcript: the simulation and how
// much of its trace and completions the commands have shown.
type transcriptEnv struct {
	s     *sim
	shown int           // bytes of s.trace already printed
	seen  map[*host]int // completions already printed, per host
	drops []*dropRule
}

type dropRule struct {
	from  *host
	op    wire.OpCode
	anyOp bool
	psn   wire.PSN
	byPSN bool
	left  int
}

func (e *transcriptEnv) do(t *testing.T, d *datadriven.TestData) string {
	if d.Cmd != "pair" && e.s == nil {
		d.Fatalf(t, "no pair yet")
	}
	var out strings.Builder
	switch d.Cmd {
	case "pair":
		e.pair(t, d)
	case "access":
		e.access(t, d)
	case "fill":
		h := e.host(t, d, 0)
		off, n := e.num(t, d, "off", 0), e.num(t, d, "len", -1)
		fill(h.buf[off:off+n], byte(e.num(t, d, "seed", -1)))
	case "put":
		h := e.host(t, d, 0)
		binary.NativeEndian.PutUint64(h.buf[e.num(t, d, "off", 0):], uint64(e.num(t, d, "u64", -1)))
	case "drop":
		e.drop(t, d)
	case "post":
		e.post(t, d)
	case "post-recv":
		h := e.host(t, d, 0)
		postRecv(t, h, &verbs.RecvWR{ID: uint64(e.num(t, d, "id", 0)), SGL: sgl(h.sge(uint64(e.num(t, d, "off", 0)), uint32(e.num(t, d, "len", -1))))})
	case "wait":
		e.wait(t, d)
	case "settle":
		e.s.settle(time.Second)
	case "completions":
		h := e.host(t, d, 0)
		h.poll()
		for _, wc := range h.wcs[e.seen[h]:] {
			fmt.Fprintf(&out, "%s: %v", h.name, &wc)
			if wc.Flags&verbs.WCWithImm != 0 {
				fmt.Fprintf(&out, " imm=%#x", wc.Imm)
			}
			out.WriteString("\n")
		}
		e.seen[h] = len(h.wcs)
	case "counters":
		h := e.host(t, d, 0)
		h.cnt.Each(func(name string, v uint64) {
			if _, named := d.Arg(name); (len(d.CmdArgs) == 1 && v != 0) || named {
				fmt.Fprintf(&out, "%s: %s=%d\n", h.name, name, v)
			}
		})
	case "state":
		h := e.host(t, d, 0)
		st := h.qp.Status()
		fmt.Fprintf(&out, "%s: %s cause=%s recv_queued=%d\n", h.name, st.State, st.Cause, st.RecvQueued)
	case "word":
		h := e.host(t, d, 0)
		fmt.Fprintf(&out, "%s+%#x: %d\n", h.name, e.num(t, d, "off", -1), binary.NativeEndian.Uint64(h.buf[e.num(t, d, "off", -1):]))
	case "zero":
		h := e.host(t, d, 0)
		off, n := e.num(t, d, "off", -1), e.num(t, d, "len", -1)
		zero := "all zero"
		if slices.ContainsFunc(h.buf[off:off+n], func(b byte) bool { return b != 0 }) {
			zero = "not all zero"
		}
		fmt.Fprintf(&out, "%s+%#x, %d bytes: %s\n", h.name, off, n, zero)
	case "compare":
		n := e.num(t, d, "len", -1)
		x, y := e.host(t, d, 0), e.host(t, d, 1)
		xo, yo := e.num(t, d, x.name, -1), e.num(t, d, y.name, -1)
		same := "the same"
		if !slices.Equal(x.buf[xo:xo+n], y.buf[yo:yo+n]) {
			same = "different"
		}
		fmt.Fprintf(&out, "%s+%#x and %s+%#x, %d bytes: %s\n", x.name, xo, y.name, yo, n, same)
	default:
		d.Fatalf(t, "unknown command")
	}
	trace := e.s.trace.String()[e.shown:]
	e.shown += len(trace)
	return trace + out.String()
}

func (e *transcriptEnv) pair(t *testing.T, d *datadriven.TestData) {
	attr := defaultAttr()
	for _, f := range []struct {
		key string
		v   *uint8
	}{{"timeout", &attr.Timeout}, {"retry", &attr.RetryCnt}, {"rnr-retry", &attr.RNRRetry},
		{"min-rnr-timer", &attr.MinRNRTimer}, {"rd-atomic", &attr.MaxRdAtomic}, {"dest-rd-atomic", &attr.MaxDestRdAtomic}} {
		if _, ok := d.Arg(f.key); ok {
			*f.v = uint8(e.num(t, d, f.key, -1))
		}
	}
	typ := verbs.RC
	if v, ok := d.Arg("type"); ok {
		i := slices.IndexFunc([]verbs.Type{verbs.RC, verbs.UC, verbs.UD}, func(x verbs.Type) bool { return len(v) == 1 && x.String() == v[0] })
		if i < 0 {
			d.Fatalf(t, "type %v: want RC, UC or UD", v)
		}
		typ = []verbs.Type{verbs.RC, verbs.UC, verbs.UD}[i]
	}
	e.s, _, _ = pairOf(t, typ, attr)
	e.shown, e.seen, e.drops = 0, map[*host]int{}, nil
	e.s.drop = e.dropped
}

// host returns the i'th argument that names a host (a or b, alone or as
// a key).
func (e *transcriptEnv) host(t *testing.T, d *datadriven.TestData, i int) *host {
	for _, a := range d.CmdArgs {
		var h *host
		switch name, _, _ := strings.Cut(a.Key, "."); name {
		case "a":
			h = e.s.a
		case "b":
			h = e.s.b
		default:
			continue
		}
		if i == 0 {
			return h
		}
		i--
	}
	d.Fatalf(t, "names no host (a or b)")
	return nil
}

// num returns the number argument key, or def if it is absent and def is
// not negative.
func (e *transcriptEnv) num(t *testing.T, d *datadriven.TestData, key string, def int) int {
	v, ok := d.Arg(key)
	if !ok && def >= 0 {
		return def
	}
	if len(v) != 1 {
		d.Fatalf(t, "wants %s=N", key)
	}
	n, err := strconv.ParseUint(v[0], 0, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return int(n)
}

// opcode reads a packet opcode: a number, or its name with '_' for spaces
// (RC_Acknowledge).
func opcode(name string) (wire.OpCode, bool) {
	if n, err := strconv.ParseUint(name, 0, 8); err == nil {
		return wire.OpCode(n), wire.OpCode(n).Valid()
	}
	for op := range 256 {
		if o := wire.OpCode(op); o.Valid() && strings.ReplaceAll(o.String(), " ", "_") == name {
			return o, true
		}
	}
	return 0, false
}

func (e *transcriptEnv) access(t *testing.T, d *datadriven.TestData) {
	h := e.host(t, d, 0)
	var acc mr.Access
	for _, a := range d.CmdArgs[1:] {
		switch a.Key {
		case "read":
			acc |= mr.RemoteRead
		case "write":
			acc |= mr.RemoteWrite
		case "atomic":
			acc |= mr.RemoteAtomic
		default:
			d.Fatalf(t, "access %q: want read, write or atomic", a.Key)
		}
	}
	if err := h.qp.Modify(&verbs.Attr{AccessFlags: acc}, verbs.AttrAccessFlags); err != nil {
		d.Fatalf(t, "%v", err)
	}
}

func (e *transcriptEnv) drop(t *testing.T, d *datadriven.TestData) {
	from, ok := d.Arg("from")
	if !ok || len(from) != 1 || (from[0] != "a" && from[0] != "b") {
		d.Fatalf(t, "wants from=a or from=b")
	}
	r := &dropRule{from: e.s.a, anyOp: true, left: e.num(t, d, "count", 1)}
	if from[0] == "b" {
		r.from = e.s.b
	}
	if v, ok := d.Arg("op"); ok {
		op, valid := opcode(strings.Join(v, ""))
		if !valid {
			d.Fatalf(t, "no opcode %v", v)
		}
		r.op, r.anyOp = op, false
	}
	if _, ok := d.Arg("psn"); ok {
		r.psn, r.byPSN = wire.PSN(e.num(t, d, "psn", -1)), true
	}
	e.drops = append(e.drops, r)
}

// dropped is the simulation's drop function: the first rule with packets
// left that matches p, as the transcript shows it, loses it.
func (e *transcriptEnv) dropped(h *host, p *wire.Packet) bool {
	psn := p.BTH.PSN()
	if (h == e.s.a) == p.OpCode().IsRequest() {
		psn = psn.Add(e.s.psnShift) // a's PSN space, shown from 0x100
	}
	for _, r := range e.drops {
		if r.left > 0 && r.from == h && (r.anyOp || r.op == p.OpCode()) && (!r.byPSN || r.psn == psn) {
			r.left--
			return true
		}
	}
	return false
}

func (e *transcriptEnv) post(t *testing.T, d *datadriven.TestData) {
	h := e.host(t, d, 0)
	peer := e.s.peer(h)
	name, _ := d.Arg("op")
	op := verbs.WROpcode(0)
	for op.String() != strings.Join(name, "") {
		if op++; op == 0 {
			d.Fatalf(t, "no work request opcode %v", name)
		}
	}
	wr := &verbs.SendWR{ID: uint64(e.num(t, d, "id", 0)), Opcode: op,
		SGL:        sgl(h.sge(uint64(e.num(t, d, "off", 0)), uint32(e.num(t, d, "len", -1)))),
		RemoteAddr: peer.va(uint64(e.num(t, d, "remote", 0))), RKey: peer.region.RKey() ^ uint32(e.num(t, d, "rkey-xor", 0)),
		CompareAdd: uint64(max(e.num(t, d, "add", 0), e.num(t, d, "compare", 0))), Swap: uint64(e.num(t, d, "swap", 0)),
		Imm: uint32(e.num(t, d, "imm", 0))}
	for _, f := range []struct {
		name string
		flag verbs.SendFlags
	}{{"signaled", verbs.Signaled}, {"fence", verbs.Fence}} {
		if _, ok := d.Arg(f.name); ok {
			wr.Flags |= f.flag
		}
	}
	post(t, h, wr)
}

// wait runs the link until every host named has its number of
// completions and every host.counter named has reached its number.
func (e *transcriptEnv) wait(t *testing.T, d *datadriven.TestData) {
	type goal struct {
		h       *host
		counter string // "" for completions
		n       uint64
	}
	var goals []goal
	for i, a := range d.CmdArgs {
		g := goal{h: e.host(t, d, i), n: uint64(e.num(t, d, a.Key, -1))}
		if _, name, ok := strings.Cut(a.Key, "."); ok {
			if _, known := counterNamed(g.h, name); !known {
				d.Fatalf(t, "no counter %q", name)
			}
			g.counter = name
		}
		goals = append(goals, g)
	}
	e.s.run(time.Second, func() bool {
		for _, g := range goals {
			g.h.poll()
			v, _ := counterNamed(g.h, g.counter)
			if g.counter == "" {
				v = uint64(len(g.h.wcs))
			}
			if v < g.n {
				return false
			}
		}
		return true
	})
}

// counterNamed returns h's counter name and whether it has one.
func counterNamed(h *host, name string) (v uint64, ok bool) {
	h.cnt.Each(func(n string, x uint64) {
		if n == name {
			v, ok = x, true
		}
	})
	return v, ok
}

// checkTranscript compares the packet trace of a scenario written in Go
// with its golden transcript, testdata/scenarios/NAME.txt, below the
// comment lines at its top that say what the story shows (go test -run
// NAME -rewrite regenerates the trace and keeps the comment; review the
// diff before committing). A scenario run from another test (TestPSNWrap)
// is checked against its own golden transcript and never rewrites it.
func checkTranscript(t *testing.T, s *sim) {
	t.Helper()
	name := t.Name()
	if i := strings.Index(name, "/Test"); i >= 0 {
		name = name[i+1:]
	}
	path := filepath.Join("testdata", "scenarios", strings.ReplaceAll(name, "/", "_")+".txt")
	got := s.trace.String()
	file, err := os.ReadFile(path)
	comment, want := splitComment(string(file))
	if datadriven.Rewriting() && name == t.Name() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(comment+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatalf("no golden transcript (run with -rewrite): %v\ngot:\n%s", err, got)
	}
	if got != want {
		t.Errorf("transcript differs from %s (run with -rewrite to accept):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// splitComment returns the lines starting with "#" at the top of a golden
// transcript and what follows them.
func splitComment(file string) (comment, rest string) {
	rest = file
	for strings.HasPrefix(rest, "#") {
		line, after, _ := strings.Cut(rest, "\n")
		comment += line + "\n"
		rest = after
	}
	return comment, rest
}
