package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCHex(t *testing.T) {
	// What C's printf("%#0*x") prints, as in perftest's logs.
	tests := []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"},
		{0x60, 6, "0x0060"},
		{0xb6e150, 6, "0xb6e150"},
		{0x91c8c, 6, "0x91c8c"},
		{0x5d99, 8, "0x005d99"},
		{0x80, 4, "0x80"},
		{0x562de9f51000, 16, "0x00562de9f51000"},
	}
	for _, tt := range tests {
		if got := cHex(tt.v, tt.width); got != tt.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", tt.v, tt.width, got, tt.want)
		}
	}
}

func TestPerfLayout(t *testing.T) {
	p := oobParams{cycleBuffer: 4096, cacheLine: 64}
	tests := []struct {
		size                int
		stride, slots, unit int
	}{
		{8, 64, 64, 4096},
		{64, 64, 64, 4096},
		{100, 128, 32, 4096},
		{1024, 1024, 4, 4096},
		{2048, 2048, 2, 4096},
		{2049, 2112, 1, 4096},
		{4099, 4160, 1, 4160},
		{65536, 65536, 1, 65536},
	}
	for _, tt := range tests {
		l := newPerfLayout(tt.size, p)
		if l.stride != tt.stride || l.slots != tt.slots || l.unit != tt.unit {
			t.Errorf("size %d: stride %d, slots %d, unit %d; want %d, %d, %d", tt.size, l.stride, l.slots, l.unit, tt.stride, tt.slots, tt.unit)
		}
		if 2*l.slots*l.stride > l.target() || l.slots*l.stride > l.unit {
			t.Errorf("size %d: two cycles of %d slots of %d bytes do not fit the local area of %d", tt.size, l.slots, l.stride, l.target())
		}
	}
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func TestBWFigures(t *testing.T) {
	tests := []struct {
		name      string
		size      int
		posted    []time.Duration
		completed map[int]time.Duration
		cqMod     int
		want      bwReport
	}{
		{
			name: "every second completion", size: mib, cqMod: 2,
			posted:    []time.Duration{0, ms(1), ms(2), ms(3)},
			completed: map[int]time.Duration{1: ms(2), 3: ms(4)},
			// 4 MiB in 4 ms; the best run: one message in 1 ms.
			want: bwReport{Size: mib, Iters: 4, PeakMBs: 1000, AvgMBs: 1000, MsgRate: 0.001},
		},
		{
			name: "a fast stretch", size: mib, cqMod: 2,
			posted:    []time.Duration{0, ms(1), ms(2), ms(3)},
			completed: map[int]time.Duration{1: ms(1.5), 3: ms(4)},
			// message 1 alone took 0.5 ms
			want: bwReport{Size: mib, Iters: 4, PeakMBs: 2000, AvgMBs: 1000, MsgRate: 0.001},
		},
		{
			name: "last completion only", size: 1000, cqMod: 100,
			posted:    []time.Duration{0, ms(1), ms(2)},
			completed: map[int]time.Duration{2: ms(10)},
			// with no completion before the last, the peak is the average
			want: bwReport{Size: 1000, Iters: 3, PeakMBs: 3000.0 / 0.01 / mib, AvgMBs: 3000.0 / 0.01 / mib, MsgRate: 3 / 0.01 / 1e6},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			completed := make([]time.Duration, len(tt.posted))
			for i, d := range tt.completed {
				completed[i] = d
			}
			got := bwFigures(tt.size, tt.posted, completed, tt.cqMod)
			if got.Size != tt.want.Size || got.Iters != tt.want.Iters || !near(got.PeakMBs, tt.want.PeakMBs) ||
				!near(got.AvgMBs, tt.want.AvgMBs) || !near(got.MsgRate, tt.want.MsgRate) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestComputeLatency(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x * float64(time.Microsecond))
		}
		return d
	}
	tests := []struct {
		name   string
		posted []time.Duration
		want   latencyFigures
	}{
		{
			// Round trips 10..50 µs: samples 5, 10, 15, 20, 25; 20 and 25
			// are left out, the maximum is 20.
			name:   "five round trips",
			posted: us(0, 10, 30, 60, 100, 150),
			want:   latencyFigures{Min: 5, Max: 20, Typical: 10, Avg: 10, Stdev: math.Sqrt(50.0 / 3), P99: 20, P999: 20},
		},
		{
			// Samples 50, 10, 10, 30, 3, 5 in that order: sorted, the
			// two largest out, an even count of 3, 5, 10, 10 whose
			// median is the mean of the middle two.
			name:   "even count",
			posted: us(0, 100, 120, 140, 200, 206, 216),
			want:   latencyFigures{Min: 3, Max: 30, Typical: 7.5, Avg: 7, Stdev: math.Sqrt(9.5), P99: 30, P999: 30},
		},
		{
			name:   "too few to leave any out",
			posted: us(0, 8, 12),
			want:   latencyFigures{Min: 2, Max: 4, Typical: 3, Avg: 3, Stdev: 1, P99: 4, P999: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computeLatency(tt.posted)
			g := []float64{got.Min, got.Max, got.Typical, got.Avg, got.Stdev, got.P99, got.P999}
			w := []float64{tt.want.Min, tt.want.Max, tt.want.Typical, tt.want.Avg, tt.want.Stdev, tt.want.P99, tt.want.P999}
			for i := range g {
				if math.Abs(g[i]-w[i]) > 1e-6 {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
			}
		})
	}
}

func TestCheckAtomicResults(t *testing.T) {
	words := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.NativeEndian.AppendUint64(b, x)
		}
		return b
	}
	tests := []struct {
		name    string
		results []byte
		slots   int
		op      atomicOp
		bad     bool
	}{
		{"fetch-add over two slots", words(10, 500, 11, 501, 12), 2, fetchAndAdd, false},
		{"fetch-add skipped one", words(10, 500, 12, 501), 2, fetchAndAdd, true},
		{"fetch-add from another slot", words(10, 500, 501, 11), 2, fetchAndAdd, true},
		{"compare-swap leaves the slot", words(7, 9, 7, 9, 7), 2, cmpAndSwap, false},
		{"compare-swap changed it", words(7, 9, 8, 9), 2, cmpAndSwap, true},
		{"fewer operations than slots", words(1, 2, 3), 64, fetchAndAdd, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkAtomicResults(tt.results, tt.slots, tt.op)
			if bad := errors.Is(err, errDataCheck); bad != tt.bad || err != nil && !bad {
				t.Fatalf("got %v, want failure %v", err, tt.bad)
			}
		})
	}
}

