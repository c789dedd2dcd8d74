package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/qp"
)

// softnic bench measures softnic on this machine as the repository's Go
// benchmarks do (package nicbench), without a Go toolchain: fi_rmabw's
// workloads from a device in this process to a peer device in a process of
// its own (this binary run again as the hidden command bench-peer, which
// ends when this process does), or with --one-process to a device in this
// process, beside raw UDP measured in the same run (package udptest), so
// that what it prints are ratios that compare across machines and figures
// that compare with fi_rmabw's line by line. With --attach it also
// measures a device attached to a running daemon against an embedded one,
// in alternating rounds, as BenchmarkAttached* do.

func defineBench(fs *flag.FlagSet) func(*invocation) error {
	secs := fs.Duration("time", time.Second, "measure each workload for `D`")
	ops := fs.Int("ops", 0, "and for at most `N` operations (0: no limit; the attached comparison's rounds take 20000 by default)")
	runs := fs.Int("runs", 1, "measure each workload `R` times and report the median, as fi_rmabw -r does")
	one := fs.Bool("one-process", false, "put the peer device in this process instead of a process of its own")
	peerWaits := fs.Bool("peer-waits", false, "let the peer process sleep until packets come instead of polling, as fi_rmabw's target does")
	only := fs.String("only", "", "measure only the workloads named, `KEYS` separated by commas (the keys of --json, raw_udp_gbps and raw_udp_gso_gbps and raw_udp_ping_pong included)")
	attach := fs.String("attach", "", "also measure a device attached to the daemon whose control socket is `PATH` against an embedded one")
	asJSON := fs.Bool("json", false, "print the results as one line of JSON")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		cfg := benchConfig{lim: nicbench.Limit{Ops: *ops, Time: *secs}, runs: *runs, oneProcess: *one, peerWaits: *peerWaits, attach: *attach}
		switch {
		case *secs <= 0 && *ops <= 0:
			return usagef("--time %v and --ops %d: want a limit", *secs, *ops)
		case *ops < 0:
			return usagef("--ops %d: want 0 or more", *ops)
		case *runs < 1 || *runs > 100:
			return usagef("--runs %d: want 1 to 100", *runs)
		case *one && *peerWaits:
			return usagef("--peer-waits: the peer device in this process (--one-process) always leaves its packets to its goroutines")
		}
		if *only != "" {
			for key := range strings.SplitSeq(*only, ",") {
				if _, ok := nicbench.Lookup(key); !ok && !slices.Contains(rawKeys, key) {
					return usagef("--only: no workload %q; the workloads are %s", key, strings.Join(benchKeys(), ", "))
				}
				cfg.only = append(cfg.only, key)
			}
		}
		res, err := runBench(inv.ctx, cfg, inv.stderr)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(inv.stdout).Encode(res.json())
		}
		printBench(inv.stdout, res)
		return nil
	}
}

// The raw-UDP limits' keys.
var rawKeys = []string{"raw_udp_gbps", "raw_udp_gso_gbps", "raw_udp_ping_pong"}

func benchKeys() []string {
	keys := slices.Clone(rawKeys)
	for _, w := range nicbench.Workloads {
		keys = append(keys, w.Key)
	}
	return keys
}

// benchConfig is what softnic bench was asked to do.
type benchConfig struct {
	lim        nicbench.Limit
	runs       int
	oneProcess bool
	peerWaits  bool
	only       []string // keys; nil: everything
	attach     string
}

func (c *benchConfig) wants(key string) bool { return c.only == nil || slices.Contains(c.only, key) }

// benchResult is what softnic bench measured: each workload's figures,
// one per run, in the order of nicbench.Workloads, and the raw-UDP limits.
type benchResult struct {
	cfg     benchConfig
	cpus    int
	figures []benchFigures
	// The raw-UDP limits: 4 KiB datagrams with sendmmsg/recvmmsg and no
	// offload, the same coalesced by GSO and GRO, and a ping-pong with the
	// peer's process (or this one).
	rawGbps, rawGSOGbps []float64
	rawPingPong         []udptest.PingPongResult
	attached            *benchAttach
}

