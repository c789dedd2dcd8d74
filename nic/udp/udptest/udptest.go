// Package udptest holds the raw-UDP baselines softnic's benchmarks are
// measured against. The runners take a *testing.B so that any package's
// benchmark can call them, and softnic and raw UDP are measured in the same
// `go test -bench` run on the same machine: softnic's targets are ratios
// against these figures. MeasureThroughput and MeasurePingPong take the
// same measurements outside a benchmark, for ratios measured in one
// (and for softnic bench).
//
// Every runner works on loopback only and finishes at once with
// -benchtime 1x, as CI runs every benchmark once.
package udptest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/udp"
)

// ThroughputConfig selects what Throughput measures. The zero value is 4 KiB
// datagrams over IPv4 in batches of udp.MaxBatch with no offloads.
type ThroughputConfig struct {
	Size     int  // UDP payload bytes per datagram, at least 2; 0 means 4096
	Batch    int  // messages per WriteBatch and ReadBatch; 0 means udp.MaxBatch
	GSO, GRO bool // coalesce on send (UDP_SEGMENT), on receive (UDP_GRO); skips if the kernel refuses
	IPv6     bool // ::1 instead of 127.0.0.1
}

// ThroughputResult is what one Throughput run measured.
type ThroughputResult struct {
	Sent, Received int64         // datagrams
	Elapsed        time.Duration // from the first send to the last datagram received
	Gbps           float64       // payload received, in Gbit/s
	DatagramsPerS  float64       // datagrams received per second
	LossPercent    float64       // datagrams sent but not received, in percent of those sent
}

// markerSize is the length of the end-of-run datagrams; data datagrams are longer.
const markerSize = 1

// Throughput measures one sender goroutine blasting b.N datagrams with
// udp.Conn.WriteBatch (sendmmsg) at one receiver goroutine reading them with
// ReadBatch (recvmmsg), over loopback, and reports Gbit/s and datagrams/s of
// what arrived and the loss.
//
// The sender is not paced: loopback UDP drops datagrams when the receiver
// falls behind, and loss% counts them: every datagram sent and not received.
// So ns/op and MB/s (b.SetBytes) are the offered load, per datagram sent,
// while Gbit/s and dgrams/s count what arrived.
func Throughput(b *testing.B, cfg ThroughputConfig) ThroughputResult {
	b.Helper()
	b.ReportAllocs()
	res, err := runThroughput(b.N, cfg, func(size int) {
		b.SetBytes(int64(size))
		b.ResetTimer()
	})
	b.StopTimer()
	if errors.Is(err, errNoOffload) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.Gbps, "Gbit/s")
	b.ReportMetric(res.DatagramsPerS, "dgrams/s")
	b.ReportMetric(res.LossPercent, "loss%")
	return res
}

// MeasureThroughput is Throughput outside a benchmark: n datagrams, for a
// baseline that another benchmark reports a ratio against (testing.Benchmark
// cannot run inside a benchmark).
func MeasureThroughput(n int, cfg ThroughputConfig) (ThroughputResult, error) {
	return runThroughput(n, cfg, nil)
}

var errNoOffload = errors.New("udptest: the kernel refused an offload the measurement needs")