func TestCheckUntouched(t *testing.T) {
	l := perfLayout{size: 100, stride: 128, slots: 4, unit: 512}
	fresh := func() []byte { return bytes.Repeat([]byte{unwritten}, 512) }
	tests := []struct {
		name  string
		write func(b []byte)
		used  int
		bad   bool
	}{
		{"inside two used slots", func(b []byte) { b[0], b[99], b[128+50] = 1, 2, 3 }, 2, false},
		{"past a message", func(b []byte) { b[100] = 1 }, 2, true},
		{"in an unused slot", func(b []byte) { b[2*128] = 1 }, 2, true},
		{"in the last slot's gap", func(b []byte) { b[511] = 1 }, 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fresh()
			tt.write(b)
			if err := checkUntouched(b, l, tt.used, l.size); (err != nil) != tt.bad {
				t.Fatalf("got %v, want failure %v", err, tt.bad)
			}
		})
	}
}

func TestHits(t *testing.T) {
	tests := []struct{ n, slots, k, want int }{
		{100, 64, 0, 2}, {100, 64, 35, 2}, {100, 64, 36, 1}, {100, 64, 63, 1}, {5, 64, 4, 1}, {5, 64, 5, 0}, {7, 1, 0, 7},
	}
	for _, tt := range tests {
		if got := hits(tt.n, tt.slots, tt.k); got != tt.want {
			t.Errorf("hits(%d, %d, %d) = %d, want %d", tt.n, tt.slots, tt.k, got, tt.want)
		}
	}
}