type benchFigures struct {
	w    nicbench.Workload
	runs []nicbench.Figure
}

// median returns the median of runs of values got from each run by f.
func median[T any](runs []T, f func(T) float64) (med, lo, hi float64) {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return 0, 0, 0
	}
	med = v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return med, v[0], v[n-1]
}

func (f *benchFigures) value() float64 {
	m, _, _ := median(f.runs, func(x nicbench.Figure) float64 { return x.Value })
	return m
}

func (f *benchFigures) p99() float64 {
	m, _, _ := median(f.runs, func(x nicbench.Figure) float64 { return x.P99 })
	return m
}

func (f *benchFigures) ops() float64 {
	m, _, _ := median(f.runs, func(x nicbench.Figure) float64 { return float64(x.Ops) })
	return m
}

func (r *benchResult) raw() (gbps, gso float64, ping benchLatency) {
	gbps, _, _ = median(r.rawGbps, func(x float64) float64 { return x })
	gso, _, _ = median(r.rawGSOGbps, func(x float64) float64 { return x })
	ping.MedianMicros, _, _ = median(r.rawPingPong, func(x udptest.PingPongResult) float64 { return micros(x.Median) })
	ping.P99Micros, _, _ = median(r.rawPingPong, func(x udptest.PingPongResult) float64 { return micros(x.P99) })
	return gbps, gso, ping
}

// configName names where the peer device was, and whether a peer process
// polled.
func (c *benchConfig) configName() string {
	switch {
	case c.oneProcess:
		return "one-process"
	case c.peerWaits:
		return "peer-process-waiting"
	}
	return "peer-process"
}

// json returns the result as softnic bench --json prints it: a workload's
// figure under its key (Gbit/s, operations per second, or a latency's
// median and 99th percentile in µs), each the median of the runs.
func (r *benchResult) json() map[string]any {
	m := map[string]any{
		"config": r.cfg.configName(), "cpus": r.cpus, "runs": r.cfg.runs,
		"time_s": r.cfg.lim.Time.Seconds(), "ops": r.cfg.lim.Ops,
	}
	gbps, gso, ping := r.raw()
	if len(r.rawGbps) > 0 {
		m["raw_udp_gbps"] = gbps
	}
	if len(r.rawGSOGbps) > 0 {
		m["raw_udp_gso_gbps"] = gso
	}
	if len(r.rawPingPong) > 0 {
		m["raw_udp_ping_pong"] = ping
	}
	for i := range r.figures {
		f := &r.figures[i]
		if f.w.Kind() == nicbench.Delay {
			m[f.w.Key] = benchLatency{MedianMicros: f.value(), P99Micros: f.p99()}
		} else {
			m[f.w.Key] = f.value()
		}
	}
	if r.attached != nil {
		m["attached"] = r.attached
	}
	return m
}

// benchAttach compares a device attached to a daemon with an embedded one.
type benchAttach struct {
	Control      string       `json:"control"`
	Daemon       string       `json:"daemon"` // the daemon device's address
	WriteGbps    float64      `json:"write_64k_gbps"`
	EmbeddedGbps float64      `json:"embedded_write_64k_gbps"`
	Write8Wait   benchLatency `json:"write_8_wait"`
	EmbeddedWait benchLatency `json:"embedded_write_8_wait"`
	Write8Poll   benchLatency `json:"write_8_poll"`
	EmbeddedPoll benchLatency `json:"embedded_write_8_poll"`
	WriteRatio   float64      `json:"write_64k_ratio"` // attached over embedded
}

// benchLatency is a round trip's median and 99th percentile.
type benchLatency struct {
	MedianMicros float64 `json:"median_us"`
	P99Micros    float64 `json:"p99_us"`
}

