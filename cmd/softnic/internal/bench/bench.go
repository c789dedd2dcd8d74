// Package bench is softnic bench: it measures softnic on this machine as
// the repository's Go benchmarks do (package nicbench), without a Go
// toolchain: fi_rmabw's workloads from a device in this process to a peer
// device in a process of its own (this binary run again as its hidden
// command bench-peer, Config.PeerCommand, which ends when this process
// does), or with --one-process to a device in this
// process, beside raw UDP measured in the same run (package udptest), so
// that what it prints are ratios that compare across machines and figures
// that compare with fi_rmabw's line by line. With --attach it also
// measures a device attached to a running daemon against an embedded one,
// in alternating rounds, as BenchmarkAttached* do.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/verbs"
)

// RawKeys are the keys of the raw-UDP limits.
var RawKeys = []string{"raw_udp_gbps", "raw_udp_gso_gbps", "raw_udp_ping_pong", "raw_udp_ping_pong_poll"}

// Keys returns the keys of everything bench measures: the raw-UDP limits,
// then nicbench's workloads.
func Keys() []string {
	keys := slices.Clone(RawKeys)
	for _, w := range nicbench.Workloads {
		keys = append(keys, w.Key)
	}
	return keys
}

// Config is what softnic bench was asked to do.
type Config struct {
	Limit      nicbench.Limit
	Runs       int
	OneProcess bool
	PeerWaits  bool
	Only       []string // keys; nil: everything
	Attach     string
	// PeerCommand runs this binary as the peer process: its hidden
	// command serving nicbench.ServePeer on its stdin and stdout.
	PeerCommand string
	// PeerCPUProfile, if set, is where the peer process writes its CPU
	// profile (its --cpuprofile).
	PeerCPUProfile string
}

func (c *Config) wants(key string) bool { return c.Only == nil || slices.Contains(c.Only, key) }

// Result is what softnic bench measured: each workload's figures,
// one per run, in the order of nicbench.Workloads, and the raw-UDP limits.
type Result struct {
	cfg     Config
	cpus    int
	figures []benchFigures
	// The raw-UDP limits: 4 KiB datagrams with sendmmsg/recvmmsg and no
	// offload, the same coalesced by GSO and GRO, and a ping-pong with the
	// peer's process (or this one), with both sides sleeping in their
	// reads and with both busy-polling.
	rawGbps, rawGSOGbps          []float64
	rawPingPong, rawPingPongPoll []udptest.PingPongResult
	attached                     *AttachResult
}

