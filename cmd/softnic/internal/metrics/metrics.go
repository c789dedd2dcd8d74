// Package metrics exposes a softnic daemon's counters to Prometheus
// (softnic serve --metrics). Its Collector reads the counters when it is
// scraped, from a snapshot the daemon takes of its device, so the packet
// path counts nothing twice and pays nothing while nobody scrapes.
//
// Every counter of softnic stat is exported once:
//   - rxe's hw_counters and softnic's own as softnic_NAME_total
//     (softnic_sent_pkts_total, softnic_rdma_sends_total, ...): rdma
//     statistic's names, with Prometheus's prefix and suffix;
//   - the packets dropped as one metric with a reason label,
//     softnic_dropped_packets_total{reason="bad_icrc"}, the remote accesses
//     refused (stat's rejected_*) as softnic_refused_accesses_total{reason},
//     and the fault injector's work as softnic_injected_faults_total{fault}:
//     one query sums them, and a new reason is a new label value, not a new
//     metric for the dashboard to learn;
//   - the levels (connections_active, attached_processes, goroutines, ...)
//     and the limits (limit_NAME: softnic_limit_cm_half_open, ...) as
//     gauges, and stat's qps as softnic_qps{state}, by state.
//
// Per-QP and per-process series are bounded: a daemon may hold thousands of
// QPs, and each label value is a series Prometheus keeps for weeks. The
// Collector exports the MaxQPs QPs that moved the most bytes (sent and
// received, over their lives) and the MaxProcesses attached processes that
// posted the most work, and counts the rest in softnic_qp_series_omitted
// and softnic_attached_series_omitted. It does not add the rest up into an
// "other" series: such a sum falls whenever a QP leaves it (destroyed, or
// promoted to the top), which Prometheus takes for a counter reset and
// turns into a spike in rate(). The device-wide counters cover every QP;
// softnic_qps{state} counts all of them by state.
package metrics

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/softnic/softnic/verbs"
)

// Counter is one named count, as softnic stat shows it.
type Counter struct {
	Name  string
	Value uint64
}

// QP is one QP of the daemon or of a process attached to it.
type QP struct {
	QPN        uint32
	PID        int    // the process that owns it: the daemon's own, or an attached one
	State      string // qp.State's name: RESET, INIT, RTR, RTS, SQD, SQE, ERR
	SendQueued int    // send WRs posted and not completed
	Traffic    verbs.Traffic
}

// Process is a process attached to the daemon.
type Process struct {
	PID      int
	Counters []Counter // cumulative counts, summed over its sessions (doorbells, send_wqes, ...)
	Gauges   []Counter // levels (pds, qps)
}

// Quota is what an account holds of a resource in the daemon against its
// limit: all attached processes together (UID "") or one user's.
type Quota struct {
	UID         string
	Resource    string // quota.Resource's name: qps, memory, ...
	Used, Limit uint64
}

// Snapshot is what the daemon shows at one scrape.
type Snapshot struct {
	// Counters are softnic stat's counters except the per-process ones:
	// the device's, the refused accesses (rejected_*) and the daemon's.
	Counters    []Counter
	QPs         []QP
	Processes   []Process
	Regions     int    // memory regions registered on the device
	RegionBytes uint64 // their total length
	// Quotas are softnic stat's quota_total_* and quota_uidUID_*;
	// QuotaRefused its quota_refused_* by resource, and UserRefused its
	// quota_uidUID_refused by uid.
	Quotas                    []Quota
	QuotaRefused, UserRefused []Counter
}

// Limits of the per-QP and per-process series.
const (
	DefaultMaxQPs       = 64
	DefaultMaxProcesses = 16
)

// Collector is a prometheus.Collector of a daemon's snapshots.
type Collector struct {
	snapshot     func() *Snapshot
	maxQPs       int
	maxProcesses int
}

