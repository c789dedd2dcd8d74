// Package scenario holds the stories softnic demo --scenario tells: two RC
// QPs on loopback and one thing going wrong on purpose (a WRITE packet
// lost, an ACK lost, a SEND before its receive, packets out of order, an
// atomic copied on the way, a bad rkey), each step explained and checked,
// and at the end the ladder of what the packets showed, checked for the
// anomalies the story is about.
//
// The faults are targeted, not drawn by chance: the QPs are connected with
// known first PSNs, and a fault rule of the link (netem.Rule in
// nic.Config.Faults) hits exactly the packet of one PSN, once, so that a
// run shows the same ladder every time. Where a step races a timer (the
// RNR wait), the checks take what may vary (how many RNR NAKs) as it
// comes.
//
// The package drives public APIs only (nic, qp, mr) and the ladder; the
// command prints for it through Options.
package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Options are what a scenario runs with.
type Options struct {
	// MTU is the path MTU of both devices (default 1024, rxe's on
	// Ethernet).
	MTU int
	// Open opens the server's and the client's devices with the
	// configurations given (the demo puts them on two loopback addresses).
	Open func(server, client nic.Config) (*nic.Device, *nic.Device, error)
	// Say prints a line of text.
	Say func(string)
	// Trace also sees every packet either device sends or receives (the
	// demo prints them and captures them).
	Trace func(*nic.TracePacket)
	// Pause, if set, is called before each step after the first (the
	// demo's --step waits for Enter).
	Pause func() error
}

// Scenario is one story.
type Scenario struct {
	Name  string
	Title string // what it shows, in a line
	intro func(r *run) string
	// faults are the fault rules of the server's and the client's links.
	faults func(r *run) (server, client []netem.Rule)
	// ackTimeout is the QPs' local ACK timeout exponent; 0 means
	// slowTimeout.
	ackTimeout uint8
	steps      []step
	// ladder checks the ladder and says what it named.
	ladder func(r *run, l *ladder.Ladder) (string, error)
}

// step is one step: a title, a sentence for the reader, then the
// operation, which checks its outcome and says what it saw.
type step struct {
	title   string
	explain func(r *run) string
	run     func(r *run) (string, error)
}

// The first PSNs of the client's and the server's QPs: known in advance,
// for the fault rules.
const (
	clientPSN wire.PSN = 0x001000
	serverPSN wire.PSN = 0x002000
)

// StepTimeout bounds each step of a demo: on loopback each takes
// milliseconds (the ACK timeout of the timeout scenario, 67 ms, the
// longest), so a step that takes this long has gone wrong.
const StepTimeout = 5 * time.Second

// Scenarios are the stories, by name.
var Scenarios = []*Scenario{loss, timeout, rnr, seqerr, atomicReplay, badRKey}

// Names returns the scenarios' names.
func Names() []string {
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return names
}

