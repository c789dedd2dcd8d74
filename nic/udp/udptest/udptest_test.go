package udptest

import (
	"math"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	us := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Microsecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100, 99, …, 1: unsorted on purpose
	}
	tests := []struct {
		name        string
		rtts        []time.Duration
		median, p99 time.Duration
	}{
		{name: "none", rtts: nil},
		{name: "one", rtts: us(7), median: 7 * time.Microsecond, p99: 7 * time.Microsecond},
		{name: "odd count, unsorted", rtts: us(30, 10, 20), median: 20 * time.Microsecond, p99: 30 * time.Microsecond},
		{name: "even count takes the lower median", rtts: us(4, 1, 3, 2), median: 2 * time.Microsecond, p99: 4 * time.Microsecond},
		{name: "hundred samples", rtts: us(hundred...), median: 50 * time.Microsecond, p99: 99 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := percentiles(tt.rtts)
			if got.Median != tt.median || got.P99 != tt.p99 {
				t.Fatalf("percentiles = %v / %v, want %v / %v", got.Median, got.P99, tt.median, tt.p99)
			}
		})
	}
}

func TestThroughputResult(t *testing.T) {
	tests := []struct {
		name                  string
		sent, received, bytes int64
		elapsed               time.Duration
		gbps, dgramsPerS      float64
		loss                  float64
	}{
		{name: "nothing sent"},
		{name: "no loss", sent: 1000, received: 1000, bytes: 1000 * 4096, elapsed: time.Millisecond, gbps: 32.768, dgramsPerS: 1e6},
		{name: "a third lost", sent: 300, received: 200, bytes: 200 * 1000, elapsed: time.Second, gbps: 0.0016, dgramsPerS: 200, loss: 100.0 / 3},
		{name: "zero elapsed", sent: 1, received: 1, bytes: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := throughputResult(tt.sent, tt.received, tt.bytes, tt.elapsed)
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
			if !near(got.Gbps, tt.gbps) || !near(got.DatagramsPerS, tt.dgramsPerS) || !near(got.LossPercent, tt.loss) {
				t.Fatalf("got %.6g Gbit/s, %.6g dgrams/s, %.6g%% loss; want %.6g, %.6g, %.6g", got.Gbps, got.DatagramsPerS, got.LossPercent, tt.gbps, tt.dgramsPerS, tt.loss)
			}
			if got.Sent != tt.sent || got.Received != tt.received || got.Elapsed != tt.elapsed {
				t.Fatalf("counts %+v, want sent %d received %d elapsed %v", got, tt.sent, tt.received, tt.elapsed)
			}
		})
	}
}

// A softnic benchmark measures raw UDP beside itself in the same run, so
// the two figures come from the same machine state.
func ExampleThroughput() {
	_ = func(b *testing.B) {
		raw := Throughput(b, ThroughputConfig{Size: 4096, GSO: true, GRO: true})
		b.Logf("raw UDP: %.1f Gbit/s, %.1f%% lost", raw.Gbps, raw.LossPercent)
	}
}