// NewCollector returns a Collector that calls snapshot at each scrape and
// exports at most maxQPs QPs and maxProcesses processes (0: the defaults).
func NewCollector(snapshot func() *Snapshot, maxQPs, maxProcesses int) *Collector {
	return &Collector{snapshot: snapshot, maxQPs: cmp.Or(maxQPs, DefaultMaxQPs), maxProcesses: cmp.Or(maxProcesses, DefaultMaxProcesses)}
}

// Describe describes nothing: the Collector is unchecked, since the
// counters a daemon has (new drop reasons, a process's counts) are known
// only when it is scraped.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

const ns = "softnic"

// Kinds of device counters beyond a plain softnic_NAME_total.
const (
	kindCounter = iota
	kindGauge
	kindDropped
	kindFault
	kindCovered // exported another way: stat's qps are softnic_qps{state} summed
)

// kinds says how each of softnic stat's counters that is not a plain
// counter is exported; the refused accesses are recognised by their
// prefix, rejected_, and the limits, gauges, by theirs, limit_ (kindOf).
var kinds = map[string]int{
	"bad_icrc": kindDropped, "malformed": kindDropped, "unknown_qp": kindDropped, "ghost_ack": kindDropped,
	"duplicate_response": kindDropped, "wrong_qp_state": kindDropped, "wrong_transport": kindDropped,
	"bad_qkey": kindDropped, "ud_dropped": kindDropped, "wrong_source": kindDropped, "bad_pkey": kindDropped,
	"cm_rx_dropped": kindDropped,
	"fault_dropped": kindFault, "fault_duplicated": kindFault, "fault_corrupted": kindFault, "fault_delayed": kindFault,
	"connections_active": kindGauge, "attached_processes": kindGauge, "goroutines": kindGauge, "heap_live_bytes": kindGauge,
	"qps": kindCovered,
}

// help explains softnic stat's counters; rxe's carry rdma statistic's
// meanings. A counter missing here is still exported, with a generic help.
var help = map[string]string{
	"sent_pkts":              "RoCEv2 packets sent (rxe's sent_pkts).",
	"rcvd_pkts":              "RoCEv2 packets received and handed to a QP (rxe's rcvd_pkts).",
	"sent_bytes":             "Bytes of the packets sent, BTH through ICRC.",
	"rcvd_bytes":             "Bytes of the packets received and handed to a QP, BTH through ICRC.",
	"duplicate_request":      "Requests with a PSN already executed, answered again (rxe's duplicate_request).",
	"out_of_seq_request":     "Requests ahead of the expected PSN: a PSN sequence error NAK (rxe's out_of_seq_request).",
	"rcvd_rnr_err":           "RNR NAKs received (rxe's rcvd_rnr_err).",
	"send_rnr_err":           "RNR NAKs sent: a SEND with no receive posted (rxe's send_rnr_err).",
	"rcvd_seq_err":           "PSN sequence error NAKs received (rxe's rcvd_seq_err).",
	"ack_deferred":           "ACKs folded into a later coalesced ACK (rxe's ack_deferred).",
	"retry_exceeded_err":     "Work requests failed with RETRY_EXC_ERR (rxe's retry_exceeded_err).",
	"retry_rnr_exceeded_err": "Work requests failed with RNR_RETRY_EXC_ERR (rxe's retry_rnr_exceeded_err).",
	"completer_retry_err":    "Go-back-N retries started (rxe's completer_retry_err).",
	"send_err":               "Packets that could not be built or sent (rxe's send_err).",
	"rdma_sends":             "SEND work requests completed (rxe's rdma_sends).",
	"rdma_recvs":             "Receive work requests completed successfully (rxe's rdma_recvs).",
	"retransmitted_pkts":     "Request packets sent again by go-back-N.",
	"bad_request":            "Requests NAKed as invalid (opcode sequence, length, access).",
	"remote_access_err":      "Requests NAKed with a remote access error.",
	"uc_dropped_msgs":        "UC messages dropped after a PSN gap or without a receive WR.",
	"icrc_ipid_recovered":    "IPv4 packets accepted with a recovered IP identification.",
	"icrc_ipid_verified":     "IPv4 packets whose ICRC verified with the identification a raw socket saw them carry.",
	"path_mtu_exceeded":      "Packets the kernel refused as larger than the route carries (EMSGSIZE); the path MTU was lowered.",
	"send_batches":           "Batches of packets sent, each in one sendmmsg system call.",
	"mcast_dropped":          "Packets for the multicast QPN to a group no QP of the device is attached to.",
	"cm_rejected_busy":       "Connection requests refused beyond the half-open limits (rejected, or dropped past the reject rate).",
	"cm_rejects_dropped":     "Connection requests dropped unanswered: their source had spent its rejects.",
	"cm_handshake_timeouts":  "Connection requests dropped when their handshake did not complete in time.",
	"cm_tx_msgs":             "Connection manager MADs sent, retransmissions included.",
	"cm_tx_retries":          "Connection manager MADs sent again after a timeout.",
	"cm_rx_msgs":             "Connection manager MADs received.",
	"cm_rx_duplicates":       "Connection manager MADs received again, answered from state.",
	"cm_established":         "Connections that reached the established state.",
	"cm_disconnected":        "Established connections that ended.",
	"connections_accepted":   "Connections the daemon accepted on its rdma_cm port.",
	"connections_active":     "Connections of the daemon open now.",
	"sends_received":         "SENDs the daemon received on its receive buffers.",
	"send_bytes_received":    "Bytes of the SENDs the daemon received.",
	"write_imms_received":    "RDMA WRITEs with immediate the daemon received.",
	"receive_errors":         "Receive completions of the daemon with an error status.",
	"receives_paced":         "Receive buffers of the daemon posted again late, to keep to --send-rate SENDs a second.",
	"attached_processes":     "Processes attached to the daemon's device.",
	"goroutines":             "Goroutines of the daemon.",
	"heap_live_bytes":        "The daemon's live heap as of the last garbage collection.",
	"gc_cycles":              "The daemon's garbage collections.",
}

