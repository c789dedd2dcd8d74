package bench

import (
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

// The WRITEs over 1 to 64 QPs are one series, next to each other in
// nicbench.Workloads, so that softnic bench measures them all in turns.
func TestQPSeriesInTurns(t *testing.T) {
	figs := make([]benchFigures, len(nicbench.Workloads))
	first, n := -1, 0
	for i, w := range nicbench.Workloads {
		figs[i].w = w
		if w.Series == "qps" {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	if n < 4 {
		t.Fatalf("%d workloads in the qps series, want the four QP counts", n)
	}
	if end := seriesEnd(figs, first); end-first != n {
		t.Errorf("the qps series' %d workloads are not next to each other: a run of %d from %s", n, end-first, nicbench.Workloads[first].Key)
	}
}
