// Package nictest helps Go programs test their own RDMA code on softnic, as
// net/http/httptest helps HTTP code: one call gives a test two connected
// devices (NewPair) or a daemon with a process attached to it (NewDaemon),
// closed when the test ends (t.Cleanup) and checked for leaked goroutines
// and descriptors (CheckLeaks); StartPair and StartDaemon do the same for
// a caller that closes them itself. Each device's faults can be switched on
// and off while the test runs, by opcode, QP and PSN, in each direction
// (Faults), and every packet is recorded for the test to assert on: a NAK
// of a syndrome, a PSN retransmitted, a packet it waits for (Recorder).
// Everything random in it, the first PSNs and the random faults, comes
// from one seed that a failing test logs (Options.Seed, SOFTNIC_TEST_SEED),
// so that its run repeats. A test that needs attach mode skips, saying
// why, where the system lacks it (MustHaveAttach).
//
// It uses package nic's public API only, and its devices listen on
// loopback at ports the system picks, so that tests run in parallel.
package nictest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// EnvSeed names the environment variable that sets the seed of every test
// whose Options.Seed is 0: the seed a failing run logged.
const EnvSeed = "SOFTNIC_TEST_SEED"

// Options configure NewPair and NewDaemon. The zero value is a working
// pair of embedded devices on loopback.
type Options struct {
	// Seed chooses the first PSNs of a pair's QPs and seeds the random
	// faults (Faults.SetRandom): a run repeats with the seed it logged. 0
	// takes SOFTNIC_TEST_SEED, or else a random seed.
	Seed uint64
	// Config is what each device is opened with, the daemons' with
	// Attached or NewDaemon. Its Addr defaults to 127.0.0.1 and a port the
	// system picks; its Trace still hears every packet after the
	// recorder; its Faults are the helper's (see Faults) and must be nil.
	Config nic.Config
	// Attached makes each end of a pair a process attached to a daemon of
	// its own (in this process, reached through its socket and shared
	// memory only) instead of an embedded device.
	Attached bool
	// CM connects a pair through the connection manager, B listening on
	// Port and A dialling it (rdma_listen, rdma_connect, rdma_accept),
	// instead of moving both QPs to RTS directly (ibv_modify_qp).
	CM bool
	// Port is the rdma_cm port B listens on with CM (default 18515).
	Port uint16
	// Connect are the attributes of a pair's QPs without CM; their PSNs
	// come from the seed unless set.
	Connect nic.ConnectOptions
	// Depth is how many send and receive WRs each QP holds (default 64);
	// each CQ holds twice as many completions.
	Depth int
	// RegionSize is the size of each end's memory region (default 64 KiB).
	RegionSize int
	// RecordLimit bounds the packets the recorder keeps
	// (DefaultRecordLimit if 0).
	RecordLimit int
	// NoLeakCheck leaves out the leak check (CheckLeaks), as a test that
	// runs in parallel with others must.
	NoLeakCheck bool
}

// seed returns the seed to use: o.Seed, else SOFTNIC_TEST_SEED's, else a
// random one.
func (o *Options) seed() (uint64, error) {
	if o.Seed != 0 {
		return o.Seed, nil
	}
	if env := os.Getenv(EnvSeed); env != "" {
		s, err := strconv.ParseUint(env, 0, 64)
		if err != nil || s == 0 {
			return 0, fmt.Errorf("nictest: %s=%q: want a number other than 0", EnvSeed, env)
		}
		return s, nil
	}
	return rand.Uint64() | 1, nil
}

// logSeed tells how to repeat the test's run.
func logSeed(t testing.TB, seed uint64) {
	t.Helper()
	t.Logf("nictest: seed %d (%s=%d repeats this run)", seed, EnvSeed, seed)
}