// Collect exports one snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	if s == nil {
		return // the daemon is stopping
	}
	c.collectDevice(ch, s.Counters)
	gauge(ch, "regions", "Memory regions registered on the device.", float64(s.Regions))
	gauge(ch, "region_bytes", "Total length of the memory regions registered on the device.", float64(s.RegionBytes))
	c.collectQPs(ch, s.QPs)
	c.collectProcesses(ch, s.Processes)
	collectQuotas(ch, s)
}

// collectQuotas exports what the attached processes hold against their
// limits, with a scope label (total or uid): one series per user and
// resource, few as users are.
func collectQuotas(ch chan<- prometheus.Metric, s *Snapshot) {
	labels := []string{"scope", "uid", "resource"}
	used := prometheus.NewDesc(ns+"_quota_used",
		"What attached processes hold in the daemon: all of them (scope total) or one user's (scope uid); memory and heap in bytes (softnic stat's quota_*).", labels, nil)
	limit := prometheus.NewDesc(ns+"_quota_limit", "The limit of quota_used (softnic serve --limit).", labels, nil)
	for _, q := range s.Quotas {
		scope := "uid"
		if q.UID == "" {
			scope = "total"
		}
		ch <- prometheus.MustNewConstMetric(used, prometheus.GaugeValue, float64(q.Used), scope, q.UID, q.Resource)
		ch <- prometheus.MustNewConstMetric(limit, prometheus.GaugeValue, float64(q.Limit), scope, q.UID, q.Resource)
	}
	refused := prometheus.NewDesc(ns+"_quota_refused_total", "Requests of attached processes refused at a limit, by the resource asked for.", []string{"resource"}, nil)
	for _, k := range s.QuotaRefused {
		ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(k.Value), k.Name)
	}
	user := prometheus.NewDesc(ns+"_quota_user_refused_total", "Requests of one user's attached processes refused at a limit.", []string{"uid"}, nil)
	for _, k := range s.UserRefused {
		ch <- prometheus.MustNewConstMetric(user, prometheus.CounterValue, float64(k.Value), k.Name)
	}
}