// runThroughput sends n datagrams; start, if set, is called with the
// datagram size once the sockets are ready, just before the first send.
// After the last data datagram the sender repeats a 1-byte marker until the
// receiver has seen one; the receiving socket is FIFO, so the marker means
// everything before it has been read or was dropped.
func runThroughput(n int, cfg ThroughputConfig, start func(size int)) (ThroughputResult, error) {
	if cfg.Size == 0 {
		cfg.Size = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = udp.MaxBatch
	}
	if cfg.Size <= markerSize {
		return ThroughputResult{}, fmt.Errorf("udptest: datagram size %d, want more than %d", cfg.Size, markerSize)
	}
	lo := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)
	if cfg.IPv6 {
		lo = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
	}
	rx, err := udp.Listen(lo, udp.Options{DisableGSO: true, DisableGRO: !cfg.GRO})
	if err != nil {
		return ThroughputResult{}, err
	}
	defer rx.Close()
	tx, err := udp.Listen(lo, udp.Options{DisableGSO: !cfg.GSO, DisableGRO: true})
	if err != nil {
		return ThroughputResult{}, err
	}
	defer tx.Close()
	if cfg.GSO && !tx.Features().GSO || cfg.GRO && !rx.Features().GRO {
		return ThroughputResult{}, fmt.Errorf("%w: %v / %v, want gso=%v gro=%v", errNoOffload, tx.Features(), rx.Features(), cfg.GSO, cfg.GRO)
	}

	out := make([]udp.Message, cfg.Batch)
	for i := range out {
		out[i] = udp.Message{Buf: make([]byte, cfg.Size), Addr: rx.LocalAddr()}
		for j := range out[i].Buf {
			out[i].Buf[j] = byte(i + j)
		}
	}
	marker := []udp.Message{{Buf: make([]byte, markerSize), Addr: rx.LocalAddr()}}
	recvBuf := cfg.Size
	if cfg.GRO {
		recvBuf = 1 << 16
	}
	r := newReceiver(rx, cfg.Batch, recvBuf)

	if start != nil {
		start(cfg.Size)
	}
	t0 := time.Now()
	go r.run()
	for sent := 0; sent < n; {
		k, err := tx.WriteBatch(out[:min(cfg.Batch, n-sent)])
		sent += k
		if err != nil {
			rx.Close()
			<-r.done
			return ThroughputResult{}, fmt.Errorf("udptest: after %d datagrams: %w", sent, err)
		}
	}
	retry := time.NewTicker(time.Millisecond)
	defer retry.Stop()
	for done := false; !done; {
		if _, err := tx.WriteBatch(marker); err != nil {
			rx.Close()
			<-r.done
			return ThroughputResult{}, fmt.Errorf("udptest: marker: %w", err)
		}
		select {
		case <-r.done:
			done = true
		case <-retry.C:
		}
	}
	if r.err != nil {
		return ThroughputResult{}, fmt.Errorf("udptest: receiver: %w", r.err)
	}
	return throughputResult(int64(n), r.datagrams, r.bytes, r.last.Sub(t0)), nil
}

// throughputResult derives the rates and the loss from the counts.
func throughputResult(sent, received, bytes int64, elapsed time.Duration) ThroughputResult {
	res := ThroughputResult{Sent: sent, Received: received, Elapsed: elapsed}
	if s := elapsed.Seconds(); s > 0 {
		res.Gbps = float64(bytes) * 8 / s / 1e9
		res.DatagramsPerS = float64(received) / s
	}
	if sent > 0 {
		res.LossPercent = 100 * float64(sent-received) / float64(sent)
	}
	return res
}

// receiver counts the data datagrams reaching c until a marker arrives.
type receiver struct {
	c    *udp.Conn
	msgs []udp.Message
	done chan struct{}

	// Written by run, read after done is closed.
	datagrams, bytes int64
	last             time.Time // when the last data datagram was read
	err              error
}

func newReceiver(c *udp.Conn, batch, bufSize int) *receiver {
	r := &receiver{c: c, msgs: make([]udp.Message, batch), done: make(chan struct{})}
	for i := range r.msgs {
		r.msgs[i].Buf = make([]byte, bufSize)
	}
	return r
}

func (r *receiver) run() {
	defer close(r.done)
	for {
		n, err := r.c.ReadBatch(r.msgs)
		if err != nil {
			r.err = err
			return
		}
		marker := false
		before := r.datagrams
		for i := range r.msgs[:n] {
			for d := range udp.Segments(&r.msgs[i]) {
				if len(d) == markerSize {
					marker = true
					continue
				}
				r.datagrams++
				r.bytes += int64(len(d))
			}
		}
		if r.datagrams > before {
			r.last = time.Now()
		}
		if marker {
			return
		}
	}
}

// PingPongResult is what one PingPong run measured.
type PingPongResult struct {
	Median, P99 time.Duration
}

// PingPong measures b.N round trips of an 8-byte datagram between two plain
// net.UDPConn sockets on 127.0.0.1, one of them echoing from its own
// goroutine, and reports the median and 99th percentile in µs. It is the
// latency floor any UDP protocol in Go pays on this machine.
func PingPong(b *testing.B) PingPongResult {
	b.Helper()
	return benchPingPong(b, runPingPong)
}

// benchPingPong runs b.N round trips of run against an echo of its own and
// reports them.
func benchPingPong(b *testing.B, run func(n int, dst netip.AddrPort, start func()) (PingPongResult, error)) PingPongResult {
	b.Helper()
	b.ReportAllocs()
	res, err := run(b.N, netip.AddrPort{}, b.ResetTimer)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(res.Median)/float64(time.Microsecond), "median-µs")
	b.ReportMetric(float64(res.P99)/float64(time.Microsecond), "p99-µs")
	return res
}