func latencyOf(l nicbench.Latency) benchLatency {
	return benchLatency{MedianMicros: micros(l.Median), P99Micros: micros(l.P99)}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// maxRTTs bounds the round trips a latency keeps, as fi_rmabw's 200000.
const maxRTTs = 200000

// runBench takes the measurements cfg asks for; the peer process, if any,
// writes its errors to stderr.
func runBench(ctx context.Context, cfg benchConfig, stderr io.Writer) (*benchResult, error) {
	res := &benchResult{cfg: cfg, cpus: runtime.NumCPU()}
	var devs benchDevices
	defer devs.close()
	a, err := devs.open(nic.DefaultAddr.Addr())
	if err != nil {
		return nil, err
	}
	var target nicbench.Target
	echo := netip.AddrPort{}
	if cfg.oneProcess {
		b, err := devs.open(nic.DefaultAddr.Addr())
		if err != nil {
			return nil, err
		}
		if target, err = nicbench.NewDeviceTarget(b); err != nil {
			return nil, err
		}
	} else {
		p, err := startBenchPeer(stderr, cfg.peerWaits)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		target, echo = p, p.Echo()
	}
	in, err := nicbench.Dial(a, target, nicbench.MaxQPs)
	if err != nil {
		return nil, err
	}
	rtts := make([]time.Duration, maxRTTs)
	for range cfg.runs {
		if err := res.measureRaw(ctx, echo); err != nil {
			return nil, err
		}
	}
	for _, w := range nicbench.Workloads {
		if !cfg.wants(w.Key) {
			continue
		}
		f := benchFigures{w: w}
		for range cfg.runs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			fig, err := w.Run(in, cfg.lim, rtts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.Name, err)
			}
			f.runs = append(f.runs, fig)
		}
		res.figures = append(res.figures, f)
	}
	if cfg.attach != "" {
		n := cmp.Or(cfg.lim.Ops, 20000)
		if res.attached, err = benchAttached(ctx, &devs, n, cfg.attach); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// rawDatagrams is how many datagrams a raw throughput run sends: about a
// second's worth on a machine that moves 4 KiB datagrams at 10 Gbit/s
// (25 per operation, at most, with --ops).
const rawDatagrams = 300000

// measureRaw measures the raw-UDP limits cfg asks for once; the ping-pong
// against echo, if valid.
func (r *benchResult) measureRaw(ctx context.Context, echo netip.AddrPort) error {
	pings, datagrams := maxRTTs/4, rawDatagrams
	if r.cfg.lim.Ops > 0 {
		pings, datagrams = min(pings, r.cfg.lim.Ops), min(datagrams, 25*r.cfg.lim.Ops)
	}
	for _, m := range []struct {
		key string
		run func() error
	}{
		{"raw_udp_gbps", func() error {
			t, err := udptest.MeasureThroughput(datagrams, udptest.ThroughputConfig{})
			r.rawGbps = append(r.rawGbps, t.Gbps)
			return err
		}},
		{"raw_udp_gso_gbps", func() error {
			t, err := udptest.MeasureThroughput(datagrams, udptest.ThroughputConfig{GSO: true, GRO: true})
			if err == nil {
				r.rawGSOGbps = append(r.rawGSOGbps, t.Gbps)
			}
			return nil // the kernel may not have the offloads
		}},
		{"raw_udp_ping_pong", func() error {
			var p udptest.PingPongResult
			var err error
			if echo.IsValid() {
				p, err = udptest.MeasurePingPongTo(pings, echo)
			} else {
				p, err = udptest.MeasurePingPong(pings)
			}
			r.rawPingPong = append(r.rawPingPong, p)
			return err
		}},
	} {
		if !r.cfg.wants(m.key) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := m.run(); err != nil {
			return fmt.Errorf("%s: %w", m.key, err)
		}
	}
	return nil
}

// benchPeerCommand is the hidden command softnic bench runs its peer
// device with: this binary again.
const benchPeerCommand = "bench-peer"

// startBenchPeer starts the peer process; wait says whether it sleeps
// instead of polling.
func startBenchPeer(stderr io.Writer, wait bool) (*nicbench.Peer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the peer process: %w", err)
	}
	cmd := exec.Command(exe, benchPeerCommand)
	if wait {
		cmd.Args = append(cmd.Args, "--wait")
	}
	cmd.Stderr = stderr
	return nicbench.StartPeer(cmd)
}