func (c *Collector) collectDevice(ch chan<- prometheus.Metric, counters []Counter) {
	dropped := prometheus.NewDesc(ns+"_dropped_packets_total",
		"Packets dropped, by reason: bad ICRC, undecodable, no such QP, wrong state, wrong source, ... (softnic stat).", []string{"reason"}, nil)
	refused := prometheus.NewDesc(ns+"_refused_accesses_total",
		"Remote accesses (RDMA READ, WRITE, atomics) refused by the region table, by reason (softnic stat's rejected_*).", []string{"reason"}, nil)
	faults := prometheus.NewDesc(ns+"_injected_faults_total",
		"Packets the fault injector (--faults) dropped, duplicated, corrupted or delayed.", []string{"fault"}, nil)
	for _, k := range counters {
		v := float64(k.Value)
		if reason, ok := strings.CutPrefix(k.Name, "rejected_"); ok {
			ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, v, reason)
			continue
		}
		switch kindOf(k.Name) {
		case kindDropped:
			ch <- prometheus.MustNewConstMetric(dropped, prometheus.CounterValue, v, k.Name)
		case kindFault:
			ch <- prometheus.MustNewConstMetric(faults, prometheus.CounterValue, v, strings.TrimPrefix(k.Name, "fault_"))
		case kindGauge:
			gauge(ch, k.Name, helpOf(k.Name), v)
		case kindCovered:
		default:
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(ns+"_"+sanitize(k.Name)+"_total", helpOf(k.Name), nil, nil),
				prometheus.CounterValue, v)
		}
	}
}

// Level reports whether softnic stat's counter name is a level, such as
// connections_active or qps, rather than a count: it can fall, and a rate
// of it means nothing.
func Level(name string) bool {
	k := kindOf(name)
	return k == kindGauge || k == kindCovered
}

// kindOf returns how softnic stat's counter name is exported.
func kindOf(name string) int {
	if strings.HasPrefix(name, "limit_") {
		return kindGauge
	}
	return kinds[name]
}

func helpOf(name string) string {
	if h, ok := help[name]; ok {
		return h
	}
	return "softnic stat's " + name + "."
}

func gauge(ch chan<- prometheus.Metric, name, help string, v float64) {
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(ns+"_"+sanitize(name), help, nil, nil), prometheus.GaugeValue, v)
}

// qpStates are the states softnic_qps counts, each always exported.
var qpStates = []string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// qpSeries are the per-QP counters, each with the QP's part of Traffic.
var qpSeries = []struct {
	name, help string
	value      func(*verbs.Traffic) uint64
}{
	{"sent_pkts", "Packets the QP built: requests, responses, retransmissions.", func(t *verbs.Traffic) uint64 { return t.SentPkts }},
	{"sent_bytes", "Bytes of the packets the QP built, BTH through ICRC.", func(t *verbs.Traffic) uint64 { return t.SentBytes }},
	{"rcvd_pkts", "Packets handed to the QP.", func(t *verbs.Traffic) uint64 { return t.RcvdPkts }},
	{"rcvd_bytes", "Bytes of the packets handed to the QP, BTH through ICRC.", func(t *verbs.Traffic) uint64 { return t.RcvdBytes }},
	{"sent_msgs", "Send work requests the QP completed successfully.", func(t *verbs.Traffic) uint64 { return t.SentMsgs }},
	{"rcvd_msgs", "Requests the QP's responder completed, and UD datagrams it delivered.", func(t *verbs.Traffic) uint64 { return t.RcvdMsgs }},
}

