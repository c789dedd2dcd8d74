package tests

import (
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/nic/udp/udptest"
	"github.com/softnic/softnic/verbs"
)

// The benchmarks measure softnic with nicbench's workloads (fi_rmabw's,
// the ones softnic bench runs) beside raw-UDP baselines measured in the
// same process: each reports its figure and the ratio to the baseline
// ("x-raw"), so that the targets read directly off one run:
//
//	go test -run '^$' -bench BenchmarkWorkloads -benchtime 1s ./tests
//
// Throughput baseline: raw UDP, 4 KiB datagrams, sendmmsg/recvmmsg batches,
// no segmentation offload. Latency baseline: a raw Go UDP ping-pong, with
// an echo socket in the peer's process when it has one; a latency learnt by
// busy-polling also reports its ratio to the same ping-pong busy-polled on
// both sides ("x-raw-poll").

var rawThroughput = sync.OnceValues(func() (udptest.ThroughputResult, error) {
	return udptest.MeasureThroughput(500000, udptest.ThroughputConfig{})
})

func BenchmarkRawUDP4KBatched(b *testing.B) { udptest.Throughput(b, udptest.ThroughputConfig{}) }
func BenchmarkRawUDPPingPong(b *testing.B)  { udptest.PingPong(b) }

// envBenchPeer is set in the peer processes BenchmarkWorkloads starts
// (TestBenchPeer).
const envBenchPeer = "SOFTNIC_TEST_BENCH_PEER"

// TestBenchPeer is not a test of its own: it is the body of the peer
// process of BenchmarkWorkloads (this test binary run again with
// -test.run=^TestBenchPeer$), as softnic bench-peer is softnic bench's.
func TestBenchPeer(t *testing.T) {
	if os.Getenv(envBenchPeer) == "" {
		t.Skip("run by BenchmarkWorkloads as its peer process")
	}
	if err := nicbench.ServePeer(os.Stdin, os.Stdout, nic.Config{Addr: loopback}, nicbench.Poll); err != nil {
		t.Fatal(err)
	}
}