// closers are what to close, in the reverse order.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c closers) close() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// open opens a device whose packets rec records under name, and switches
// its faults to the helper's.
func (o *Options) open(c *closers, name string, rec *Recorder, seed uint64) (*nic.Device, *Faults, error) {
	cfg := o.Config
	if cfg.Faults != nil {
		return nil, nil, fmt.Errorf("nictest: Options.Config.Faults must be nil (switch faults with Faults): %w", nic.ErrInvalid)
	}
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.MustParseAddrPort("127.0.0.1:0")
	}
	cfg.Embed = true
	cfg.Faults = &netem.Faults{} // none, whatever SOFTNIC_FAULTS says
	cfg.Trace = rec.Trace(name, cfg.Trace)
	dev, err := nic.Open(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("nictest: open device %s: %w", name, err)
	}
	c.add(func() { dev.Close() })
	faults, err := newFaults(dev, seed)
	return dev, faults, err
}

// Pair is two devices, A and B, each with a PD, a CQ, a region and an RC
// QP connected to the other's.
type Pair struct {
	A, B *End
	// Recorder has every packet either device sent or received, under
	// the names "A" and "B" (the daemons' devices with Options.Attached).
	Recorder *Recorder
	// Seed is the seed the pair was made with (see Options.Seed).
	Seed    uint64
	closers closers
}

// End is one side of a Pair.
type End struct {
	// Dev is the device the test uses: an embedded device, or with
	// Options.Attached a device attached to Daemon.
	Dev *nic.Device
	// Daemon is the daemon Dev is attached to with Options.Attached.
	Daemon *Daemon
	PD     *nic.PD
	CQ     *nic.CQ // the QP's send and receive CQ
	QP     *nic.QP
	MR     *nic.MR // a region of Options.RegionSize bytes, all access
	// Conn is the QP's connection with Options.CM.
	Conn *nic.Conn
	// Faults are the faults of the packets this end sends: the direction
	// toward the other end (the CM's packets included).
	Faults *Faults
}

// Access is what a pair's regions allow.
const Access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic

// NewPair returns two devices on loopback with an RC QP each, connected to
// each other. It logs the seed, checks for leaks (unless
// Options.NoLeakCheck) and closes everything when the test ends; it fails
// the test if something cannot be made. With Options.Attached it skips the
// test where attach mode is not supported (nic.AttachSupported).
func NewPair(t testing.TB, opts *Options) *Pair {
	t.Helper()
	if opts != nil && opts.Attached {
		MustHaveAttach(t)
	}
	return inTest(t, opts, StartPair, func(p *Pair) (uint64, func()) { return p.Seed, p.Close })
}

// inTest starts what start makes for t: the leak check first (unless
// Options.NoLeakCheck), the seed logged, closed when t ends.
func inTest[T any](t testing.TB, opts *Options, start func(*Options) (T, error), info func(T) (seed uint64, close func())) T {
	t.Helper()
	if opts == nil || !opts.NoLeakCheck {
		CheckLeaks(t)
	}
	x, err := start(opts)
	if err != nil {
		t.Fatal(err)
	}
	seed, close := info(x)
	logSeed(t, seed)
	t.Cleanup(close)
	return x
}

// StartPair is NewPair for a caller that closes the pair itself (Close).
func StartPair(opts *Options) (_ *Pair, err error) {
	o := optionsOrZero(opts)
	p := &Pair{Recorder: NewRecorder(o.RecordLimit)}
	if p.Seed, err = o.seed(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close() // what was made before the error
		}
	}()
	rng := rand.New(rand.NewPCG(p.Seed, 0))
	if p.A, err = o.end(&p.closers, "A", p.Recorder, rng.Uint64()); err != nil {
		return nil, err
	}
	if p.B, err = o.end(&p.closers, "B", p.Recorder, rng.Uint64()); err != nil {
		return nil, err
	}
	if o.CM {
		if err = o.dial(&p.closers, p.A, p.B); err != nil {
			return nil, err
		}
		return p, nil
	}
	ca, cb := o.Connect, o.Connect
	if ca.LocalPSN == 0 && ca.RemotePSN == 0 {
		ca.LocalPSN, ca.RemotePSN = wire.PSN(rng.Uint32()&wire.PSNMask), wire.PSN(rng.Uint32()&wire.PSNMask)
	}
	cb.LocalPSN, cb.RemotePSN = ca.RemotePSN, ca.LocalPSN
	if err = p.A.QP.Connect(p.B.Dev.Addr(), p.B.QP.Num(), ca); err != nil {
		return nil, fmt.Errorf("nictest: connect A's QP: %w", err)
	}
	if err = p.B.QP.Connect(p.A.Dev.Addr(), p.A.QP.Num(), cb); err != nil {
		return nil, fmt.Errorf("nictest: connect B's QP: %w", err)
	}
	return p, nil
}

