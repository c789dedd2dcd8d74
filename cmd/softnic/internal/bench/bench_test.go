package bench

import (
	"slices"
	"testing"

	"github.com/softnic/softnic/nic/nicbench"
)

// seriesEnd finds the runs of workloads measured in turns: those of one
// series, next to each other.
func TestSeriesEnd(t *testing.T) {
	fig := func(series string) benchFigures { return benchFigures{w: nicbench.Workload{Series: series}} }
	figs := []benchFigures{fig(""), fig("qps"), fig("qps"), fig(""), fig("qps"), fig("x"), fig("x")}
	for _, tc := range []struct{ from, want int }{
		{0, 1}, // none: alone
		{1, 3}, // a series of two
		{2, 3},
		{3, 4},
		{4, 5}, // a series of one, another series after it
		{5, 7}, // to the end
	} {
		if got := seriesEnd(figs, tc.from); got != tc.want {
			t.Errorf("seriesEnd(%d) = %d, want %d", tc.from, got, tc.want)
		}
	}
}

// The WRITEs over 1 to 64 QPs are one series, and each 8-byte latency
// busy-polled and waited for is one, next to each other in
// nicbench.Workloads, so that softnic bench measures each in turns.
func TestSeriesInTurns(t *testing.T) {
	figs := make([]benchFigures, len(nicbench.Workloads))
	for i, w := range nicbench.Workloads {
		figs[i].w = w
	}
	for _, tc := range []struct {
		series string
		keys   []string
	}{
		{"qps", []string{"write_64k_qps1_gbps", "write_64k_qps4_gbps", "write_64k_qps16_gbps", "write_64k_qps64_gbps"}},
		{"write_8", []string{"write_8_poll", "write_8_wait"}},
		{"read_8", []string{"read_8_poll", "read_8_wait"}},
		{"fetch_add_8", []string{"fetch_add_8_poll", "fetch_add_8_wait"}},
	} {
		first := slices.IndexFunc(figs, func(f benchFigures) bool { return f.w.Series == tc.series })
		if first < 0 {
			t.Errorf("no workload of the %s series", tc.series)
			continue
		}
		var keys []string
		for _, f := range figs[first:seriesEnd(figs, first)] {
			keys = append(keys, f.w.Key)
		}
		if !slices.Equal(keys, tc.keys) {
			t.Errorf("the %s series is measured in turns as %v, want %v next to each other", tc.series, keys, tc.keys)
		}
	}
}
