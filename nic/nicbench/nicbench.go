// Package nicbench runs the workloads softnic is measured by on a pair of
// devices: streams of 64 KiB RDMA WRITEs and READs, FETCH_ADDs, and 8-byte
// WRITEs one at a time, timed from post to completion. The repository's Go
// benchmarks (./tests) and softnic bench both run them, beside the raw-UDP
// baselines of package udptest, so that what they report compares.
//
// It connects QPs directly (as ibv_modify_qp does), without the connection
// manager, and only measures: ratios and targets are its callers'.
package nicbench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
)

// Link is a connected RC QP pair between two devices, with a CQ on each
// side.
type Link struct {
	A, B     *nic.QP
	ACQ, BCQ *nic.CQ
}

// Connect creates a QP in pa (on device da) and one in pb (on db), each
// with depth send and receive WRs and a CQ of twice that, and connects
// them to each other with opts. The PSNs are chosen to wrap soon.
func Connect(da, db *nic.Device, pa, pb *nic.PD, opts nic.ConnectOptions, depth int) (Link, error) {
	var l Link
	var err error
	if l.ACQ, err = da.CreateCQ(depth * 2); err != nil {
		return l, err
	}
	if l.BCQ, err = db.CreateCQ(depth * 2); err != nil {
		return l, err
	}
	if l.A, err = pa.CreateQP(nic.QPConfig{SendCQ: l.ACQ, MaxSendWR: depth, MaxRecvWR: depth}); err != nil {
		return l, err
	}
	if l.B, err = pb.CreateQP(nic.QPConfig{SendCQ: l.BCQ, MaxSendWR: depth, MaxRecvWR: depth}); err != nil {
		return l, err
	}
	oa, ob := opts, opts
	oa.LocalPSN, oa.RemotePSN = 0xFFFF00, 0x123
	ob.LocalPSN, ob.RemotePSN = 0x123, 0xFFFF00
	if err := l.A.Connect(db.Addr(), l.B.Num(), oa); err != nil {
		return l, err
	}
	return l, l.B.Connect(da.Addr(), l.A.Num(), ob)
}

// Stream keeps depth operations built by mk in flight on l.A until n have
// completed, waiting with CQ.Wait. mk fills in the WR (and its one SGE)
// for operation i; Stream reuses them, so that what allocates is the
// device.
func (l Link) Stream(n, depth int, mk func(i int, wr *qp.SendWR)) error {
	ctx := context.Background()
	wcs := make([]qp.WC, depth)
	posted, done := 0, 0
	var wr qp.SendWR
	wr.SGL = make([]qp.SGE, 1)
	for done < n {
		for posted < n && posted-done < depth {
			mk(posted, &wr)
			if err := l.A.PostSend(&wr); err != nil {
				return fmt.Errorf("post %d: %w", posted, err)
			}
			posted++
		}
		k, err := l.ACQ.Wait(ctx, wcs)
		if err != nil {
			return err
		}
		for i := range wcs[:k] {
			if wcs[i].Status != qp.Success {
				return fmt.Errorf("completion %v", wcs[i].String())
			}
		}
		done += k
	}
	return nil
}

// Pair is a Link with a region of RegionSize on each side, written all
// over before any operation: pages never written read from the kernel's
// one zero page, which stays in the cache however much is sent, so that
// an embedded device's regions (Go memory) would send from the cache and
// an attached device's (shared memory, which has no zero page) from
// memory.
type Pair struct {
	Link
	MA, MB *nic.MR
}

// The workloads' sizes: 64 KiB messages, 32 in flight, MTU 4096, in
// regions of 64 MiB.
const (
	StreamSize  = 64 << 10
	StreamDepth = 32
	MTU         = 4096
	RegionSize  = 64 << 20
)

// NewPair connects device a to device b with depth WRs in flight at most,
// in a PD and a region of its own on each. Closing the devices releases
// it all.
func NewPair(a, b *nic.Device, depth int) (Pair, error) {
	var p Pair
	pa, err := a.AllocPD()
	if err != nil {
		return p, err
	}
	pb, err := b.AllocPD()
	if err != nil {
		return p, err
	}
	access := mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	if p.MA, err = pa.AllocMR(RegionSize, access); err != nil {
		return p, err
	}
	if p.MB, err = pb.AllocMR(RegionSize, access); err != nil {
		return p, err
	}
	fill(p.MA.Bytes())
	fill(p.MB.Bytes())
	p.Link, err = Connect(a, b, pa, pb, nic.ConnectOptions{MTU: MTU, Timeout: 12}, depth)
	return p, err
}

