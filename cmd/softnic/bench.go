package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/qp"
)

// softnic bench measures softnic on this machine as the repository's Go
// benchmarks do (package nicbench), without a Go toolchain: two embedded
// devices on loopback in this process, beside raw UDP measured in the
// same run (package udptest), so that what it prints are ratios that
// compare across machines. With --attach it also measures a device
// attached to a running daemon against an embedded one, in alternating
// rounds, as BenchmarkAttached* do.

func defineBench(fs *flag.FlagSet) func(*invocation) error {
	ops := fs.Int("ops", 20000, "`N` operations per measurement (raw UDP: 25×N datagrams)")
	attach := fs.String("attach", "", "also measure a device attached to the daemon whose control socket is `PATH` against an embedded one")
	asJSON := fs.Bool("json", false, "print the results as one line of JSON")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		if *ops < nicbench.Rounds {
			return usagef("--ops %d: want at least %d", *ops, nicbench.Rounds)
		}
		res, err := runBench(inv.ctx, *ops, *attach)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(inv.stdout).Encode(res)
		}
		printBench(inv.stdout, res)
		return nil
	}
}

// benchResult is what softnic bench measured. Throughputs are in Gbit/s
// of payload, operation rates per second.
type benchResult struct {
	Ops         int          `json:"ops"`
	CPUs        int          `json:"cpus"`
	RawUDPGbps  float64      `json:"raw_udp_gbps"` // 4 KiB datagrams, sendmmsg/recvmmsg, no offload
	RawPingPong benchLatency `json:"raw_udp_ping_pong"`
	WriteGbps   float64      `json:"write_64k_gbps"`
	ReadGbps    float64      `json:"read_64k_gbps"`
	Write8Wait  benchLatency `json:"write_8_wait"`
	Write8Poll  benchLatency `json:"write_8_poll"`
	FetchAddOps float64      `json:"fetch_add_16_ops"`
	Attached    *benchAttach `json:"attached,omitempty"`
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

// runBench takes the measurements, with ops operations each; control, if
// set, is the daemon to attach to as well.
func runBench(ctx context.Context, ops int, control string) (*benchResult, error) {
	res := &benchResult{Ops: ops, CPUs: runtime.NumCPU()}
	raw, err := udptest.MeasureThroughput(25*ops, udptest.ThroughputConfig{})
	if err != nil {
		return nil, fmt.Errorf("raw UDP throughput: %w", err)
	}
	res.RawUDPGbps = raw.Gbps
	ping, err := udptest.MeasurePingPong(ops)
	if err != nil {
		return nil, fmt.Errorf("raw UDP ping-pong: %w", err)
	}
	res.RawPingPong = benchLatency{MedianMicros: micros(ping.Median), P99Micros: micros(ping.P99)}

	var devs benchDevices
	defer devs.close()
	p, err := devs.pair(nicbench.StreamDepth)
	if err != nil {
		return nil, err
	}
	steps := []func() error{
		func() error {
			return measureGbps(&res.WriteGbps, ops, func() (time.Duration, error) { return p.Transfer(qp.WRWrite, ops) })
		},
		func() error {
			return measureGbps(&res.ReadGbps, ops, func() (time.Duration, error) { return p.Transfer(qp.WRRead, ops) })
		},
		func() error { return measureLatency(&res.Write8Wait, p, ops, false) },
		func() error { return measureLatency(&res.Write8Poll, p, ops, true) },
		func() error {
			d, err := p.FetchAdd(ops, 16)
			res.FetchAddOps = float64(ops) / d.Seconds()
			return err
		},
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := step(); err != nil {
			return nil, err
		}
	}
	if control != "" {
		if res.Attached, err = benchAttached(ctx, &devs, ops, control); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func measureGbps(dst *float64, ops int, run func() (time.Duration, error)) error {
	d, err := run()
	*dst = nicbench.Gbps(ops, d)
	return err
}

func measureLatency(dst *benchLatency, p nicbench.Pair, ops int, poll bool) error {
	rtts := make([]time.Duration, ops)
	if err := p.Write8(rtts, poll); err != nil {
		return err
	}
	*dst = latencyOf(nicbench.Percentiles(rtts))
	return nil
}

// benchAttached measures a device attached to the daemon at control
// against an embedded one, each toward an embedded peer of its own on the
// daemon's address, in alternating rounds.
func benchAttached(ctx context.Context, devs *benchDevices, ops int, control string) (*benchAttach, error) {
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
	var pairs [2]nicbench.Pair
	for dev := range pairs {
		a := att
		if dev == nicbench.Embedded {
			if a, err = devs.open(host); err != nil {
				return nil, err
			}
		}
		var peer *nic.Device
		if peer, err = devs.open(host); err != nil {
			return nil, err
		}
		if pairs[dev], err = nicbench.NewPair(a, peer, nicbench.StreamDepth); err != nil {
			return nil, err
		}
	}
	var took [2]time.Duration
	err = nicbench.InRounds(ops, func(dev, _, k int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := pairs[dev].Transfer(qp.WRWrite, k)
		took[dev] += d
		return err
	})
	if err != nil {
		return nil, err
	}
	res.WriteGbps, res.EmbeddedGbps = nicbench.Gbps(ops, took[nicbench.Attached]), nicbench.Gbps(ops, took[nicbench.Embedded])
	res.WriteRatio = res.WriteGbps / res.EmbeddedGbps
	for _, m := range []struct {
		att, emb *benchLatency
		poll     bool
	}{{&res.Write8Wait, &res.EmbeddedWait, false}, {&res.Write8Poll, &res.EmbeddedPoll, true}} {
		l, err := nicbench.Write8Rounds(&pairs, ops, m.poll)
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

// pair opens two embedded devices on loopback and connects them.
func (b *benchDevices) pair(depth int) (nicbench.Pair, error) {
	var devs [2]*nic.Device
	for i := range devs {
		var err error
		if devs[i], err = b.open(nic.DefaultAddr.Addr()); err != nil {
			return nicbench.Pair{}, err
		}
	}
	return nicbench.NewPair(devs[0], devs[1], depth)
}

func (b *benchDevices) close() {
	for _, d := range b.opened {
		d.Close()
	}
}

// printBench prints res as two tables: softnic against raw UDP, and the
// attached device against the embedded one.
func printBench(w io.Writer, res *benchResult) {
	fmt.Fprintf(w, "softnic bench: two devices on loopback, %d operations per measurement, raw UDP measured in the same run (%d CPUs)\n\n", res.Ops, res.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tSOFTNIC\tRAW UDP\tRATIO")
	raw := fmt.Sprintf("%.1f Gbit/s (4 KiB datagrams, batched)", res.RawUDPGbps)
	fmt.Fprintf(tw, "RDMA WRITE, 64 KiB, MTU %d, %d in flight\t%.1f Gbit/s\t%s\t%.2f×\n", nicbench.MTU, nicbench.StreamDepth, res.WriteGbps, raw, res.WriteGbps/res.RawUDPGbps)
	fmt.Fprintf(tw, "RDMA READ, 64 KiB, MTU %d, %d in flight\t%.1f Gbit/s\t%s\t%.2f×\n", nicbench.MTU, nicbench.StreamDepth, res.ReadGbps, raw, res.ReadGbps/res.RawUDPGbps)
	ping := fmt.Sprintf("ping-pong %s", res.RawPingPong)
	fmt.Fprintf(tw, "8-byte RDMA WRITE, post to completion, CQ.Wait\t%s\t%s\t%.2f×\n", res.Write8Wait, ping, res.Write8Wait.MedianMicros/res.RawPingPong.MedianMicros)
	fmt.Fprintf(tw, "the same, busy-polling CQ.Poll\t%s\t%s\t%.2f×\n", res.Write8Poll, ping, res.Write8Poll.MedianMicros/res.RawPingPong.MedianMicros)
	fmt.Fprintf(tw, "FETCH_ADD, 16 outstanding\t%.0f ops/s\t\t\n", res.FetchAddOps)
	tw.Flush()
	a := res.Attached
	if a == nil {
		return
	}
	fmt.Fprintf(w, "\nattached to the daemon at %s (its device on %s) against an embedded device, in %d alternating rounds:\n\n", a.Control, a.Daemon, nicbench.Rounds)
	fmt.Fprintln(tw, "MEASUREMENT\tATTACHED\tEMBEDDED\tRATIO")
	fmt.Fprintf(tw, "RDMA WRITE, 64 KiB, MTU %d, %d in flight\t%.1f Gbit/s\t%.1f Gbit/s\t%.2f×\n", nicbench.MTU, nicbench.StreamDepth, a.WriteGbps, a.EmbeddedGbps, a.WriteRatio)
	fmt.Fprintf(tw, "8-byte RDMA WRITE, CQ.Wait\t%s\t%s\t%.2f×\n", a.Write8Wait, a.EmbeddedWait, a.Write8Wait.MedianMicros/a.EmbeddedWait.MedianMicros)
	fmt.Fprintf(tw, "8-byte RDMA WRITE, CQ.Poll\t%s\t%s\t%.2f×\n", a.Write8Poll, a.EmbeddedPoll, a.Write8Poll.MedianMicros/a.EmbeddedPoll.MedianMicros)
	tw.Flush()
}

func (l benchLatency) String() string {
	return fmt.Sprintf("median %.1f µs, p99 %.1f µs", l.MedianMicros, l.P99Micros)
}