type benchFigures struct {
	w    nicbench.Workload
	runs []nicbench.Figure
	// retries and resent are the initiator's go-back-N retries
	// (completer_retry_err) and the request packets they sent again
	// (retransmitted_pkts) over the runs: on loopback, where nothing is
	// lost but what a full socket drops, each is a timeout or a drop.
	retries, resent uint64
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

func (r *Result) raw() (gbps, gso float64, ping, pingPoll Latency) {
	gbps, _, _ = median(r.rawGbps, func(x float64) float64 { return x })
	gso, _, _ = median(r.rawGSOGbps, func(x float64) float64 { return x })
	return gbps, gso, pingLatency(r.rawPingPong), pingLatency(r.rawPingPongPoll)
}

// pingLatency is the median over runs of the ping-pongs' medians and
// 99th percentiles.
func pingLatency(runs []udptest.PingPongResult) (l Latency) {
	l.MedianMicros, _, _ = median(runs, func(x udptest.PingPongResult) float64 { return micros(x.Median) })
	l.P99Micros, _, _ = median(runs, func(x udptest.PingPongResult) float64 { return micros(x.P99) })
	return l
}

// configName names where the peer device was, and whether a peer process
// polled.
func (c *Config) configName() string {
	switch {
	case c.OneProcess:
		return "one-process"
	case c.PeerWaits:
		return "peer-process-waiting"
	}
	return "peer-process"
}

// JSON returns the result as softnic bench --json prints it: a workload's
// figure under its key (Gbit/s, operations per second, or a latency's
// median and 99th percentile in µs), each the median of the runs.
func (r *Result) JSON() map[string]any {
	m := map[string]any{
		"config": r.cfg.configName(), "cpus": r.cpus, "runs": r.cfg.Runs,
		"time_s": r.cfg.Limit.Time.Seconds(), "ops": r.cfg.Limit.Ops,
	}
	gbps, gso, ping, pingPoll := r.raw()
	if len(r.rawGbps) > 0 {
		m["raw_udp_gbps"] = gbps
	}
	if len(r.rawGSOGbps) > 0 {
		m["raw_udp_gso_gbps"] = gso
	}
	if len(r.rawPingPong) > 0 {
		m["raw_udp_ping_pong"] = ping
	}
	if len(r.rawPingPongPoll) > 0 {
		m["raw_udp_ping_pong_poll"] = pingPoll
	}
	for i := range r.figures {
		f := &r.figures[i]
		if f.w.Kind() == nicbench.Delay {
			m[f.w.Key] = Latency{MedianMicros: f.value(), P99Micros: f.p99()}
		} else {
			m[f.w.Key] = f.value()
		}
	}
	if r.attached != nil {
		m["attached"] = r.attached
	}
	return m
}

// AttachResult compares a device attached to a daemon with an embedded one.
type AttachResult struct {
	Control      string  `json:"control"`
	Daemon       string  `json:"daemon"` // the daemon device's address
	WriteGbps    float64 `json:"write_64k_gbps"`
	EmbeddedGbps float64 `json:"embedded_write_64k_gbps"`
	Write8Wait   Latency `json:"write_8_wait"`
	EmbeddedWait Latency `json:"embedded_write_8_wait"`
	Write8Poll   Latency `json:"write_8_poll"`
	EmbeddedPoll Latency `json:"embedded_write_8_poll"`
	WriteRatio   float64 `json:"write_64k_ratio"` // attached over embedded
}

// Latency is a round trip's median and 99th percentile.
type Latency struct {
	MedianMicros float64 `json:"median_us"`
	P99Micros    float64 `json:"p99_us"`
}

func latencyOf(l nicbench.Latency) Latency {
	return Latency{MedianMicros: micros(l.Median), P99Micros: micros(l.P99)}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// maxRTTs bounds the round trips a latency keeps, as fi_rmabw's 200000.
const maxRTTs = 200000

// Run takes the measurements cfg asks for; the peer process, if any,
// writes its errors to stderr.
func Run(ctx context.Context, cfg Config, stderr io.Writer) (*Result, error) {
	res := &Result{cfg: cfg, cpus: runtime.NumCPU()}
	var devs benchDevices
	defer devs.close()
	a, err := devs.open(nic.DefaultAddr.Addr())
	if err != nil {
		return nil, err
	}
	var target nicbench.Target
	var echo, echoPoll netip.AddrPort
	if cfg.OneProcess {
		b, err := devs.open(nic.DefaultAddr.Addr())
		if err != nil {
			return nil, err
		}
		if target, err = nicbench.NewDeviceTarget(b); err != nil {
			return nil, err
		}
	} else {
		p, err := startBenchPeer(stderr, &cfg)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		target, echo, echoPoll = p, p.Echo(), p.EchoPoll()
	}
	in, err := nicbench.Dial(a, target, nicbench.MaxQPs)
	if err != nil {
		return nil, err
	}
	rtts := make([]time.Duration, maxRTTs)
	for _, w := range nicbench.Workloads {
		if cfg.wants(w.Key) {
			res.figures = append(res.figures, benchFigures{w: w})
		}
	}
	// The runs go round the workloads, the raw-UDP limits first in each
	// round, rather than one workload's runs one after the other: this
	// VM's host changes speed from one half-minute to the next, and a
	// median of runs taken apart is not one phase's figure.
	for range cfg.Runs {
		if err := res.measureRaw(ctx, echo, echoPoll); err != nil {
			return nil, err
		}
		for i := 0; i < len(res.figures); {
			series := res.figures[i:seriesEnd(res.figures, i)]
			i += len(series)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if len(series) > 1 {
				if err := measureInTurns(ctx, series, in, cfg.Limit, rtts); err != nil {
					return nil, err
				}
				continue
			}
			f := &series[0]
			before := retryCounts(a)
			fig, err := f.w.Run(in, cfg.Limit, rtts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.w.Name, err)
			}
			f.runs = append(f.runs, fig)
			f.countRetries(before, retryCounts(a))
		}
	}
	if cfg.Attach != "" {
		n := cmp.Or(cfg.Limit.Ops, 20000)
		if res.attached, err = benchAttached(ctx, &devs, n, cfg.Attach); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// seriesEnd returns the end of the run of figures from i on whose
// workloads are of one series (nicbench.Workload.Series), i+1 for a
// workload of none.
func seriesEnd(figs []benchFigures, i int) int {
	j := i + 1
	for series := figs[i].w.Series; series != "" && j < len(figs) && figs[j].w.Series == series; j++ {
	}
	return j
}

// turns is how many turns each workload of a series takes in a run.
const turns = 4

// measureInTurns measures the workloads of one series, whose figures are
// read against each other (16 QPs against one, busy-polling against
// waiting), in turns: each runs for a quarter of lim, then the next,
// round and round, and its figure is what all its turns moved in all
// their time, or the percentiles of all their round trips. This VM's host
// switches between two speeds every few tens of seconds, and one speed
// change between two workloads measured one after the other made the
// ratio of their figures 0.58 or 1.7 (and put a busy-polled latency
// above a waited one); in turns, a change falls on each of them alike.
// Each turn ends with its window completed, as a run does. rtts is
// scratch room for one turn's round trips.
func measureInTurns(ctx context.Context, series []benchFigures, in *nicbench.Initiator, lim nicbench.Limit, rtts []time.Duration) error {
	turn := nicbench.Limit{Time: lim.Time / turns, Ops: (lim.Ops + turns - 1) / turns}
	ops := make([]int, len(series))
	took := make([]time.Duration, len(series))
	trips := make([][]time.Duration, len(series))
	for range turns {
		for i := range series {
			f := &series[i]
			if err := ctx.Err(); err != nil {
				return err
			}
			w := f.w
			before := retryCounts(in.Dev)
			var n int
			var err error
			if w.Kind() == nicbench.Delay {
				n, err = in.Latency(w.Op, w.By, turn, rtts)
				trips[i] = append(trips[i], rtts[:n]...)
			} else {
				var d time.Duration
				n, d, err = in.Throughput(w.Op, w.Size, w.Window, w.QPs, w.By, turn)
				took[i] += d
			}
			if err != nil {
				return fmt.Errorf("%s: %w", w.Name, err)
			}
			f.countRetries(before, retryCounts(in.Dev))
			ops[i] += n
		}
	}
	for i := range series {
		f := &series[i]
		switch {
		case f.w.Kind() != nicbench.Delay:
			f.runs = append(f.runs, nicbench.Figure{Value: nicbench.Gbps(ops[i], f.w.Size, took[i]), Ops: ops[i]})
		case ops[i] == 0:
			return fmt.Errorf("%s: no operation completed", f.w.Name)
		default:
			f.runs = append(f.runs, nicbench.DelayFigure(trips[i]))
		}
	}
	return nil
}

func (f *benchFigures) countRetries(before, after [2]uint64) {
	f.retries += after[0] - before[0]
	f.resent += after[1] - before[1]
}

// retryCounts returns d's completer_retry_err and retransmitted_pkts.
func retryCounts(d *nic.Device) [2]uint64 {
	var c [2]uint64
	for _, v := range d.Counters() {
		switch v.Name {
		case verbs.CompleterRetryErr.String():
			c[0] = v.Value
		case verbs.RetransmittedPkts.String():
			c[1] = v.Value
		}
	}
	return c
}

// rawDatagrams is how many datagrams a raw throughput run sends: about a
// second's worth on a machine that moves 4 KiB datagrams at 10 Gbit/s
// (25 per operation, at most, with --ops).
const rawDatagrams = 300000

// measureRaw measures the raw-UDP limits cfg asks for once; the
// ping-pongs against echo and echoPoll, if valid.
func (r *Result) measureRaw(ctx context.Context, echo, echoPoll netip.AddrPort) error {
	pings, datagrams := maxRTTs/4, rawDatagrams
	if r.cfg.Limit.Ops > 0 {
		pings, datagrams = min(pings, r.cfg.Limit.Ops), min(datagrams, 25*r.cfg.Limit.Ops)
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
			p, err := udptest.MeasurePingPongTo(pings, echo) // its own echo when echo is not valid
			r.rawPingPong = append(r.rawPingPong, p)
			return err
		}},
		{"raw_udp_ping_pong_poll", func() error {
			p, err := udptest.MeasurePingPongPollTo(pings, echoPoll)
			r.rawPingPongPoll = append(r.rawPingPongPoll, p)
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

// startBenchPeer starts the peer process with cfg.PeerCommand, sleeping
// instead of polling if cfg.PeerWaits, profiled if cfg.PeerCPUProfile.
func startBenchPeer(stderr io.Writer, cfg *Config) (*nicbench.Peer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the peer process: %w", err)
	}
	cmd := exec.Command(exe, cfg.PeerCommand)
	if cfg.PeerWaits {
		cmd.Args = append(cmd.Args, "--wait")
	}
	if cfg.PeerCPUProfile != "" {
		cmd.Args = append(cmd.Args, "--cpuprofile", cfg.PeerCPUProfile)
	}
	cmd.Stderr = stderr
	return nicbench.StartPeer(cmd)
}

// benchAttached measures a device attached to the daemon at control
// against an embedded one, each toward an embedded peer of its own on the
// daemon's address, in alternating rounds of n operations in all.
func benchAttached(ctx context.Context, devs *benchDevices, n int, control string) (*AttachResult, error) {
	att, err := nic.Open(nic.Config{Attach: control})
	if err != nil {
		return nil, err
	}
	devs.opened = append(devs.opened, att)
	host := att.Addr().Addr()
	if host.IsUnspecified() {
		return nil, fmt.Errorf("the daemon at %s listens on %v: give softnic serve an address (--listen) to bench against", control, att.Addr())
	}
	res := &AttachResult{Control: control, Daemon: att.Addr().String()}
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
		_, d, err := ins[dev].Throughput(verbs.WRWrite, nicbench.LargeSize, nicbench.Window, 1, nicbench.Poll, nicbench.Limit{Ops: k})
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
		att, emb *Latency
		by       nicbench.Completion
	}{{&res.Write8Wait, &res.EmbeddedWait, nicbench.Wait}, {&res.Write8Poll, &res.EmbeddedPoll, nicbench.Poll}} {
		l, err := nicbench.LatencyRounds(&ins, verbs.WRWrite, m.by, n)
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

// Print prints res as a table of softnic against raw UDP, fi_rmabw's
// RESULT lines for the same figures, and the attached device against the
// embedded one.
func Print(w io.Writer, res *Result) {
	cfg := &res.cfg
	where := "the peer device in a process of its own, which polls as fi_rmabw's target does"
	switch {
	case cfg.OneProcess:
		where = "both devices in this process"
	case cfg.PeerWaits:
		where = "the peer device in a process of its own, which sleeps until packets come"
	}
	limit := fmt.Sprintf("%v", cfg.Limit.Time)
	if cfg.Limit.Ops > 0 {
		limit = fmt.Sprintf("%d operations", cfg.Limit.Ops)
		if cfg.Limit.Time > 0 {
			limit += fmt.Sprintf(" or %v", cfg.Limit.Time)
		}
	}
	fmt.Fprintf(w, "softnic bench (%s): %s, on loopback; each figure the median of %d runs of %s; raw UDP measured in the same run; %d CPUs\n\n",
		cfg.configName(), where, cfg.Runs, limit, res.cpus)
	gbps, gso, ping, pingPoll := res.raw()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSOFTNIC\tRATIO TO RAW UDP\tOPS\tRETRIES (PACKETS)")
	if len(res.rawGbps) > 0 {
		fmt.Fprintf(tw, "raw UDP: 4 KiB datagrams, sendmmsg/recvmmsg\t%.1f Gbit/s\t\t\t\n", gbps)
	}
	if len(res.rawGSOGbps) > 0 {
		fmt.Fprintf(tw, "raw UDP: the same coalesced by GSO and GRO\t%.1f Gbit/s\t\t\t\n", gso)
	}
	if len(res.rawPingPong) > 0 {
		fmt.Fprintf(tw, "raw UDP: 8-byte ping-pong\t%s\t\t\t\n", ping)
	}
	if len(res.rawPingPongPoll) > 0 {
		fmt.Fprintf(tw, "raw UDP: 8-byte ping-pong, busy-polled\t%s\t\t\t\n", pingPoll)
	}
	for i := range res.figures {
		f := &res.figures[i]
		ops := fmt.Sprintf("%.0f\t%d (%d)", f.ops(), f.retries, f.resent)
		switch f.w.Kind() {
		case nicbench.Bandwidth:
			fmt.Fprintf(tw, "%s\t%.1f Gbit/s\t%s\t%s\n", f.w.Name, f.value(), ratio(f.value(), gbps, len(res.rawGbps)), ops)
		case nicbench.Rate:
			fmt.Fprintf(tw, "%s\t%.3f Mops/s\t\t%s\n", f.w.Name, f.value()/1e6, ops)
		case nicbench.Delay:
			// A latency learnt by busy-polling compares with the
			// busy-polled ping-pong, one learnt by waiting with the one
			// whose sides sleep.
			floor, n := ping.MedianMicros, len(res.rawPingPong)
			if f.w.By == nicbench.Poll {
				floor, n = pingPoll.MedianMicros, len(res.rawPingPongPoll)
			}
			l := Latency{MedianMicros: f.value(), P99Micros: f.p99()}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.w.Name, l, ratio(f.value(), floor, n), ops)
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

func (l Latency) String() string {
	return fmt.Sprintf("median %.1f µs, p99 %.1f µs", l.MedianMicros, l.P99Micros)
}