// peerProcess starts a peer device in a process of its own.
func peerProcess(tb testing.TB) *nicbench.Peer {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPeer$")
	cmd.Env = append(os.Environ(), envBenchPeer+"=1")
	cmd.Stderr = os.Stderr
	p, err := nicbench.StartPeer(cmd)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkWorkloads runs every workload of nicbench, from an embedded
// device to a peer device in a process of its own (peer=process, as
// softnic bench does by default and fi_rmabw's target is) or in this one
// (peer=in-process, softnic bench --one-process). A throughput reports
// Gbit/s (and retransmitted packets per operation), a rate ops/s, a
// latency its median and p99 in µs; each its ratio to raw UDP.
func BenchmarkWorkloads(b *testing.B) {
	raw, err := rawThroughput()
	if err != nil {
		b.Fatal(err)
	}
	for _, peer := range []string{"process", "in-process"} {
		b.Run("peer="+peer, func(b *testing.B) {
			a := nictest.OpenDevice(b, nic.Config{})
			var target nicbench.Target
			var echo, echoPoll netip.AddrPort // not valid: the ping-pongs' own
			if peer == "process" {
				p := peerProcess(b)
				target, echo, echoPoll = p, p.Echo(), p.EchoPoll()
			} else {
				target, err = nicbench.NewDeviceTarget(nictest.OpenDevice(b, nic.Config{}))
			}
			if err != nil {
				b.Fatal(err)
			}
			var ping, pingPoll udptest.PingPongResult
			if ping, err = udptest.MeasurePingPongTo(20000, echo); err == nil {
				pingPoll, err = udptest.MeasurePingPongPollTo(20000, echoPoll)
			}
			if err != nil {
				b.Fatal(err)
			}
			in, err := nicbench.Dial(a, target, nicbench.MaxQPs)
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range nicbench.Workloads {
				b.Run(w.Key, func(b *testing.B) { runWorkload(b, in, w, raw.Gbps, ping.Median, pingPoll.Median) })
			}
		})
	}
}

// runWorkload runs b.N operations of w and reports its figures, with
// their ratio to rawGbps or rawRTT (and a busy-polled latency to
// rawPollRTT too).
func runWorkload(b *testing.B, in *nicbench.Initiator, w nicbench.Workload, rawGbps float64, rawRTT, rawPollRTT time.Duration) {
	rtts := make([]time.Duration, b.N)
	retx0, _ := in.Dev.Counter("retransmitted_pkts")
	b.ReportAllocs()
	b.ResetTimer()
	f, err := w.Run(in, nicbench.Limit{Ops: b.N}, rtts)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	switch w.Kind() {
	case nicbench.Bandwidth:
		b.SetBytes(int64(w.Size))
		retx, _ := in.Dev.Counter("retransmitted_pkts")
		b.ReportMetric(f.Value, "Gbit/s")
		b.ReportMetric(f.Value/rawGbps, "x-raw")
		b.ReportMetric(float64(retx-retx0)/float64(b.N), "retx/op")
	case nicbench.Rate:
		b.ReportMetric(f.Value, "ops/s")
	case nicbench.Delay:
		b.ReportMetric(f.Value, "median-µs")
		b.ReportMetric(f.P99, "p99-µs")
		b.ReportMetric(f.Value/micros(rawRTT), "x-raw")
		if w.By == nicbench.Poll {
			b.ReportMetric(f.Value/micros(rawPollRTT), "x-raw-poll")
		}
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// newInitiator connects an initiator on a device that open opens to a
// target on one that peer opens.
func newInitiator(tb testing.TB, open, peer func(testing.TB, nic.Config) *nic.Device) *nicbench.Initiator {
	tb.Helper()
	t, err := nicbench.NewDeviceTarget(peer(tb, nic.Config{}))
	if err != nil {
		tb.Fatal(err)
	}
	in, err := nicbench.Dial(open(tb, nic.Config{}), t, 1)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// transfer runs n 64 KiB WRITEs, 64 in flight, and returns the time they
// took.
func transfer(tb testing.TB, in *nicbench.Initiator, n int) time.Duration {
	_, d, err := in.Throughput(verbs.WRWrite, nicbench.LargeSize, nicbench.Window, 1, nicbench.Poll, nicbench.Limit{Ops: n})
	if err != nil {
		tb.Fatal(err)
	}
	return d
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
	{"daemon=process", attachedElsewhere, nictest.OpenDevice},
	{"daemon=process,busy-poll=50us", attachedToBusyPoller, nictest.OpenDevice},
	{"daemon=in-process", attachedDevice, nictest.OpenDevice},
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

// BenchmarkAttachedWrite64K: 64 KiB WRITEs, 64 in flight, from an attached device
// (target: at least 80% of the embedded throughput). x-embedded is the
// median of the rounds' ratios; ctxsw/op counts the machine's context
// switches per operation (on Linux), which the process boundary adds: an
// embedded device's goroutines hand work to each other on running
// threads, while an attached device's daemon and process sleep and wake
// each other.
func BenchmarkAttachedWrite64K(b *testing.B) {
	for _, d := range daemons {
		b.Run(d.name, func(b *testing.B) {
			p := [2]*nicbench.Initiator{newInitiator(b, nictest.OpenDevice, d.peer), newInitiator(b, d.open, d.peer)}
			var took [2]time.Duration
			var switches [2]int64
			var last time.Duration // the embedded device's time in this round
			var ratios []float64
			b.ReportAllocs()
			b.ResetTimer()
			inRounds(b.N, func(dev, _, k int) {
				s0 := contextSwitches()
				t := transfer(b, p[dev], k)
				took[dev] += t
				switches[dev] += contextSwitches() - s0
				if dev == nicbench.Attached {
					ratios = append(ratios, last.Seconds()/t.Seconds())
				}
				last = t
			})
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric(nicbench.Gbps(b.N, nicbench.LargeSize, took[nicbench.Attached]), "Gbit/s")
			b.ReportMetric(nicbench.Gbps(b.N, nicbench.LargeSize, took[nicbench.Embedded]), "embedded-Gbit/s")
			b.ReportMetric(ratios[len(ratios)/2], "x-embedded")
			if contextSwitches() >= 0 {
				b.ReportMetric(float64(switches[nicbench.Attached])/float64(b.N), "ctxsw/op")
				b.ReportMetric(float64(switches[nicbench.Embedded])/float64(b.N), "embedded-ctxsw/op")
			}
		})
	}
}

// BenchmarkAttachedWrite8Latency: 8-byte WRITE latency from an attached
// device (target: within 1.5× of the embedded latency), each way of
// learning of completions against the embedded device's same way.
// x-embedded is the ratio of the medians of all operations.
func BenchmarkAttachedWrite8Latency(b *testing.B) {
	for _, d := range daemons {
		for _, by := range []nicbench.Completion{nicbench.Wait, nicbench.Poll} {
			b.Run(d.name+"/completion="+by.String(), func(b *testing.B) {
				p := [2]*nicbench.Initiator{newInitiator(b, nictest.OpenDevice, d.peer), newInitiator(b, d.open, d.peer)}
				b.ReportAllocs()
				b.ResetTimer()
				l, err := nicbench.LatencyRounds(&p, verbs.WRWrite, by, b.N)
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
