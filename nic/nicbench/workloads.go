package nicbench

import (
	"fmt"
	"strings"
	"time"

	"github.com/softnic/softnic/verbs"
)

// Workload is one measurement.
type Workload struct {
	// Key names the figure in softnic bench --json.
	Key string
	// Name is what fi_rmabw's RESULT line for the same workload says
	// ("write 65536B w=64"; FETCH_ADD is its fetch_sum, a fetching FI_SUM),
	// so that the two outputs compare line by line; a latency learnt by
	// waiting, which fi_rmabw does not measure, ends in "wait".
	Name string
	Op   verbs.WROpcode
	// Size is the bytes each operation moves; Window how many are in
	// flight (1: a latency, the rest rates); QPs how many QPs they are
	// spread over.
	Size, Window, QPs int
	By                Completion
	// Series names the workloads whose figures are read against each
	// other (the WRITEs over 1 to 64 QPs: "qps"; a latency busy-polled
	// and waited for: "write_8"), which softnic bench measures in turns;
	// empty for the others.
	Series string
}

// Kind says what a workload's figure is.
type Kind int

const (
	Bandwidth Kind = iota // Gbit/s of payload
	Rate                  // operations per second
	Delay                 // a round trip's median and 99th percentile
)

// Kind returns what w measures.
func (w Workload) Kind() Kind {
	switch {
	case w.Window == 1:
		return Delay
	case w.Op == verbs.WRFetchAdd:
		return Rate
	}
	return Bandwidth
}

// throughput is fi_rmabw's workload of operations op of size bytes.
func throughput(op verbs.WROpcode, size int) Workload {
	return Workload{Key: fmt.Sprintf("%s_%dk_gbps", opName(op), size>>10), Name: fmt.Sprintf("%s %dB w=%d", opName(op), size, Window),
		Op: op, Size: size, Window: Window, QPs: 1, By: Poll}
}

// aggregate is 64 KiB WRITEs spread over qps QPs.
func aggregate(qps int) Workload {
	w := throughput(verbs.WRWrite, LargeSize)
	w.Key, w.Name, w.QPs, w.Series = fmt.Sprintf("write_64k_qps%d_gbps", qps), fmt.Sprintf("%s qps=%d", w.Name, qps), qps, "qps"
	return w
}

func fetchAdds(window int) Workload {
	return Workload{Key: fmt.Sprintf("fetch_add_%d_ops", window), Name: fmt.Sprintf("fetch_sum u64 w=%d", window),
		Op: verbs.WRFetchAdd, Size: 8, Window: window, QPs: 1, By: Poll}
}

func latency(op verbs.WROpcode, by Completion) Workload {
	key := fmt.Sprintf("%s_8_%s", opName(op), by)
	if op == verbs.WRFetchAdd {
		key = "fetch_add_8_" + by.String()
	}
	name := opName(op) + " 8B latency"
	if by == Wait {
		name += " wait"
	}
	return Workload{Key: key, Name: name, Op: op, Size: 8, Window: 1, QPs: 1, By: by, Series: strings.TrimSuffix(key, "_"+by.String())}
}

func opName(op verbs.WROpcode) string {
	switch op {
	case verbs.WRRead:
		return "read"
	case verbs.WRFetchAdd:
		return "fetch_sum"
	}
	return "write"
}

// Workloads are the measurements softnic bench takes, in order: fi_rmabw's
// (its throughputs with 64 in flight, its busy-polled latencies, each
// beside the same latency learnt by waiting), FETCH_ADD with 16 in flight
// (softnic's earlier figure), and 64 KiB WRITEs over more QPs, 64 in
// flight in all.
var Workloads = []Workload{
	throughput(verbs.WRWrite, SmallSize),
	throughput(verbs.WRWrite, LargeSize),
	throughput(verbs.WRRead, SmallSize),
	throughput(verbs.WRRead, LargeSize),
	fetchAdds(Window),
	latency(verbs.WRWrite, Poll),
	latency(verbs.WRWrite, Wait),
	latency(verbs.WRRead, Poll),
	latency(verbs.WRRead, Wait),
	latency(verbs.WRFetchAdd, Poll),
	latency(verbs.WRFetchAdd, Wait),
	fetchAdds(16),
	aggregate(1),
	aggregate(4),
	aggregate(16),
	aggregate(MaxQPs),
}

// Lookup returns the workload whose key is key.
func Lookup(key string) (Workload, bool) {
	for _, w := range Workloads {
		if w.Key == key {
			return w, true
		}
	}
	return Workload{}, false
}

// Figure is what one run of a workload measured: Value is Gbit/s, operations
// per second or the median round trip in µs, by the workload's kind; P99
// is a latency's 99th percentile in µs.
type Figure struct {
	Value float64
	P99   float64
	Ops   int
}

// Unit names a figure's unit as fi_rmabw prints it; a rate is in
// Mops/s there.
func (k Kind) Unit() string { return [...]string{"Gbit/s", "ops/s", "us"}[k] }

// Run measures w from in until lim ends it. A latency keeps its round
// trips in rtts (whose length bounds it) and reorders them.
func (w Workload) Run(in *Initiator, lim Limit, rtts []time.Duration) (Figure, error) {
	switch w.Kind() {
	case Delay:
		n, err := in.Latency(w.Op, w.By, lim, rtts)
		if err != nil {
			return Figure{}, err
		}
		if n == 0 {
			return Figure{}, fmt.Errorf("%s: no operation completed", w.Name)
		}
		return DelayFigure(rtts[:n]), nil
	case Rate:
		n, d, err := in.FetchAdd(w.Window, w.By, lim)
		return Figure{Value: float64(n) / d.Seconds(), Ops: n}, err
	}
	n, d, err := in.Throughput(w.Op, w.Size, w.Window, w.QPs, w.By, lim)
	return Figure{Value: Gbps(n, w.Size, d), Ops: n}, err
}

// DelayFigure is the figure of a latency's round trips, in µs: their
// median and 99th percentile (it sorts rtts).
func DelayFigure(rtts []time.Duration) Figure {
	l := Percentiles(rtts)
	return Figure{Value: micros(l.Median), P99: micros(l.P99), Ops: len(rtts)}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