// Close closes the pair's connections, devices and daemons.
func (p *Pair) Close() { p.closers.close(); p.closers = nil }

func optionsOrZero(o *Options) Options {
	if o == nil {
		return Options{}
	}
	return *o
}

func (o *Options) depth() int {
	if o.Depth > 0 {
		return o.Depth
	}
	return 64
}

// end makes one side of a pair: its device, PD, CQ, region and, without
// CM, its QP.
func (o *Options) end(c *closers, name string, rec *Recorder, seed uint64) (*End, error) {
	e := &End{}
	var err error
	if o.Attached {
		if e.Daemon, err = o.daemon(c, name, rec, seed); err != nil {
			return nil, err
		}
		e.Faults = e.Daemon.Faults
		e.Dev, err = e.Daemon.attach(c)
	} else {
		e.Dev, e.Faults, err = o.open(c, name, rec, seed)
	}
	if err != nil {
		return nil, err
	}
	if e.PD, err = e.Dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("nictest: PD of %s: %w", name, err)
	}
	if e.CQ, err = e.Dev.CreateCQ(2 * o.depth()); err != nil {
		return nil, fmt.Errorf("nictest: CQ of %s: %w", name, err)
	}
	size := o.RegionSize
	if size <= 0 {
		size = 64 << 10
	}
	if e.MR, err = e.PD.AllocMR(size, Access); err != nil {
		return nil, fmt.Errorf("nictest: region of %s: %w", name, err)
	}
	if !o.CM {
		if e.QP, err = e.PD.CreateQP(o.qpConfig(e)); err != nil {
			return nil, fmt.Errorf("nictest: QP of %s: %w", name, err)
		}
	}
	return e, nil
}

func (o *Options) qpConfig(e *End) nic.QPConfig {
	return nic.QPConfig{SendCQ: e.CQ, MaxSendWR: o.depth(), MaxRecvWR: o.depth()}
}

// dial connects a's QP with b's through the connection manager: b
// listens, a dials.
func (o *Options) dial(c *closers, a, b *End) error {
	port := o.Port
	if port == 0 {
		port = 18515
	}
	l, err := b.Dev.Listen(port, nic.ListenOptions{PD: b.PD, QP: o.qpConfig(b)})
	if err != nil {
		return fmt.Errorf("nictest: B listens on port %d: %w", port, err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		var err error
		b.Conn, err = l.Accept(ctx)
		accepted <- err
	}()
	a.Conn, err = a.Dev.Dial(ctx, b.Dev.Addr(), port, nic.DialOptions{PD: a.PD, QP: o.qpConfig(a)})
	if err != nil {
		cancel()
		<-accepted
		return fmt.Errorf("nictest: A dials B: %w", err)
	}
	c.add(func() { a.Conn.Close() })
	if err := <-accepted; err != nil {
		return fmt.Errorf("nictest: B accepts: %w", err)
	}
	c.add(func() { b.Conn.Close() })
	a.QP, b.QP = a.Conn.QP(), b.Conn.QP()
	return nil
}

// Wait waits up to a minute for the next completion of e's CQ and fails
// the test without one.
func (e *End) Wait(t testing.TB) verbs.WC {
	t.Helper()
	return Wait(t, e.CQ)
}

// Wait waits up to a minute for the next completion of cq and fails the
// test without one.
func Wait(t testing.TB, cq *nic.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		t.Fatalf("nictest: waiting for a completion: %v", err)
	}
	return wc[0]
}

// OpenDevice opens a device with cfg, on a port of 127.0.0.1 the system
// picks unless cfg.Addr says otherwise, and closes it when t ends.
func OpenDevice(t testing.TB, cfg nic.Config) *nic.Device {
	t.Helper()
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.MustParseAddrPort("127.0.0.1:0")
	}
	dev, err := nic.Open(cfg)
	if err != nil {
		t.Fatalf("nictest: open device: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}