// Lookup returns the scenario called name, or nil.
func Lookup(name string) *Scenario {
	for _, s := range Scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// run is the state of a scenario's run: a server device hosting a region
// and a client device, one RC QP each, connected to each other.
type run struct {
	ctx            context.Context
	o              *Options
	server, client *nic.Device
	region, local  *nic.MR
	scq, ccq       *nic.CQ
	sqp, cqp       *nic.QP

	timeout uint8 // the QPs' local ACK timeout exponent

	// rec draws the packets; what follows is guarded by its lock.
	rec     *ladder.Recorder
	lad     *ladder.Ladder
	named   map[ladder.Kind]int // the anomalies the ladder named, by kind
	changed chan struct{}       // closed, and replaced, when a packet is drawn
}

// The memory: the server's region, readable, writable and atomic, and the
// client's buffer.
const regionSize = 64 << 10

// Run runs the scenario: it opens the devices, connects the QPs, runs every
// step, checks the ladder, and returns it; it fails with the first step or
// check that did not behave as expected, and returns the ladder so far
// with the error once the devices are open.
func (s *Scenario) Run(ctx context.Context, o Options) (*ladder.Ladder, error) {
	if o.MTU == 0 {
		o.MTU = 1024
	}
	r := &run{ctx: ctx, o: &o, named: make(map[ladder.Kind]int), changed: make(chan struct{})}
	r.timeout = cmp.Or(s.ackTimeout, slowTimeout)
	r.lad = ladder.New(ladder.Options{ACKTimeout: ladder.ACKTimeout(r.timeout)})
	r.rec = ladder.NewRecorder(r.lad, false)
	r.rec.OnAdd = r.drawn
	serverRules, clientRules := s.faults(r)
	cfg := func(rules []netem.Rule) nic.Config {
		return nic.Config{MTU: o.MTU, Trace: r.trace, Faults: &netem.Faults{Rules: rules}}
	}
	var err error
	if r.server, r.client, err = o.Open(cfg(serverRules), cfg(clientRules)); err != nil {
		return nil, err
	}
	defer r.close()
	o.Say(fmt.Sprintf("softnic demo --scenario %s: %s\n%s", s.Name, s.Title, s.intro(r)))
	steps := append([]step{{"connect", explainConnect, connect}}, s.steps...)
	for i, st := range steps {
		if i > 0 && o.Pause != nil {
			if err := o.Pause(); err != nil {
				return r.lad, err
			}
		}
		o.Say(fmt.Sprintf("\n== %d. %s\n%s", i+1, st.title, st.explain(r)))
		result, err := st.run(r)
		if err != nil {
			o.Say("FAILED: " + err.Error())
			r.close()
			r.sayLadder("the ladder so far")
			return r.lad, fmt.Errorf("step %d (%s): %w", i+1, st.title, err)
		}
		o.Say("ok: " + result)
	}
	r.close() // every packet is in the ladder before it is drawn
	if err := r.sayLadder("the ladder"); err != nil {
		return r.lad, err
	}
	var named string
	r.rec.Do(func(l *ladder.Ladder) { named, err = s.ladder(r, l) })
	if err != nil {
		o.Say("FAILED: " + err.Error())
		return r.lad, fmt.Errorf("the ladder: %w", err)
	}
	o.Say("ok: " + named)
	o.Say(fmt.Sprintf("\nAll %d steps behaved as expected.", len(steps)))
	return r.lad, nil
}

// trace is both devices' nic.Config.Trace: the packets go to Options.Trace
// and to the ladder, as they leave for the wire (ladder.Recorder), which on
// loopback is the order they arrive in.
func (r *run) trace(tp *nic.TracePacket) {
	if r.o.Trace != nil {
		r.o.Trace(tp)
	}
	r.rec.Trace(tp)
}

// drawn counts what the ladder names and wakes await.
func (r *run) drawn(a *ladder.Arrow) {
	for _, an := range a.Anomalies {
		r.named[an.Kind]++
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// sayLadder says the ladder under a heading.
func (r *run) sayLadder(heading string) error {
	var text strings.Builder
	var err error
	r.rec.Do(func(l *ladder.Ladder) { err = ladder.WriteText(&text, l) })
	r.o.Say("\n== " + heading + "\n" + strings.TrimSuffix(text.String(), "\n"))
	return err
}

// await waits until cond holds: it is checked now and after each packet
// drawn, with the recorder's lock held.
func (r *run) await(what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(r.ctx, StepTimeout)
	defer cancel()
	for {
		var done bool
		var changed chan struct{}
		r.rec.Do(func(*ladder.Ladder) { done, changed = cond(), r.changed })
		if done {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%s did not happen within %v", what, StepTimeout)
		}
	}
}

// close closes both devices, once they are open; it may be called again.
func (r *run) close() {
	for _, d := range []*nic.Device{r.client, r.server} {
		if d != nil {
			d.Close()
		}
	}
}

// The QPs' local ACK timeout exponents: 4.096 µs × 2^14 ≈ 67 ms, what
// perftest and rdma_cm use, for the story of a timeout; 2^18 ≈ 1.07 s in the
// others, so that a machine too busy to answer within 67 ms does not add a
// timeout to a story that has none.
const (
	ackTimeout  = 14
	slowTimeout = 18
)

// rnrTimer is the server QP's RNR NAK timer code: 5.12 ms, long enough for
// the demo to post its receive before the client tries again.
const rnrTimer = 18

func explainConnect(r *run) string {
	return fmt.Sprintf("The server registers %d KiB of memory for remote read, write and atomic access; both sides create an RC QP "+
		"and connect it to the other's directly, as perftest does after exchanging QP numbers out of band: the client's "+
		"first PSN is %v, the server's %v. The path MTU is %d bytes, the local ACK timeout 4.096 µs × 2^%d = %s.",
		regionSize>>10, clientPSN, serverPSN, r.o.MTU, r.timeout, ladder.Duration(ladder.ACKTimeout(r.timeout)))
}

// connect is the first step of every scenario: register the memory,
// create the QPs and connect them.
func connect(r *run) (string, error) {
	spd, err := r.server.AllocPD()
	if err != nil {
		return "", err
	}
	cpd, err := r.client.AllocPD()
	if err != nil {
		return "", err
	}
	if r.region, err = spd.AllocMR(regionSize, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite|mr.RemoteAtomic); err != nil {
		return "", err
	}
	if r.local, err = cpd.RegMR(make([]byte, regionSize), mr.LocalWrite); err != nil {
		return "", err
	}
	if r.scq, err = r.server.CreateCQ(16); err != nil {
		return "", err
	}
	if r.ccq, err = r.client.CreateCQ(16); err != nil {
		return "", err
	}
	if r.sqp, err = spd.CreateQP(nic.QPConfig{SendCQ: r.scq}); err != nil {
		return "", err
	}
	if r.cqp, err = cpd.CreateQP(nic.QPConfig{SendCQ: r.ccq}); err != nil {
		return "", err
	}
	so := nic.ConnectOptions{LocalPSN: serverPSN, RemotePSN: clientPSN, Timeout: r.timeout, MinRNRTimer: rnrTimer}
	co := nic.ConnectOptions{LocalPSN: clientPSN, RemotePSN: serverPSN, Timeout: r.timeout, MinRNRTimer: rnrTimer}
	if err := r.sqp.Connect(r.client.Addr(), r.cqp.Num(), so); err != nil {
		return "", err
	}
	if err := r.cqp.Connect(r.server.Addr(), r.sqp.Num(), co); err != nil {
		return "", err
	}
	return fmt.Sprintf("client QP %#x at %v is connected to server QP %#x at %v; no packet is sent to connect this way.",
		r.cqp.Num(), r.client.Addr(), r.sqp.Num(), r.server.Addr()), nil
}

// post posts wr on the client's QP, signalled, and waits for its
// completion.
func (r *run) post(wr *verbs.SendWR) (verbs.WC, error) { return Post(r.ctx, r.cqp, r.ccq, wr) }

// postOK is post for an operation that must succeed.
func (r *run) postOK(wr *verbs.SendWR) (verbs.WC, error) { return PostOK(r.ctx, r.cqp, r.ccq, wr) }

// wait waits for a completion on cq.
func (r *run) wait(cq *nic.CQ, what string) (verbs.WC, error) { return Wait(r.ctx, cq, what) }

// Post posts wr on q, signalled, and waits for its completion on cq, as
// the demo's steps do.
func Post(ctx context.Context, q *nic.QP, cq *nic.CQ, wr *verbs.SendWR) (verbs.WC, error) {
	wr.Flags |= verbs.Signaled
	if err := q.PostSend(wr); err != nil {
		return verbs.WC{}, err
	}
	return Wait(ctx, cq, "the "+wr.Opcode.String())
}

// PostOK is Post for an operation that must succeed: a completion in
// error is an error.
func PostOK(ctx context.Context, q *nic.QP, cq *nic.CQ, wr *verbs.SendWR) (verbs.WC, error) {
	wc, err := Post(ctx, q, cq, wr)
	if err == nil && wc.Status != verbs.Success {
		err = fmt.Errorf("the %v completed with %v (%s)", wr.Opcode, wc.Status, wc.Status.Text())
	}
	return wc, err
}

// Wait waits for a completion on cq, at most StepTimeout; what names the
// operation in the error.
func Wait(ctx context.Context, cq *nic.CQ, what string) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		return verbs.WC{}, fmt.Errorf("waiting for the completion of %s: %w", what, err)
	}
	return wc[0], nil
}

// syncServer orders the scenario's reads of the server's region after the
// server NIC's accesses: the NIC touches memory only under the QP's lock,
// which Status takes.
func (r *run) syncServer() { r.sqp.Status() }

// counter returns a counter of a device by its rxe name.
func counter(d *nic.Device, name string) uint64 {
	v, _ := d.Counter(name)
	return v
}

// want is a counter a check expects of a device.
type want struct {
	dev  *nic.Device
	side string
	name string
	n    int64 // exactly n; -n: at least n
}

// check checks counters of the devices.
func check(ws ...want) error {
	var errs []error
	for _, w := range ws {
		got := int64(counter(w.dev, w.name))
		if w.n >= 0 && got != w.n || w.n < 0 && got < -w.n {
			rel := "exactly"
			if w.n < 0 {
				rel = "at least"
			}
			errs = append(errs, fmt.Errorf("the %s counts %s %d, want %s %d", w.side, w.name, got, rel, max(w.n, -w.n)))
		}
	}
	return errors.Join(errs...)
}

// retransmitted returns the PSNs the ladder names as retransmitted with
// cause c, and the causes of all its retransmissions.
func retransmitted(l *ladder.Ladder, c ladder.Cause) (psns []wire.PSN, causes []ladder.Cause) {
	for _, an := range l.Anomalies() {
		if an.Kind != ladder.Retransmission {
			continue
		}
		causes = append(causes, an.Cause)
		if an.Cause == c && !slices.Contains(psns, an.PSN) {
			psns = append(psns, an.PSN)
		}
	}
	return psns, causes
}

// named returns the anomalies of kind k the ladder names.
func named(l *ladder.Ladder, k ladder.Kind) []ladder.Anomaly {
	var as []ladder.Anomaly
	for _, an := range l.Anomalies() {
		if an.Kind == k {
			as = append(as, an)
		}
	}
	return as
}

// psnsText lists PSNs for a message.
func psnsText(psns []wire.PSN) string {
	var s []string
	for _, p := range psns {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}