func fill(b []byte) {
	for i := range b {
		b[i] = byte(i * 7)
	}
}

// Transfer runs n StreamSize operations op (WRITE or READ) from a to b,
// StreamDepth in flight, and returns the time they took.
func (p Pair) Transfer(op qp.WROpcode, n int) (time.Duration, error) {
	start := time.Now()
	err := p.Stream(n, StreamDepth, func(i int, wr *qp.SendWR) {
		off := (i % (RegionSize / StreamSize / 2)) * StreamSize
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey = uint64(i), op, qp.Signaled, p.MB.Addr()+uint64(off), p.MB.RKey()
		wr.SGL[0] = p.MA.SGE(off, StreamSize)
	})
	return time.Since(start), err
}

// FetchAdd runs n FETCH_ADDs on one word of b's region, depth
// outstanding, and returns the time they took.
func (p Pair) FetchAdd(n, depth int) (time.Duration, error) {
	start := time.Now()
	err := p.Stream(n, depth, func(i int, wr *qp.SendWR) {
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey, wr.CompareAdd = uint64(i), qp.WRFetchAdd, qp.Signaled, p.MB.Addr(), p.MB.RKey(), 1
		wr.SGL[0] = p.MA.SGE(8*(i%depth), 8)
	})
	return time.Since(start), err
}

// Write8 posts 8-byte WRITEs one at a time and stores in each element of
// rtts the time from post to completion, learnt by CQ.Wait, or with poll
// by CQ.Poll in a loop (busy polling, as ib_write_lat does unless given
// -e).
func (p Pair) Write8(rtts []time.Duration, poll bool) error {
	ctx := context.Background()
	var wc [1]qp.WC
	wr := qp.SendWR{Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: []qp.SGE{p.MA.SGE(0, 8)}, RemoteAddr: p.MB.Addr(), RKey: p.MB.RKey()}
	for i := range rtts {
		t0 := time.Now()
		if err := p.A.PostSend(&wr); err != nil {
			return err
		}
		n, err := 0, error(nil)
		for n == 0 && err == nil {
			if poll {
				n, err = p.ACQ.Poll(wc[:])
			} else {
				n, err = p.ACQ.Wait(ctx, wc[:])
			}
		}
		if err != nil {
			return err
		}
		if wc[0].Status != qp.Success {
			return fmt.Errorf("completion %v", wc[0].String())
		}
		rtts[i] = time.Since(t0)
	}
	return nil
}

// Gbps is the throughput of n StreamSize operations done in d.
func Gbps(n int, d time.Duration) float64 { return float64(n) * StreamSize * 8 / d.Seconds() / 1e9 }

// Latency is the median and 99th percentile of round trips.
type Latency struct {
	Median, P99 time.Duration
}

// Percentiles sorts rtts and returns their median and 99th percentile.
func Percentiles(rtts []time.Duration) Latency {
	slices.Sort(rtts)
	return Latency{Median: rtts[len(rtts)/2], P99: rtts[(len(rtts)*99+99)/100-1]}
}

// Rounds is how many turns InRounds gives each device.
const Rounds = 10

// The two devices InRounds alternates, as indexes.
const (
	Embedded = iota
	Attached
)

// Write8Rounds runs Write8 n times on each of pairs, the embedded and the
// attached one, in alternating rounds, and returns each one's latency.
func Write8Rounds(pairs *[2]Pair, n int, poll bool) ([2]Latency, error) {
	rtts := [2][]time.Duration{make([]time.Duration, n), make([]time.Duration, n)}
	err := InRounds(n, func(dev, start, k int) error {
		return pairs[dev].Write8(rtts[dev][start:start+k], poll)
	})
	if err != nil {
		return [2]Latency{}, err
	}
	return [2]Latency{Percentiles(rtts[Embedded]), Percentiles(rtts[Attached])}, nil
}

// InRounds splits n operations into Rounds and calls run(dev, start, k)
// for the embedded device, then the attached one, k operations from
// start, round after round. A machine's speed drifts by tens of percent
// within a minute; alternating puts both under the same drift.
func InRounds(n int, run func(dev, start, k int) error) error {
	for r := range Rounds {
		start, end := n*r/Rounds, n*(r+1)/Rounds
		if end == start {
			continue
		}
		for _, dev := range []int{Embedded, Attached} {
			if err := run(dev, start, end-start); err != nil {
				return err
			}
		}
	}
	return nil
}