func (c *Collector) collectQPs(ch chan<- prometheus.Metric, qps []QP) {
	byState := map[string]int{}
	for i := range qps {
		byState[qps[i].State]++
	}
	states := prometheus.NewDesc(ns+"_qps", "QPs of the device (the daemon's and the attached processes'), by state.", []string{"state"}, nil)
	for _, s := range qpStates {
		ch <- prometheus.MustNewConstMetric(states, prometheus.GaugeValue, float64(byState[s]), s)
	}
	top := slices.Clone(qps)
	slices.SortFunc(top, func(a, b QP) int {
		return cmp.Or(cmp.Compare(b.Traffic.SentBytes+b.Traffic.RcvdBytes, a.Traffic.SentBytes+a.Traffic.RcvdBytes), cmp.Compare(a.QPN, b.QPN))
	})
	omitted := max(len(top)-c.maxQPs, 0)
	top = top[:len(top)-omitted]
	gauge(ch, "qp_series_omitted", fmt.Sprintf("QPs left out of the per-QP series, which show the %d that moved the most bytes.", c.maxQPs), float64(omitted))
	labels := []string{"qpn", "pid"}
	queued := prometheus.NewDesc(ns+"_qp_send_queued", "Send work requests posted on the QP and not completed.", labels, nil)
	descs := make([]*prometheus.Desc, len(qpSeries))
	for i, s := range qpSeries {
		descs[i] = prometheus.NewDesc(ns+"_qp_"+s.name+"_total", s.help, labels, nil)
	}
	for i := range top {
		q := &top[i]
		qpn, pid := "0x"+strconv.FormatUint(uint64(q.QPN), 16), strconv.Itoa(q.PID)
		for j, s := range qpSeries {
			ch <- prometheus.MustNewConstMetric(descs[j], prometheus.CounterValue, float64(s.value(&q.Traffic)), qpn, pid)
		}
		ch <- prometheus.MustNewConstMetric(queued, prometheus.GaugeValue, float64(q.SendQueued), qpn, pid)
	}
}

func (c *Collector) collectProcesses(ch chan<- prometheus.Metric, ps []Process) {
	work := func(p *Process) (n uint64) {
		for _, k := range p.Counters {
			n += k.Value
		}
		return n
	}
	top := slices.Clone(ps)
	slices.SortFunc(top, func(a, b Process) int { return cmp.Or(cmp.Compare(work(&b), work(&a)), cmp.Compare(a.PID, b.PID)) })
	omitted := max(len(top)-c.maxProcesses, 0)
	top = top[:len(top)-omitted]
	gauge(ch, "attached_series_omitted", fmt.Sprintf("Attached processes left out of the per-process series, which show the %d that posted the most work.", c.maxProcesses), float64(omitted))
	descs := map[string]*prometheus.Desc{}
	desc := func(name, suffix, help string) *prometheus.Desc {
		d := descs[name+suffix]
		if d == nil {
			d = prometheus.NewDesc(ns+"_attached_"+sanitize(name)+suffix, help, []string{"pid"}, nil)
			descs[name+suffix] = d
		}
		return d
	}
	for i := range top {
		p := &top[i]
		pid := strconv.Itoa(p.PID)
		for _, k := range p.Counters {
			ch <- prometheus.MustNewConstMetric(desc(k.Name, "_total", "An attached process's "+k.Name+" (softnic stat's pidPID_"+k.Name+")."),
				prometheus.CounterValue, float64(k.Value), pid)
		}
		for _, k := range p.Gauges {
			ch <- prometheus.MustNewConstMetric(desc(k.Name, "", "An attached process's "+k.Name+" now (softnic stat's pidPID_"+k.Name+")."),
				prometheus.GaugeValue, float64(k.Value), pid)
		}
	}
}

// sanitize makes name a valid part of a metric name: letters, digits and
// underscores.
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, name)
}

// Handler returns the /metrics handler: the Collector's metrics and the Go
// runtime's and the process's own (go_*, process_*). At most a few scrapes
// are answered at once, each within a time limit: a scraper cannot pile
// work onto the daemon. A metric that cannot be exported (two counters
// whose names clash once sanitized) is left out and told to logf; the
// rest are served.
func Handler(c *Collector, logf func(format string, args ...any)) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: printer(logf), ErrorHandling: promhttp.ContinueOnError,
		MaxRequestsInFlight: 4, Timeout: 10 * time.Second,
	})
}

// printer is a logf as promhttp's Logger.
type printer func(format string, args ...any)

func (p printer) Println(v ...any) { p("%s", fmt.Sprint(v...)) }
