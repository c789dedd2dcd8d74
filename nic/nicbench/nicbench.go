// Package nicbench runs the workloads softnic is measured by, the workloads
// of libfabric's fi_rmabw (../shared/perf) so that each figure compares
// with its line: RDMA WRITE and READ streams of 4 KiB and 64 KiB messages
// with 64 in flight, FETCH_ADD with 16 and 64 in flight, 64 KiB WRITEs
// spread over 1 to 64 QPs, and one 8-byte WRITE, READ or FETCH_ADD at a
// time, timed from post to completion, learnt by busy-polling the CQ or by
// waiting on it. The repository's Go benchmarks (./tests) and softnic bench
// both run them, beside the raw-UDP baselines of package udptest.
//
// An Initiator posts the operations from one device. They land on a
// Target: a device in this process (DeviceTarget), or, as fi_rmabw's
// target is, a device in a process of its own (Peer, which talks to
// ServePeer over a pipe).
//
// It connects QPs directly (as ibv_modify_qp does), without the connection
// manager, and only measures: ratios and targets are its callers'.
package nicbench

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
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
	oa.LocalPSN, oa.RemotePSN = initiatorPSN, targetPSN
	ob.LocalPSN, ob.RemotePSN = targetPSN, initiatorPSN
	if err := l.A.Connect(db.Addr(), l.B.Num(), oa); err != nil {
		return l, err
	}
	return l, l.B.Connect(da.Addr(), l.A.Num(), ob)
}

// The first PSNs of a connection: the initiator's wraps soon.
const (
	initiatorPSN = 0xFFFF00
	targetPSN    = 0x123
)

// The workloads' parameters, fi_rmabw's: messages of 4 KiB and 64 KiB, a
// window of 64 operations in flight, at path MTU 4096, in regions of
// 64 MiB.
const (
	LargeSize  = 64 << 10
	SmallSize  = 4 << 10
	Window     = 64
	MTU        = 4096
	RegionSize = 64 << 20
	// MaxQPs is the most QPs a workload spreads its operations over.
	MaxQPs = 64
)

// Options are the connection's attributes: path MTU 4096, and as many
// READs and atomics in flight as the window holds, each way.
func Options() nic.ConnectOptions {
	return nic.ConnectOptions{MTU: MTU, Timeout: 12, MaxRdAtomic: Window, MaxDestRdAtomic: Window}
}

// Region is the target's memory as the initiator addresses it.
type Region struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
}

// Target is where the workloads' operations land: a device with a region
// of RegionSize bytes, written all over before any operation (pages never
// written read from the kernel's one zero page, which stays in the cache
// however much is sent).
type Target interface {
	// Addr is the target device's address.
	Addr() netip.AddrPort
	// Region is the memory the operations address.
	Region() Region
	// Accept creates a QP with depth send and receive WRs, connects it to
	// QP qpn of the device at from with opts, and returns its number.
	Accept(from netip.AddrPort, qpn uint32, opts nic.ConnectOptions, depth int) (uint32, error)
	// Close releases the target (a Peer's process exits).
	Close() error
}

// Initiator posts the workloads' operations from a device, over up to
// len(QPs) QPs that share one CQ, to a target.
type Initiator struct {
	Dev    *nic.Device
	QPs    []*nic.QP
	CQ     *nic.CQ
	MR     *nic.MR // the local memory operations read from and write to
	Remote Region

	wcs []verbs.WC
	wr  verbs.SendWR
}