// MeasurePingPong is PingPong outside a benchmark: n round trips.
func MeasurePingPong(n int) (PingPongResult, error) { return runPingPong(n, netip.AddrPort{}, nil) }

// MeasurePingPongTo is MeasurePingPong against an echo socket elsewhere,
// such as one that Echo serves in another process (an echo that is not
// valid: MeasurePingPong's own).
func MeasurePingPongTo(n int, echo netip.AddrPort) (PingPongResult, error) {
	return runPingPong(n, echo, nil)
}

// runPingPong measures n round trips to echo, or to an echo socket of its
// own when echo is not valid.
func runPingPong(n int, dst netip.AddrPort, start func()) (res PingPongResult, err error) {
	lo := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	if dst.IsValid() && dst.Addr().Is6() && !dst.Addr().Is4In6() {
		lo = &net.UDPAddr{IP: net.IPv6loopback}
	}
	client, err := net.ListenUDP("udp", lo)
	if err != nil {
		return res, err
	}
	defer client.Close()
	if !dst.IsValid() {
		echo, err := net.ListenUDP("udp4", lo)
		if err != nil {
			return res, err
		}
		defer serveEcho(echo, func() error { return Echo(echo) })(&err)
		dst = echo.LocalAddr().(*net.UDPAddr).AddrPort()
	}

	rtts := make([]time.Duration, n)
	var ping, pong [8]byte
	if start != nil {
		start()
	}
	for i := range rtts {
		// A lost ping would block forever; loopback at one datagram in
		// flight does not lose any, so losing one is an error.
		if err := client.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			return res, err
		}
		ping[0], ping[1], ping[2], ping[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		t0 := time.Now()
		if _, err := client.WriteToUDPAddrPort(ping[:], dst); err != nil {
			return res, err
		}
		k, _, err := client.ReadFromUDPAddrPort(pong[:])
		rtts[i] = time.Since(t0)
		if err != nil || k != len(ping) || pong != ping {
			return res, fmt.Errorf("udptest: ping %d: got %d bytes %x, %v", i, k, pong[:k], err)
		}
	}
	return percentiles(rtts), nil
}

// PingPongPoll is PingPong with both sides busy-polling: each spins on
// udp.Conn.TryReadBatch (a recvmmsg that does not wait) instead of
// sleeping in a read, as an RDMA application that polls its CQ and a
// provider that makes progress in its polls (fi_rmabw's, softnic's) do.
// It is the floor of the latencies learnt by busy-polling, which
// PingPong's wakeups would hide: on a VM a thread's wakeup costs
// microseconds.
func PingPongPoll(b *testing.B) PingPongResult {
	b.Helper()
	return benchPingPong(b, runPingPongPoll)
}

// MeasurePingPongPoll is PingPongPoll outside a benchmark: n round trips.
func MeasurePingPongPoll(n int) (PingPongResult, error) {
	return runPingPongPoll(n, netip.AddrPort{}, nil)
}

// MeasurePingPongPollTo is MeasurePingPongPoll against an echo socket
// elsewhere, such as one that EchoPoll serves in another process (an echo
// that is not valid: MeasurePingPongPoll's own).
func MeasurePingPongPollTo(n int, echo netip.AddrPort) (PingPongResult, error) {
	return runPingPongPoll(n, echo, nil)
}

// serveEcho runs serve, an echo on c, in a goroutine of its own, and
// returns what stops it: it closes c, waits for serve to return, and sets
// *err to the error that ended it, unless that is c's closing or *err is
// set already.
func serveEcho(c io.Closer, serve func() error) (stop func(err *error)) {
	echoed := make(chan error, 1)
	go func() { echoed <- serve() }()
	return func(err *error) {
		c.Close()
		if eerr := <-echoed; !errors.Is(eerr, net.ErrClosed) && *err == nil {
			*err = fmt.Errorf("udptest: echo: %w", eerr)
		}
	}
}

// pingTimeout is how long a ping waits for its echo: loopback at one
// datagram in flight loses none, so a lost one is an error.
const pingTimeout = time.Second