func defineBenchPeer(fs *flag.FlagSet) func(*invocation) error {
	wait := fs.Bool("wait", false, "leave the device to its goroutines instead of polling its CQ")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		by := nicbench.Poll
		if *wait {
			by = nicbench.Wait
		}
		return nicbench.ServePeer(os.Stdin, inv.stdout, nic.Config{Addr: netip.AddrPortFrom(nic.DefaultAddr.Addr(), 0)}, by)
	}
}

// benchAttached measures a device attached to the daemon at control
// against an embedded one, each toward an embedded peer of its own on the
// daemon's address, in alternating rounds of n operations in all.
func benchAttached(ctx context.Context, devs *benchDevices, n int, control string) (*benchAttach, error) {
	att, err := nic.Open(nic.Config{Attach: control})
	if err != nil {
		return nil, err
	}
	devs.opened = append(devs.opened, att)
	host := att.Addr().Addr()
	if host.IsUnspecified() {
		return nil, fmt.Errorf("the daemon at %s listens on %v: give softnic serve an address (--listen) to bench against", control, att.Addr())
	}
	res := &benchAttach{Control: control, Daemon: att.Addr().String()}
	var ins [2]*nicbench.Initiator
	for dev := range ins {
		a := att
		if dev == nicbench.Embedded {
			if a, err = devs.open(host); err != nil {
				return nil, err
			}
		}
		peer, err := devs.open(host)
		if err != nil {
			return nil, err
		}
		t, err := nicbench.NewDeviceTarget(peer)
		if err != nil {
			return nil, err
		}
		if ins[dev], err = nicbench.Dial(a, t, 1); err != nil {
			return nil, err
		}
	}
	var took [2]time.Duration
	err = nicbench.InRounds(n, func(dev, _, k int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, d, err := ins[dev].Throughput(qp.WRWrite, nicbench.LargeSize, nicbench.Window, 1, nicbench.Poll, nicbench.Limit{Ops: k})
		took[dev] += d
		return err
	})
	if err != nil {
		return nil, err
	}
	res.WriteGbps = nicbench.Gbps(n, nicbench.LargeSize, took[nicbench.Attached])
	res.EmbeddedGbps = nicbench.Gbps(n, nicbench.LargeSize, took[nicbench.Embedded])
	res.WriteRatio = res.WriteGbps / res.EmbeddedGbps
	for _, m := range []struct {
		att, emb *benchLatency
		by       nicbench.Completion
	}{{&res.Write8Wait, &res.EmbeddedWait, nicbench.Wait}, {&res.Write8Poll, &res.EmbeddedPoll, nicbench.Poll}} {
		l, err := nicbench.LatencyRounds(&ins, qp.WRWrite, m.by, n)
		if err != nil {
			return nil, err
		}
		*m.att, *m.emb = latencyOf(l[nicbench.Attached]), latencyOf(l[nicbench.Embedded])
	}
	return res, nil
}

// benchDevices are the devices a bench run opened, closed when it ends.
type benchDevices struct{ opened []*nic.Device }

// open opens an embedded device on host, on a free port.
func (b *benchDevices) open(host netip.Addr) (*nic.Device, error) {
	d, err := nic.Open(nic.Config{Addr: netip.AddrPortFrom(host, 0), Embed: true})
	if err == nil {
		b.opened = append(b.opened, d)
	}
	return d, err
}

func (b *benchDevices) close() {
	for _, d := range b.opened {
		d.Close()
	}
}