// Dial connects nqps QPs of device d to target t, each able to hold
// Window operations, with a region of RegionSize bytes of its own.
// Closing the device releases it all.
func Dial(d *nic.Device, t Target, nqps int) (*Initiator, error) {
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	in := &Initiator{Dev: d, Remote: t.Region(), wcs: make([]verbs.WC, 2*Window)}
	in.wr.SGL = make([]verbs.SGE, 1)
	if in.MR, err = pd.AllocMR(RegionSize, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		return nil, err
	}
	Fill(in.MR.Bytes())
	if in.CQ, err = d.CreateCQ(2 * Window); err != nil {
		return nil, err
	}
	for range nqps {
		q, err := pd.CreateQP(nic.QPConfig{SendCQ: in.CQ, MaxSendWR: Window, MaxRecvWR: 1})
		if err != nil {
			return nil, err
		}
		o := Options()
		o.LocalPSN, o.RemotePSN = targetPSN, initiatorPSN
		remote, err := t.Accept(d.Addr(), q.Num(), o, Window)
		if err != nil {
			return nil, fmt.Errorf("target: %w", err)
		}
		o.LocalPSN, o.RemotePSN = initiatorPSN, targetPSN
		if err := q.Connect(t.Addr(), remote, o); err != nil {
			return nil, err
		}
		in.QPs = append(in.QPs, q)
	}
	return in, nil
}

// Fill writes b all over, so that its pages are the process's own.
func Fill(b []byte) {
	for i := range b {
		b[i] = byte(i * 7)
	}
}

// Completion says how a workload learns that its operations completed.
type Completion int

const (
	// Wait sleeps in CQ.Wait until the device writes the CQ.
	Wait Completion = iota
	// Poll calls CQ.Poll in a loop (busy polling: what fi_rmabw does, and
	// ib_write_lat unless given -e).
	Poll
)

func (c Completion) String() string { return [...]string{"wait", "poll"}[c] }

// Limit ends a measurement: after Ops operations, or once Time has
// passed, whichever comes first (a zero field does not limit).
type Limit struct {
	Ops  int
	Time time.Duration
}

// more reports whether an operation numbered done may start at now.
func (l Limit) more(done int, start, now time.Time) bool {
	return (l.Ops <= 0 || done < l.Ops) && (l.Time <= 0 || now.Sub(start) < l.Time)
}

// Stream keeps window operations built by mk in flight over the first
// nqps QPs, posting to each in turn, until lim ends it and every posted
// operation has completed; it returns how many completed and the time
// they took. mk fills in the WR (and its one SGE) for operation i; Stream
// reuses it, so that what allocates is the device.
func (in *Initiator) Stream(nqps, window int, by Completion, lim Limit, mk func(i int, wr *verbs.SendWR)) (int, time.Duration, error) {
	ctx := context.Background()
	qps := in.QPs[:nqps]
	wcs := in.wcs[:min(len(in.wcs), window)]
	posted, done := 0, 0
	start := time.Now()
	more := true
	for more || done < posted {
		for more && posted-done < window {
			mk(posted, &in.wr)
			if err := qps[posted%len(qps)].PostSend(&in.wr); err != nil {
				return done, time.Since(start), fmt.Errorf("post %d: %w", posted, err)
			}
			posted++
			more = lim.more(posted, start, time.Now())
		}
		var k int
		var err error
		if by == Poll {
			k, err = in.CQ.Poll(wcs)
		} else {
			k, err = in.CQ.Wait(ctx, wcs)
		}
		if err != nil {
			return done, time.Since(start), err
		}
		for i := range wcs[:k] {
			if wcs[i].Status != verbs.Success {
				return done, time.Since(start), fmt.Errorf("completion %v", wcs[i].String())
			}
		}
		done += k
		if k > 0 && more {
			more = lim.more(posted, start, time.Now())
		}
	}
	return done, time.Since(start), nil
}

// Throughput runs operations op (qp.WRWrite or qp.WRRead) of size bytes,
// window in flight over nqps QPs, and returns how many completed in how
// long. Operation i addresses the i-th size-byte slot of the first half of
// both regions, cyclically.
func (in *Initiator) Throughput(op verbs.WROpcode, size, window, nqps int, by Completion, lim Limit) (int, time.Duration, error) {
	slots := RegionSize / size / 2
	return in.Stream(nqps, window, by, lim, func(i int, wr *verbs.SendWR) {
		off := (i % slots) * size
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey = uint64(i), op, verbs.Signaled, in.Remote.Addr+uint64(off), in.Remote.RKey
		wr.SGL[0] = in.MR.SGE(off, size)
	})
}

