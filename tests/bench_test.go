package tests

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
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

// benchPair opens device a with open (embedded or attached to a daemon)
// and device b embedded, with one connected RC QP pair and a 64 MiB region
// on each side.
func benchPair(tb testing.TB, open func(testing.TB, nic.Config) *nic.Device, depth int) (link, *nic.MR, *nic.MR, *nic.Device, *nic.Device) {
	da := open(tb, nic.Config{})
	db := openDevice(tb, nic.Config{})
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	ma, err := pa.AllocMR(64<<20, allAccess)
	if err != nil {
		tb.Fatal(err)
	}
	mb, err := pb.AllocMR(64<<20, allAccess)
	if err != nil {
		tb.Fatal(err)
	}
	l := connectPair(tb, da, db, pa, pb, nic.ConnectOptions{MTU: 4096, Timeout: 12}, depth)
	return l, ma, mb, da, db
}

// streamOps keeps depth operations built by mk in flight until n have
// completed. mk fills in the WR (and its one SGE) for operation i; the
// harness reuses them, so that the benchmark's allocations are the
// device's.
func streamOps(tb testing.TB, l link, n, depth int, mk func(i int, wr *qp.SendWR)) {
	ctx := context.Background()
	wcs := make([]qp.WC, depth)
	posted, done := 0, 0
	var wr qp.SendWR
	wr.SGL = make([]qp.SGE, 1)
	for done < n {
		for posted < n && posted-done < depth {
			mk(posted, &wr)
			if err := l.a.PostSend(&wr); err != nil {
				tb.Fatal(err)
			}
			posted++
		}
		k, err := l.acq.Wait(ctx, wcs)
		if err != nil {
			tb.Fatal(err)
		}
		for i := range wcs[:k] {
			if wcs[i].Status != qp.Success {
				tb.Fatalf("completion %v", wcs[i].String())
			}
		}
		done += k
	}
}

// throughput runs n 64 KiB operations op, 32 in flight, from a device
// opened by open, and returns Gbit/s and retransmitted packets per
// operation; setup is outside the timed part (b.ResetTimer for a
// benchmark).
func throughput(tb testing.TB, open func(testing.TB, nic.Config) *nic.Device, op qp.WROpcode, n int) (gbps, retx float64) {
	const size, depth = 64 << 10, 32
	l, ma, mb, da, _ := benchPair(tb, open, depth)
	if b, ok := tb.(*testing.B); ok {
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		b.StartTimer() // stopped by an earlier run of the same benchmark
	}
	start := time.Now()
	streamOps(tb, l, n, depth, func(i int, wr *qp.SendWR) {
		off := (i % 512) * size
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey = uint64(i), op, qp.Signaled, mb.Addr()+uint64(off), mb.RKey()
		wr.SGL[0] = ma.SGE(off, size)
	})
	elapsed := time.Since(start)
	if b, ok := tb.(*testing.B); ok {
		b.StopTimer()
	}
	r, _ := da.Counter("retransmitted_pkts")
	return float64(n) * size * 8 / elapsed.Seconds() / 1e9, float64(r) / float64(n)
}

func benchThroughput(b *testing.B, op qp.WROpcode) {
	raw, err := rawThroughput()
	if err != nil {
		b.Fatal(err)
	}
	gbps, retx := throughput(b, openDevice, op, b.N)
	b.ReportMetric(gbps, "Gbit/s")
	b.ReportMetric(gbps/raw.Gbps, "x-raw")
	b.ReportMetric(retx, "retx/op")
}

// BenchmarkWrite64K: RDMA WRITE of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkWrite64K(b *testing.B) { benchThroughput(b, qp.WRWrite) }

// BenchmarkRead64K: RDMA READ of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkRead64K(b *testing.B) { benchThroughput(b, qp.WRRead) }