// runPingPongPoll measures n busy-polled round trips to echo, or to an
// EchoPoll of its own when echo is not valid.
func runPingPongPoll(n int, dst netip.AddrPort, start func()) (res PingPongResult, err error) {
	lo := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)
	if dst.IsValid() && dst.Addr().Is6() && !dst.Addr().Is4In6() {
		lo = netip.AddrPortFrom(netip.IPv6Loopback(), 0)
	}
	client, err := udp.Listen(lo, udp.Options{})
	if err != nil {
		return res, err
	}
	defer client.Close()
	if !dst.IsValid() {
		echo, err := udp.Listen(lo, udp.Options{})
		if err != nil {
			return res, err
		}
		defer serveEcho(echo, func() error { return EchoPoll(echo, nil) })(&err)
		dst = echo.LocalAddr()
	}

	rtts := make([]time.Duration, n)
	var ping, pong [8]byte
	out := []udp.Message{{Buf: ping[:], Addr: dst}}
	in := []udp.Message{{Buf: pong[:]}}
	if start != nil {
		start()
	}
	for i := range rtts {
		ping[0], ping[1], ping[2], ping[3] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		t0 := time.Now()
		if _, err := client.WriteBatch(out); err != nil {
			return res, err
		}
		k, spins := 0, 0
		for k == 0 {
			if k, err = client.TryReadBatch(in); err != nil {
				return res, err
			}
			if spins++; k == 0 && spins%1024 == 0 && time.Since(t0) > pingTimeout {
				return res, fmt.Errorf("udptest: ping %d: no echo in %v", i, pingTimeout)
			}
		}
		rtts[i] = time.Since(t0)
		if in[0].N != len(ping) || pong != ping {
			return res, fmt.Errorf("udptest: ping %d: got %d bytes %x", i, in[0].N, pong[:in[0].N])
		}
	}
	return percentiles(rtts), nil
}

// EchoSpin is how long EchoPoll keeps spinning after the last datagram
// before it sleeps in a read: far longer than the gaps of a ping-pong,
// short enough that an echo left alone soon stops taking a CPU.
const EchoSpin = 10 * time.Millisecond

// EchoPoll is Echo for busy-polled ping-pongs: it sends every datagram
// reaching c back to its sender, spinning on TryReadBatch while datagrams
// come, with c out of the netpoller (udp.Conn.StopWaiting, so that no
// thread of the process wakes at each datagram), and sleeping in
// ReadBatch once none came for EchoSpin. While it spins it holds cpu, if
// not nil, which the process's other busy-pollers take in turn: on two
// CPUs a third spinning thread would take turns with the two of the
// ping-pong. It returns the error that ended it (net.ErrClosed after
// Close).
func EchoPoll(c *udp.Conn, cpu sync.Locker) error {
	msgs := make([]udp.Message, udp.MaxBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 64)
	}
	for {
		n, err := c.ReadBatch(msgs)
		if err != nil {
			return err
		}
		c.StopWaiting()
		if cpu != nil {
			cpu.Lock()
		}
		err = echoSpinning(c, msgs, n)
		if cpu != nil {
			cpu.Unlock()
		}
		if err != nil {
			return err
		}
	}
}

// echoSpinning sends the n datagrams of msgs back, then reads and echoes
// without waiting until none has come for EchoSpin.
func echoSpinning(c *udp.Conn, msgs []udp.Message, n int) error {
	last := time.Now()
	for spins := 0; ; spins++ {
		if n > 0 {
			for i := range msgs[:n] {
				msgs[i].Buf = msgs[i].Buf[:msgs[i].N]
			}
			_, err := c.WriteBatch(msgs[:n])
			for i := range msgs[:n] {
				msgs[i].Buf = msgs[i].Buf[:cap(msgs[i].Buf)]
			}
			if err != nil {
				return fmt.Errorf("echo: %w", err)
			}
			last, spins = time.Now(), 0
		} else if spins%1024 == 0 && time.Since(last) > EchoSpin {
			return nil
		}
		var err error
		if n, err = c.TryReadBatch(msgs); err != nil {
			return err
		}
	}
}

// Echo sends every datagram reaching c back to its sender until c is
// closed, and returns the error that ended it (net.ErrClosed after Close).
func Echo(c *net.UDPConn) error {
	var buf [64]byte
	for {
		n, from, err := c.ReadFromUDPAddrPort(buf[:])
		if err != nil {
			return err
		}
		if _, err := c.WriteToUDPAddrPort(buf[:n], from); err != nil {
			return fmt.Errorf("echo to %v: %w", from, err)
		}
	}
}

// percentiles returns the median and the 99th percentile (nearest rank) of
// rtts, which it sorts.
func percentiles(rtts []time.Duration) PingPongResult {
	if len(rtts) == 0 {
		return PingPongResult{}
	}
	slices.Sort(rtts)
	rank := func(p int) time.Duration { return rtts[(len(rtts)*p+99)/100-1] }
	return PingPongResult{Median: rank(50), P99: rank(99)}
}