// freePorts returns a UDP port free on 127.0.0.1 and 127.0.0.2 and a TCP
// port free on 127.0.0.1.
func freePorts(t *testing.T) (udp, tcp uint16) {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err != nil {
			continue
		}
		c2.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return uint16(port), uint16(l.Addr().(*net.TCPAddr).Port)
	}
	t.Fatal("no UDP port free on both 127.0.0.1 and 127.0.0.2")
	return 0, 0
}

// runPair runs a server and a client command line and returns both
// outputs. The client starts once ready reports the server listening
// (nil: at once, retrying while the server's TCP port refuses).
func runPair(t *testing.T, server, client []string, ready func() bool) (srv, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg         sync.WaitGroup
		sout, serr bytes.Buffer
		scode      int
		cout, cerr bytes.Buffer
		ccode      int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode = runContext(ctx, server, &sout, &serr)
	}()
	for ready != nil && !ready() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for retries := 0; ; retries++ {
		cout.Reset()
		cerr.Reset()
		ccode = runContext(ctx, client, &cout, &cerr)
		if ccode == 0 || !strings.Contains(cerr.String(), "connection refused") || retries == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ccode != 0 {
		cancel()
	}
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", scode, sout.String(), serr.String(), ccode, cout.String(), cerr.String())
	}
	return sout.String(), cout.String()
}

// udpBound reports whether something holds UDP port on 127.0.0.1.
func udpBound(port uint16) func() bool {
	return func() bool {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)})
		if err != nil {
			return true
		}
		c.Close()
		return false
	}
}

// counters parses the "counters:" line of an output.
func counters(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "counters: ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			name, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("counter %q", f)
			}
			m[name] = n
		}
		return m
	}
	t.Fatalf("no counters line in:\n%s", out)
	return nil
}

// TestPerftestLoopback runs every test between two softnic perftests on
// loopback: both exit 0 (their data checks pass), print the same result
// row, and neither device dropped a packet as malformed or for its ICRC.
// (A send_bw client may run ahead of the server's reposting of receive
// buffers and take an RNR NAK, after which it resends: that is flow
// control, so retransmissions are not counted against a run here.)
func TestPerftestLoopback(t *testing.T) {
	bwRow := regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([0-9.]+) +([0-9.]+)\s+([0-9.]+) *$`)
	latRow := regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) *$`)
	tests := []struct {
		name string
		args []string
		size string // in the result row
	}{
		{"write_bw one packet", []string{"write_bw", "-s", "1024", "-n", "300"}, "1024"},
		{"write_bw many packets", []string{"write_bw", "-s", "4099", "-n", "200"}, "4099"},
		{"read_bw", []string{"read_bw", "-s", "3000", "-n", "200"}, "3000"},
		{"read_bw small", []string{"read_bw", "-s", "64", "-n", "300"}, "64"},
		{"send_bw", []string{"send_bw", "-s", "2500", "-n", "1000"}, "2500"},
		{"atomic_bw fetch-add", []string{"atomic_bw", "-n", "300"}, "8"},
		{"atomic_bw compare-swap", []string{"atomic_bw", "-A", "CMP_AND_SWAP", "-n", "100"}, "8"},
		{"write_lat", []string{"write_lat", "-s", "2053", "-n", "300"}, "2053"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			udp, tcp := freePorts(t)
			common := append([]string{"perftest"}, tt.args...)
			common = append(common, "--mtu", "1024", "--port", fmt.Sprint(udp), "--oob-port", fmt.Sprint(tcp), "--counters")
			srv, cli := runPair(t,
				append(append([]string{}, common...), "--bind", "127.0.0.1"),
				append(append([]string{}, common...), "--bind", "127.0.0.2", "127.0.0.1"), nil)
			row := bwRow
			if tt.args[0] == "write_lat" {
				row = latRow
			}
			for side, out := range map[string]string{"server": srv, "client": cli} {
				m := row.FindStringSubmatch(out)
				if m == nil || m[1] != tt.size {
					t.Fatalf("%s prints no result row for %s bytes:\n%s", side, tt.size, out)
				}
				c := counters(t, out)
				for _, name := range []string{"bad_icrc", "icrc_ipid_recovered", "malformed", "unknown_qp"} {
					if c[name] != 0 {
						t.Errorf("%s: %s = %d:\n%s", side, name, c[name], out)
					}
				}
			}
			if tt.args[0] != "send_bw" && tt.args[0] != "write_lat" && bwRow.FindString(srv) != bwRow.FindString(cli) {
				t.Errorf("the server prints the client's results %q as %q", bwRow.FindString(cli), bwRow.FindString(srv))
			}
		})
	}
}