// FetchAdd runs FETCH_ADDs of 1 on one word of the target's region,
// window outstanding, and returns how many completed in how long.
func (in *Initiator) FetchAdd(window int, by Completion, lim Limit) (int, time.Duration, error) {
	return in.Stream(1, window, by, lim, func(i int, wr *verbs.SendWR) {
		wr.ID, wr.Opcode, wr.Flags, wr.RemoteAddr, wr.RKey, wr.CompareAdd = uint64(i), verbs.WRFetchAdd, verbs.Signaled, in.Remote.Addr, in.Remote.RKey, 1
		wr.SGL[0] = in.MR.SGE(RegionSize-8*(1+i%window), 8)
	})
}

// Latency posts 8-byte operations op (qp.WRWrite, qp.WRRead or
// qp.WRFetchAdd) one at a time on the first QP and stores in rtts the time
// of each from post to completion, until rtts is full or lim ends it; it
// returns how many it stored.
func (in *Initiator) Latency(op verbs.WROpcode, by Completion, lim Limit, rtts []time.Duration) (int, error) {
	ctx := context.Background()
	wc := in.wcs[:1]
	wr := &in.wr
	*wr = verbs.SendWR{Opcode: op, Flags: verbs.Signaled, SGL: wr.SGL[:1], RemoteAddr: in.Remote.Addr + 8, RKey: in.Remote.RKey, CompareAdd: 1}
	wr.SGL[0] = in.MR.SGE(8, 8)
	q := in.QPs[0]
	start := time.Now()
	for i := range rtts {
		t0 := time.Now()
		if !lim.more(i, start, t0) {
			return i, nil
		}
		if err := q.PostSend(wr); err != nil {
			return i, err
		}
		n, err := 0, error(nil)
		for n == 0 && err == nil {
			if by == Poll {
				n, err = in.CQ.Poll(wc)
			} else {
				n, err = in.CQ.Wait(ctx, wc)
			}
		}
		if err != nil {
			return i, err
		}
		if wc[0].Status != verbs.Success {
			return i, fmt.Errorf("completion %v", wc[0].String())
		}
		rtts[i] = time.Since(t0)
	}
	return len(rtts), nil
}

// Gbps is the throughput of n operations of size bytes done in d.
func Gbps(n, size int, d time.Duration) float64 {
	return float64(n) * float64(size) * 8 / d.Seconds() / 1e9
}

// Latency is the median and 99th percentile of round trips.
type Latency struct {
	Median, P99 time.Duration
}

// Percentiles sorts rtts and returns their median and 99th percentile.
func Percentiles(rtts []time.Duration) Latency {
	if len(rtts) == 0 {
		return Latency{}
	}
	slices.Sort(rtts)
	return Latency{Median: rtts[len(rtts)/2], P99: rtts[(len(rtts)*99+99)/100-1]}
}

// Rounds is how many turns InRounds gives each device.
const Rounds = 10

// The two initiators InRounds alternates, as indexes.
const (
	Embedded = iota
	Attached
)

// LatencyRounds measures Latency of n operations op on each of ins, the
// embedded and the attached initiator, in alternating rounds, and returns
// each one's latency.
func LatencyRounds(ins *[2]*Initiator, op verbs.WROpcode, by Completion, n int) ([2]Latency, error) {
	rtts := [2][]time.Duration{make([]time.Duration, n), make([]time.Duration, n)}
	err := InRounds(n, func(dev, start, k int) error {
		_, err := ins[dev].Latency(op, by, Limit{}, rtts[dev][start:start+k])
		return err
	})
	if err != nil {
		return [2]Latency{}, err
	}
	return [2]Latency{Percentiles(rtts[Embedded]), Percentiles(rtts[Attached])}, nil
}

// InRounds splits n operations into Rounds and calls run(dev, start, k)
// for the embedded initiator, then the attached one, k operations from
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
