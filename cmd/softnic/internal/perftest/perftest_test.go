package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
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

func TestCQModeration(t *testing.T) {
	// perftest 4.5's rule: every 100th completion, every one for messages
	// over 8 KiB unless -Q is given, never more than the TX depth.
	tests := []struct {
		name        string
		size, cqMod int
		depth, want int
	}{
		{"small message", 4096, 0, 128, 100},
		{"8 KiB", 8192, 0, 128, 100},
		{"over 8 KiB", 8193, 0, 128, 1},
		{"64 KiB", 65536, 0, 128, 1},
		{"64 KiB with -Q 100", 65536, 100, 128, 100},
		{"-Q 1 on small messages", 64, 1, 128, 1},
		{"-Q past the depth", 64, 500, 128, 128},
		{"default past a short test's depth", 64, 0, 20, 20},
	}
	for _, tt := range tests {
		c := Config{Size: tt.size, CQMod: tt.cqMod}
		if got := c.cqModeration(tt.depth); got != tt.want {
			t.Errorf("%s: size %d, -Q %d, depth %d: moderation %d, want %d", tt.name, tt.size, tt.cqMod, tt.depth, got, tt.want)
		}
	}
}

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
		op      AtomicOp
		bad     bool
	}{
		{"fetch-add over two slots", words(10, 500, 11, 501, 12), 2, FetchAndAdd, false},
		{"fetch-add skipped one", words(10, 500, 12, 501), 2, FetchAndAdd, true},
		{"fetch-add from another slot", words(10, 500, 501, 11), 2, FetchAndAdd, true},
		{"compare-swap leaves the slot", words(7, 9, 7, 9, 7), 2, CmpAndSwap, false},
		{"compare-swap changed it", words(7, 9, 8, 9), 2, CmpAndSwap, true},
		{"fewer operations than slots", words(1, 2, 3), 64, FetchAndAdd, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkAtomicResults(tt.results, tt.slots, tt.op)
			if bad := errors.Is(err, tooldev.ErrDataCheck); bad != tt.bad || err != nil && !bad {
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