// printBench prints res as a table of softnic against raw UDP, fi_rmabw's
// RESULT lines for the same figures, and the attached device against the
// embedded one.
func printBench(w io.Writer, res *benchResult) {
	cfg := &res.cfg
	where := "the peer device in a process of its own, which polls as fi_rmabw's target does"
	switch {
	case cfg.oneProcess:
		where = "both devices in this process"
	case cfg.peerWaits:
		where = "the peer device in a process of its own, which sleeps until packets come"
	}
	limit := fmt.Sprintf("%v", cfg.lim.Time)
	if cfg.lim.Ops > 0 {
		limit = fmt.Sprintf("%d operations", cfg.lim.Ops)
		if cfg.lim.Time > 0 {
			limit += fmt.Sprintf(" or %v", cfg.lim.Time)
		}
	}
	fmt.Fprintf(w, "softnic bench (%s): %s, on loopback; each figure the median of %d runs of %s; raw UDP measured in the same run; %d CPUs\n\n",
		cfg.configName(), where, cfg.runs, limit, res.cpus)
	gbps, gso, ping := res.raw()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSOFTNIC\tRATIO TO RAW UDP\tOPS")
	if len(res.rawGbps) > 0 {
		fmt.Fprintf(tw, "raw UDP: 4 KiB datagrams, sendmmsg/recvmmsg\t%.1f Gbit/s\t\t\n", gbps)
	}
	if len(res.rawGSOGbps) > 0 {
		fmt.Fprintf(tw, "raw UDP: the same coalesced by GSO and GRO\t%.1f Gbit/s\t\t\n", gso)
	}
	if len(res.rawPingPong) > 0 {
		fmt.Fprintf(tw, "raw UDP: 8-byte ping-pong\t%s\t\t\n", ping)
	}
	for i := range res.figures {
		f := &res.figures[i]
		ops := f.ops()
		switch f.w.Kind() {
		case nicbench.Bandwidth:
			fmt.Fprintf(tw, "%s\t%.1f Gbit/s\t%s\t%.0f\n", f.w.Name, f.value(), ratio(f.value(), gbps, len(res.rawGbps)), ops)
		case nicbench.Rate:
			fmt.Fprintf(tw, "%s\t%.3f Mops/s\t\t%.0f\n", f.w.Name, f.value()/1e6, ops)
		case nicbench.Delay:
			l := benchLatency{MedianMicros: f.value(), P99Micros: f.p99()}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\n", f.w.Name, l, ratio(f.value(), ping.MedianMicros, len(res.rawPingPong)), ops)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	result := func(what string, runs []float64, unit string) {
		med, lo, hi := median(runs, func(x float64) float64 { return x })
		fmt.Fprintf(w, "RESULT softnic %s | median %.3f min %.3f max %.3f %s (runs=%d)\n", what, med, lo, hi, unit, len(runs))
	}
	for i := range res.figures {
		f := &res.figures[i]
		values := make([]float64, len(f.runs))
		p99s := make([]float64, len(f.runs))
		for j, r := range f.runs {
			values[j], p99s[j] = r.Value, r.P99
		}
		switch f.w.Kind() {
		case nicbench.Bandwidth:
			result(f.w.Name, values, "Gbit/s")
		case nicbench.Rate:
			for j := range values {
				values[j] /= 1e6
			}
			result(f.w.Name, values, "Mops/s")
		case nicbench.Delay:
			result(f.w.Name+" median", values, "us")
			result(f.w.Name+" p99", p99s, "us")
		}
	}
	a := res.attached
	if a == nil {
		return
	}
	fmt.Fprintf(w, "\nattached to the daemon at %s (its device on %s) against an embedded device, in %d alternating rounds:\n\n", a.Control, a.Daemon, nicbench.Rounds)
	fmt.Fprintln(tw, "WORKLOAD\tATTACHED\tEMBEDDED\tRATIO")
	fmt.Fprintf(tw, "write %dB w=%d\t%.1f Gbit/s\t%.1f Gbit/s\t%.2f×\n", nicbench.LargeSize, nicbench.Window, a.WriteGbps, a.EmbeddedGbps, a.WriteRatio)
	fmt.Fprintf(tw, "write 8B latency wait\t%s\t%s\t%.2f×\n", a.Write8Wait, a.EmbeddedWait, a.Write8Wait.MedianMicros/a.EmbeddedWait.MedianMicros)
	fmt.Fprintf(tw, "write 8B latency\t%s\t%s\t%.2f×\n", a.Write8Poll, a.EmbeddedPoll, a.Write8Poll.MedianMicros/a.EmbeddedPoll.MedianMicros)
	tw.Flush()
}

// ratio formats v over a raw figure measured n times ("" when it was not).
func ratio(v, raw float64, n int) string {
	if n == 0 || raw <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v/raw)
}

func (l benchLatency) String() string {
	return fmt.Sprintf("median %.1f µs, p99 %.1f µs", l.MedianMicros, l.P99Micros)
}