// write8Latencies returns the time from post to completion of n 8-byte
// WRITEs, one at a time, from a device opened by open, sorted.
func write8Latencies(tb testing.TB, open func(testing.TB, nic.Config) *nic.Device, n int) []time.Duration {
	l, ma, mb, _, _ := benchPair(tb, open, 4)
	ctx := context.Background()
	rtts := make([]time.Duration, n)
	var wc [1]qp.WC
	wr := qp.SendWR{Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: []qp.SGE{ma.SGE(0, 8)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	if b, ok := tb.(*testing.B); ok {
		b.ReportAllocs()
		b.ResetTimer()
		b.StartTimer()
	}
	for i := range rtts {
		t0 := time.Now()
		if err := l.a.PostSend(&wr); err != nil {
			tb.Fatal(err)
		}
		if _, err := l.acq.Wait(ctx, wc[:]); err != nil || wc[0].Status != qp.Success {
			tb.Fatalf("completion %v, %v", wc[0].String(), err)
		}
		rtts[i] = time.Since(t0)
	}
	if b, ok := tb.(*testing.B); ok {
		b.StopTimer()
	}
	slices.Sort(rtts)
	return rtts
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[(len(sorted)*p+99)/100-1]
}

// BenchmarkWrite8Latency: one 8-byte RDMA WRITE at a time, from post to
// completion.
func BenchmarkWrite8Latency(b *testing.B) {
	raw, err := rawPingPong()
	if err != nil {
		b.Fatal(err)
	}
	rtts := write8Latencies(b, openDevice, b.N)
	median := rtts[len(rtts)/2]
	b.ReportMetric(float64(median)/1e3, "median-µs")
	b.ReportMetric(float64(percentile(rtts, 99))/1e3, "p99-µs")
	b.ReportMetric(float64(median)/float64(raw.Median), "x-raw")
}

// Attached mode (issue 7): the same WRITEs from a device attached to a
// daemon (reached through its socket, shared rings and eventfds), against
// an embedded device, each beside the embedded figure measured right
// before, in the same invocation, with the same number of operations
// ("x-embedded"). The daemon runs in a process of its own (as softnic
// serve does) or inside the benchmark's process.
var daemons = []struct {
	name string
	open func(testing.TB, nic.Config) *nic.Device
}{
	{"daemon=process", attachedElsewhere},
	{"daemon=in-process", attachedDevice},
}

// BenchmarkAttachedWrite64K: BenchmarkWrite64K from an attached device
// (target: at least 80% of the embedded throughput).
func BenchmarkAttachedWrite64K(b *testing.B) {
	for _, d := range daemons {
		b.Run(d.name, func(b *testing.B) {
			embedded, _ := throughput(b, openDevice, qp.WRWrite, b.N)
			gbps, retx := throughput(b, d.open, qp.WRWrite, b.N)
			b.ReportMetric(gbps, "Gbit/s")
			b.ReportMetric(gbps/embedded, "x-embedded")
			b.ReportMetric(retx, "retx/op")
		})
	}
}

// BenchmarkAttachedWrite8Latency: BenchmarkWrite8Latency from an attached
// device (target: within 1.5× of the embedded latency).
func BenchmarkAttachedWrite8Latency(b *testing.B) {
	for _, d := range daemons {
		b.Run(d.name, func(b *testing.B) {
			embedded := write8Latencies(b, openDevice, b.N)
			rtts := write8Latencies(b, d.open, b.N)
			median := rtts[len(rtts)/2]
			b.ReportMetric(float64(median)/1e3, "median-µs")
			b.ReportMetric(float64(percentile(rtts, 99))/1e3, "p99-µs")
			b.ReportMetric(float64(median)/float64(embedded[len(embedded)/2]), "x-embedded")
		})
	}
}

// BenchmarkFetchAdd16: FETCH_ADD with 16 outstanding.
func BenchmarkFetchAdd16(b *testing.B) {
	l, ma, mb, _, _ := benchPair(b, openDevice, 16)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	streamOps(b, l, b.N, 16, func(i int, wr *qp.SendWR) {
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey, wr.CompareAdd = uint64(i), qp.WRFetchAdd, qp.Signaled, mb.Addr(), mb.RKey(), 1
		wr.SGL[0] = ma.SGE(8*(i%16), 8)
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
