package tests

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/qp"
)

// The benchmarks measure softnic between two devices on loopback beside a
// raw-UDP baseline measured in the same process: each softnic benchmark
// reports its figure and the ratio to the baseline ("x-raw"), so that
// the targets (issue 4) read directly off one run:
//
//	go test -run '^$' -bench . -benchtime 2s ./tests
//
// Throughput baseline: raw UDP, 4 KiB datagrams, sendmmsg/recvmmsg batches,
// no segmentation offload. Latency baseline: a raw Go UDP ping-pong.

var (
	rawThroughput = sync.OnceValues(func() (udptest.ThroughputResult, error) {
		return udptest.MeasureThroughput(500000, udptest.ThroughputConfig{})
	})
	rawPingPong = sync.OnceValues(func() (udptest.PingPongResult, error) {
		return udptest.MeasurePingPong(20000)
	})
)

func BenchmarkRawUDP4KBatched(b *testing.B) { udptest.Throughput(b, udptest.ThroughputConfig{}) }
func BenchmarkRawUDPPingPong(b *testing.B)  { udptest.PingPong(b) }

// pair is nicbench's pair between device a, opened embedded or attached
// to a daemon, and its peer b, with the device a for its counters.
type pair struct {
	nicbench.Pair
	da *nic.Device
}

func newPair(tb testing.TB, open, peer func(testing.TB, nic.Config) *nic.Device, depth int) pair {
	da := open(tb, nic.Config{})
	p, err := nicbench.NewPair(da, peer(tb, nic.Config{}), depth)
	if err != nil {
		tb.Fatal(err)
	}
	return pair{p, da}
}