// TestPerftestPeerErrors: a peer that breaks off the exchange or sends
// nonsense ends the test with an error that says where.
func TestPerftestPeerErrors(t *testing.T) {
	tests := []struct {
		name string
		peer func(c net.Conn)
		want string
	}{
		{"closes without answering", func(c net.Conn) {
			// Read what the client sent first: closing with it unread
			// would reset the connection rather than end it.
			io.ReadFull(c, make([]byte, oobVersionSize))
		}, "version: the peer closed the connection while 16 bytes were expected"},
		{"old version", func(c net.Conn) {
			b := make([]byte, oobVersionSize)
			c.Read(b)
			c.Write(append([]byte("5.0"), make([]byte, oobVersionSize-3)...))
		}, "softnic speaks the exchange of 5.33"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				tt.peer(c)
			}()
			udp, _ := freePorts(t)
			port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
			code, _, stderr := runCmd("perftest", "write_bw", "--bind", "127.0.0.1", "--port", fmt.Sprint(udp), "--oob-port", port, "127.0.0.1")
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, tt.want)
			}
		})
	}
}

func TestPerftestBadUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no test", []string{}, "missing argument"},
		{"unknown test", []string{"ping_bw"}, `unknown test "ping_bw"`},
		{"two hosts", []string{"write_bw", "a", "b"}, "too many arguments: b"},
		{"bad bind", []string{"write_bw", "--bind", "host"}, `--bind "host": want an IP address`},
		{"atomic operation", []string{"atomic_bw", "-A", "SWAP"}, `-A "SWAP": want FETCH_AND_ADD or CMP_AND_SWAP`},
		{"atomic size", []string{"atomic_bw", "-s", "64"}, "atomic_bw moves 8 bytes"},
		{"size word", []string{"write_bw", "-s", "big"}, `-s: size "big"`},
		{"size too big", []string{"write_bw", "-s", "128m"}, "-s 134217728: at most 64m"},
		{"iterations", []string{"write_bw", "-n", "-1"}, "-n -1: want 1 to"},
		{"latency of one", []string{"write_lat", "-n", "1"}, "write_lat: at least 2"},
		{"port", []string{"write_bw", "--port", "0"}, "--port 0"},
		{"timeout", []string{"write_bw", "-u", "32"}, "-u 32: want a timeout exponent from 0 to 31"},
		{"oob port", []string{"write_bw", "--oob-port", "70000"}, "--oob-port 70000"},
		{"mtu", []string{"write_bw", "--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"perftest"}, tt.args...)...)
			first, _, _ := strings.Cut(stderr, "\n")
			if code != 2 || stdout != "" || !strings.HasPrefix(first, "softnic perftest: ") || !strings.Contains(first, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, first, tt.stderr)
			}
		})
	}
}
