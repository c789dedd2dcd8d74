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

// benchPair opens two devices with one connected RC QP pair and a 64 MiB
// region on each side.
func benchPair(b *testing.B, depth int) (link, *nic.MR, *nic.MR, *nic.Device, *nic.Device) {
	da := openDevice(b, nic.Config{})
	db := openDevice(b, nic.Config{})
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	ma, err := pa.AllocMR(64<<20, allAccess)
	if err != nil {
		b.Fatal(err)
	}
	mb, err := pb.AllocMR(64<<20, allAccess)
	if err != nil {
		b.Fatal(err)
	}
	l := connectPair(b, da, db, pa, pb, nic.ConnectOptions{MTU: 4096, Timeout: 12}, depth)
	return l, ma, mb, da, db
}

// streamOps keeps depth operations built by mk in flight until b.N have
// completed. mk fills in the WR (and its one SGE) for operation i; the
// harness reuses them, so that the benchmark's allocations are the
// device's.
func streamOps(b *testing.B, l link, depth int, mk func(i int, wr *qp.SendWR)) {
	ctx := context.Background()
	wcs := make([]qp.WC, depth)
	posted, done := 0, 0
	var wr qp.SendWR
	wr.SGL = make([]qp.SGE, 1)
	for done < b.N {
		for posted < b.N && posted-done < depth {
			mk(posted, &wr)
			if err := l.a.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n, err := l.acq.Wait(ctx, wcs)
		if err != nil {
			b.Fatal(err)
		}
		for i := range wcs[:n] {
			if wcs[i].Status != qp.Success {
				b.Fatalf("completion %v", wcs[i].String())
			}
		}
		done += n
	}
}

func benchThroughput(b *testing.B, op qp.WROpcode) {
	const size, depth = 64 << 10, 32
	raw, err := rawThroughput()
	if err != nil {
		b.Fatal(err)
	}
	l, ma, mb, da, _ := benchPair(b, depth)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	streamOps(b, l, depth, func(i int, wr *qp.SendWR) {
		off := (i % 512) * size
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey = uint64(i), op, qp.Signaled, mb.Addr()+uint64(off), mb.RKey()
		wr.SGL[0] = ma.SGE(off, size)
	})
	elapsed := time.Since(start)
	b.StopTimer()
	gbps := float64(b.N) * size * 8 / elapsed.Seconds() / 1e9
	retx, _ := da.Counter("retransmitted_pkts")
	b.ReportMetric(gbps, "Gbit/s")
	b.ReportMetric(gbps/raw.Gbps, "x-raw")
	b.ReportMetric(float64(retx)/float64(b.N), "retx/op")
}

// BenchmarkWrite64K: RDMA WRITE of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkWrite64K(b *testing.B) { benchThroughput(b, qp.WRWrite) }

// BenchmarkRead64K: RDMA READ of 64 KiB messages, MTU 4096, 32 in flight.
func BenchmarkRead64K(b *testing.B) { benchThroughput(b, qp.WRRead) }

// BenchmarkWrite8Latency: one 8-byte RDMA WRITE at a time, from post to
// completion.
func BenchmarkWrite8Latency(b *testing.B) {
	raw, err := rawPingPong()
	if err != nil {
		b.Fatal(err)
	}
	l, ma, mb, _, _ := benchPair(b, 4)
	ctx := context.Background()
	rtts := make([]time.Duration, b.N)
	var wc [1]qp.WC
	wr := qp.SendWR{Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: []qp.SGE{ma.SGE(0, 8)}, RemoteAddr: mb.Addr(), RKey: mb.RKey()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range rtts {
		t0 := time.Now()
		if err := l.a.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		if _, err := l.acq.Wait(ctx, wc[:]); err != nil || wc[0].Status != qp.Success {
			b.Fatalf("completion %v, %v", wc[0].String(), err)
		}
		rtts[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(rtts)
	median, p99 := rtts[len(rtts)/2], rtts[(len(rtts)*99+99)/100-1]
	b.ReportMetric(float64(median)/1e3, "median-µs")
	b.ReportMetric(float64(p99)/1e3, "p99-µs")
	b.ReportMetric(float64(median)/float64(raw.Median), "x-raw")
}

// BenchmarkFetchAdd16: FETCH_ADD with 16 outstanding.
func BenchmarkFetchAdd16(b *testing.B) {
	l, ma, mb, _, _ := benchPair(b, 16)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	streamOps(b, l, 16, func(i int, wr *qp.SendWR) {
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey, wr.CompareAdd = uint64(i), qp.WRFetchAdd, qp.Signaled, mb.Addr(), mb.RKey(), 1
		wr.SGL[0] = ma.SGE(8*(i%16), 8)
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
