package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/softnic/softnic/verbs"
)

// snapshot is a daemon with a counter of each kind, nQPs QPs (QP i moved
// i kB) and nProcs attached processes (process i posted i WQEs).
func snapshot(nQPs, nProcs int) *Snapshot {
	s := &Snapshot{
		Counters: []Counter{{"sent_pkts", 10}, {"rdma_sends", 2}, {"bad_icrc", 3}, {"unknown_qp", 4},
			{"rejected_unknown_key", 5}, {"fault_dropped", 6}, {"connections_active", 7}, {"odd-name", 8}},
		Regions: 2, RegionBytes: 3 << 20,
	}
	for i := range nQPs {
		s.QPs = append(s.QPs, QP{QPN: uint32(0x100 + i), PID: 42, State: []string{"RTS", "ERR"}[i%2], SendQueued: i,
			Traffic: verbs.Traffic{SentBytes: uint64(i) << 10, SentPkts: uint64(i)}})
	}
	for i := range nProcs {
		s.Processes = append(s.Processes, Process{PID: 1000 + i, Counters: []Counter{{"send_wqes", uint64(i)}}, Gauges: []Counter{{"qps", 1}}})
	}
	return s
}

func TestCollector(t *testing.T) {
	c := NewCollector(func() *Snapshot { return snapshot(5, 2) }, 3, 1)
	for _, tc := range []struct {
		metric, want string
	}{
		{"softnic_sent_pkts_total", "softnic_sent_pkts_total 10\n"},
		{"softnic_rdma_sends_total", "softnic_rdma_sends_total 2\n"},
		{"softnic_dropped_packets_total", "softnic_dropped_packets_total{reason=\"bad_icrc\"} 3\nsoftnic_dropped_packets_total{reason=\"unknown_qp\"} 4\n"},
		{"softnic_refused_accesses_total", "softnic_refused_accesses_total{reason=\"unknown_key\"} 5\n"},
		{"softnic_injected_faults_total", "softnic_injected_faults_total{fault=\"dropped\"} 6\n"},
		{"softnic_connections_active", "softnic_connections_active 7\n"},
		{"softnic_odd_name_total", "softnic_odd_name_total 8\n"},
		{"softnic_regions", "softnic_regions 2\n"},
		{"softnic_qps", "softnic_qps{state=\"ERR\"} 2\nsoftnic_qps{state=\"INIT\"} 0\nsoftnic_qps{state=\"RESET\"} 0\nsoftnic_qps{state=\"RTR\"} 0\nsoftnic_qps{state=\"RTS\"} 3\nsoftnic_qps{state=\"SQD\"} 0\nsoftnic_qps{state=\"SQE\"} 0\n"},
		// The 3 QPs that moved the most bytes, the 2 others counted.
		{"softnic_qp_sent_bytes_total", "softnic_qp_sent_bytes_total{pid=\"42\",qpn=\"0x102\"} 2048\nsoftnic_qp_sent_bytes_total{pid=\"42\",qpn=\"0x103\"} 3072\nsoftnic_qp_sent_bytes_total{pid=\"42\",qpn=\"0x104\"} 4096\n"},
		{"softnic_qp_series_omitted", "softnic_qp_series_omitted 2\n"},
		{"softnic_qp_send_queued", "softnic_qp_send_queued{pid=\"42\",qpn=\"0x102\"} 2\nsoftnic_qp_send_queued{pid=\"42\",qpn=\"0x103\"} 3\nsoftnic_qp_send_queued{pid=\"42\",qpn=\"0x104\"} 4\n"},
		// The process that posted the most, the other counted.
		{"softnic_attached_send_wqes_total", "softnic_attached_send_wqes_total{pid=\"1001\"} 1\n"},
		{"softnic_attached_qps", "softnic_attached_qps{pid=\"1001\"} 1\n"},
		{"softnic_attached_series_omitted", "softnic_attached_series_omitted 1\n"},
	} {
		got := exposition(t, c, tc.metric)
		if got != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.metric, got, tc.want)
		}
	}
}

// exposition returns the samples of metric in the text format, without
// its HELP and TYPE lines.
func exposition(t *testing.T, c prometheus.Collector, metric string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			b.WriteString(f.GetName())
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				b.WriteString("{" + strings.Join(ls, ",") + "}")
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			fmt.Fprintf(&b, " %g\n", v)
		}
	}
	return b.String()
}

// TestCollectorLint: the metric names and help follow Prometheus's
// conventions (promtool check metrics).
func TestCollectorLint(t *testing.T) {
	c := NewCollector(func() *Snapshot { return snapshot(3, 2) }, 0, 0)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCollectorBounded: however many QPs and processes, the series stay
// within the limits.
func TestCollectorBounded(t *testing.T) {
	small := testutil.CollectAndCount(NewCollector(func() *Snapshot { return snapshot(64, 16) }, 0, 0))
	large := testutil.CollectAndCount(NewCollector(func() *Snapshot { return snapshot(5000, 300) }, 0, 0))
	if small != large {
		t.Errorf("%d series for 5000 QPs and 300 processes, %d for 64 and 16: want as many", large, small)
	}
}

func TestCollectorStopping(t *testing.T) {
	if n := testutil.CollectAndCount(NewCollector(func() *Snapshot { return nil }, 0, 0)); n != 0 {
		t.Errorf("%d series from a stopping daemon, want none", n)
	}
}