// transfer runs n 64 KiB operations op and returns the time they took.
func (p pair) transfer(tb testing.TB, op qp.WROpcode, n int) time.Duration {
	d, err := p.Transfer(op, n)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

func benchThroughput(b *testing.B, op qp.WROpcode) {
	raw, err := rawThroughput()
	if err != nil {
		b.Fatal(err)
	}
	p := newPair(b, openDevice, openDevice, nicbench.StreamDepth)
	b.SetBytes(nicbench.StreamSize)
	b.ReportAllocs()
	b.ResetTimer()
	g := nicbench.Gbps(b.N, p.transfer(b, op, b.N))
	b.StopTimer()
	r, _ := p.da.Counter("retransmitted_pkts")
	b.ReportMetric(g, "Gbit/s")
	b.ReportMetric(g/raw.Gbps, "x-raw")
	b.ReportMetric(float64(r)/float64(b.N), "retx/op")
}

// BenchmarkWrite64K: RDMA WRITE of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkWrite64K(b *testing.B) { benchThroughput(b, qp.WRWrite) }

// BenchmarkRead64K: RDMA READ of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkRead64K(b *testing.B) { benchThroughput(b, qp.WRRead) }

// How a latency run learns of its completion: CQ.Wait, which sleeps until
// the device writes the CQ, or CQ.Poll in a loop (busy polling, what
// ib_write_lat does unless given -e).
type completion int

const (
	byWait completion = iota
	byPoll
)

func (c completion) String() string { return [...]string{"wait", "poll"}[c] }

// write8 is nicbench's Write8, learning of completions by by.
func (p pair) write8(tb testing.TB, rtts []time.Duration, by completion) {
	if err := p.Write8(rtts, by == byPoll); err != nil {
		tb.Fatal(err)
	}
}

// contextSwitches returns how many context switches the machine has made
// since it booted (the ctxt line of /proc/stat), or -1 where unknown.
func contextSwitches() int64 {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// BenchmarkWrite8Latency: one 8-byte RDMA WRITE at a time, from post to
// completion.
func BenchmarkWrite8Latency(b *testing.B) {
	raw, err := rawPingPong()
	if err != nil {
		b.Fatal(err)
	}
	for _, by := range []completion{byWait, byPoll} {
		b.Run("completion="+by.String(), func(b *testing.B) {
			p := newPair(b, openDevice, openDevice, 4)
			rtts := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			p.write8(b, rtts, by)
			b.StopTimer()
			l := nicbench.Percentiles(rtts)
			b.ReportMetric(float64(l.Median)/1e3, "median-µs")
			b.ReportMetric(float64(l.P99)/1e3, "p99-µs")
			b.ReportMetric(float64(l.Median)/float64(raw.Median), "x-raw")
		})
	}
}

// Attached mode (issue 7): the same operations from a device attached to a
// daemon (reached through its socket, shared rings and eventfds) and from
// an embedded device, in the same invocation. The daemon runs in a process
// of its own (as softnic serve does) or inside the benchmark's process.
// The peer is an embedded device in the benchmark's process, or, as a
// remote host's NIC would be, a daemon in a process of its own (for WRITE
// its program does nothing): then the embedded device's traffic crosses
// processes too, and the ratio is what attaching adds alone.
//
// The two devices take turns, in rounds of a tenth of the operations each:
// this machine's speed drifts by tens of percent within a minute, and
// alternating puts both under the same drift. "x-embedded" is the attached
// figure over the embedded one.
var daemons = []struct {
	name       string
	open, peer func(testing.TB, nic.Config) *nic.Device
}{
	{"daemon=process", attachedElsewhere, openDevice},
	{"daemon=process,busy-poll=50us", attachedToBusyPoller, openDevice},
	{"daemon=in-process", attachedDevice, openDevice},
	{"daemon=process,peer=process", attachedElsewhere, attachedElsewhere},
}

// inRounds is nicbench's InRounds, for runs that fail the benchmark
// themselves.
func inRounds(n int, run func(dev, start, k int)) {
	nicbench.InRounds(n, func(dev, start, k int) error {
		run(dev, start, k)
		return nil
	})
}

// BenchmarkAttachedWrite64K: BenchmarkWrite64K from an attached device
// (target: at least 80% of the embedded throughput). x-embedded is the
// median of the rounds' ratios; ctxsw/op counts the machine's context
// switches per operation (on Linux), which the process boundary adds: an
// embedded device's goroutines hand work to each other on running
// threads, while an attached device's daemon and process sleep and wake
// each other.
func BenchmarkAttachedWrite64K(b *testing.B) {
	for _, d := range daemons {
		b.Run(d.name, func(b *testing.B) {
			p := [2]pair{newPair(b, openDevice, d.peer, nicbench.StreamDepth), newPair(b, d.open, d.peer, nicbench.StreamDepth)}
			var took [2]time.Duration
			var switches [2]int64
			var last time.Duration // the embedded device's time in this round
			var ratios []float64
			b.ReportAllocs()
			b.ResetTimer()
			inRounds(b.N, func(dev, _, k int) {
				s0 := contextSwitches()
				t := p[dev].transfer(b, qp.WRWrite, k)
				took[dev] += t
				switches[dev] += contextSwitches() - s0
				if dev == nicbench.Attached {
					ratios = append(ratios, last.Seconds()/t.Seconds())
				}
				last = t
			})
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric(nicbench.Gbps(b.N, took[nicbench.Attached]), "Gbit/s")
			b.ReportMetric(nicbench.Gbps(b.N, took[nicbench.Embedded]), "embedded-Gbit/s")
			b.ReportMetric(ratios[len(ratios)/2], "x-embedded")
			if contextSwitches() >= 0 {
				b.ReportMetric(float64(switches[nicbench.Attached])/float64(b.N), "ctxsw/op")
				b.ReportMetric(float64(switches[nicbench.Embedded])/float64(b.N), "embedded-ctxsw/op")
			}
		})
	}
}

// BenchmarkAttachedWrite8Latency: BenchmarkWrite8Latency from an attached
// device (target: within 1.5× of the embedded latency), each way of
// learning of completions against the embedded device's same way.
// x-embedded is the ratio of the medians of all operations.
func BenchmarkAttachedWrite8Latency(b *testing.B) {
	for _, d := range daemons {
		for _, by := range []completion{byWait, byPoll} {
			b.Run(d.name+"/completion="+by.String(), func(b *testing.B) {
				p := [2]nicbench.Pair{newPair(b, openDevice, d.peer, 4).Pair, newPair(b, d.open, d.peer, 4).Pair}
				b.ReportAllocs()
				b.ResetTimer()
				l, err := nicbench.Write8Rounds(&p, b.N, by == byPoll)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				emb, att := l[nicbench.Embedded], l[nicbench.Attached]
				b.ReportMetric(float64(att.Median)/1e3, "median-µs")
				b.ReportMetric(float64(att.P99)/1e3, "p99-µs")
				b.ReportMetric(float64(emb.Median)/1e3, "embedded-median-µs")
				b.ReportMetric(float64(att.Median)/float64(emb.Median), "x-embedded")
			})
		}
	}
}

// BenchmarkFetchAdd16: FETCH_ADD with 16 outstanding.
func BenchmarkFetchAdd16(b *testing.B) {
	p := newPair(b, openDevice, openDevice, 16)
	b.ReportAllocs()
	b.ResetTimer()
	d, err := p.FetchAdd(b.N, 16)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/d.Seconds(), "ops/s")
}
