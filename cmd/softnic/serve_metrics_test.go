package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// scrape is one scrape of a daemon's /metrics, parsed by Prometheus's own
// text-format parser.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", "text/plain") // the text format, not protobuf
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s, Content-Type %q\n%s", resp.Status, ct, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// value returns the value of the series of metric whose labels include
// labels (name, value pairs), and whether there is one.
func (s scrape) value(metric string, labels ...string) (float64, bool) {
	f := s[metric]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
				continue next
			}
		}
		return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue(), true
	}
	return 0, false
}

func (s scrape) must(t *testing.T, metric string, labels ...string) float64 {
	t.Helper()
	v, ok := s.value(metric, labels...)
	if !ok {
		t.Fatalf("no series %s%v in the exposition", metric, labels)
	}
	return v
}

// TestServeMetrics scrapes a daemon under traffic: the WRITEs of one
// connection show in the device's counters and, exactly, in the series of
// the daemon's QP; every counter of softnic stat is exported; so are the Go
// runtime's and the process's own.
func TestServeMetrics(t *testing.T) {
	d := startDaemon(t, "--metrics", "127.0.0.1:0")
	if d.ready.Metrics == "" || strings.HasSuffix(d.ready.Metrics, ":0") {
		t.Fatalf("ready line's metrics %q, want the address with its port", d.ready.Metrics)
	}
	before := scrapeMetrics(t, d.ready.Metrics)
	conn, cq, _ := dialDaemonCQ(t, d, nic.Config{})
	qpn := fmt.Sprintf("%#x", conn.QP().Attr().DestQPN) // the daemon's QP
	const writes, size = 20, 100
	mem := d.ready.Regions[0]
	for i := range writes {
		wr := &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled | verbs.Inline, Inline: make([]byte, size),
			RemoteAddr: mem.Addr, RKey: mem.RKey}
		if err := conn.QP().PostSend(wr); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		wc := make([]verbs.WC, 1)
		_, err := cq.Wait(ctx, wc)
		cancel()
		if err != nil || wc[0].Status != verbs.Success {
			t.Fatalf("WRITE %d: %v %v", i, err, wc[0].Status)
		}
	}
	// The daemon counts the connection in its handshake goroutine, which
	// may get to it after the client's dial returned and its WRITEs
	// completed.
	d.counterReaches(t, "connections_active", 1)
	after := scrapeMetrics(t, d.ready.Metrics)

	// The device: at least the WRITEs' packets and bytes (the connection
	// manager's MADs count too).
	const packet = 12 + 16 + size + 4 // BTH, RETH, payload, ICRC
	for _, c := range []struct {
		metric string
		min    float64
	}{{"softnic_rcvd_pkts_total", writes}, {"softnic_rcvd_bytes_total", writes * packet}, {"softnic_sent_pkts_total", 1}, {"softnic_sent_bytes_total", 20}} {
		if rise := after.must(t, c.metric) - before.must(t, c.metric); rise < c.min {
			t.Errorf("%s rose by %v, want at least %v", c.metric, rise, c.min)
		}
	}
	// The daemon's QP: exactly the WRITEs.
	pid := fmt.Sprint(os.Getpid())
	for _, c := range []struct {
		metric string
		want   float64
	}{{"softnic_qp_rcvd_pkts_total", writes}, {"softnic_qp_rcvd_bytes_total", writes * packet}, {"softnic_qp_rcvd_msgs_total", writes},
		{"softnic_qp_sent_msgs_total", 0}, {"softnic_qp_send_queued", 0}} {
		if v := after.must(t, c.metric, "qpn", qpn, "pid", pid); v != c.want {
			t.Errorf("%s{qpn=%q} = %v, want %v", c.metric, qpn, v, c.want)
		}
	}
	if acks := after.must(t, "softnic_qp_sent_pkts_total", "qpn", qpn); acks < 1 || acks > writes {
		t.Errorf("the daemon's QP sent %v packets, want from 1 to %d ACKs", acks, writes)
	}
	if n := after.must(t, "softnic_qps", "state", "RTS"); n != 2 {
		t.Errorf("softnic_qps{state=RTS} = %v, want 2: the connection's QP and QP1, the connection manager's", n)
	}
	if n := after.must(t, "softnic_connections_active"); n != 1 {
		t.Errorf("softnic_connections_active = %v, want 1", n)
	}
	for _, m := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := after[m]; !ok && (m[:2] == "go" || runtimeHasProcfs()) {
			t.Errorf("no %s in the exposition", m)
		}
	}

	// Every counter softnic stat has, under its name or as a reason.
	var stat control.Counters
	d.inspect(t, "stat", &stat)
	for _, c := range stat {
		if strings.HasPrefix(c.Name, "pid") {
			continue // the attached processes' (none here)
		}
		if !exported(after, c.Name) {
			t.Errorf("stat's %s is not in the exposition", c.Name)
		}
	}
}

// exported reports whether stat's counter name is in the scrape: as
// softnic_NAME_total or softnic_NAME, or as the reason of a drop, a refusal
// or a fault.
func exported(s scrape, name string) bool {
	_, total := s.value("softnic_" + name + "_total")
	_, gauge := s.value("softnic_" + name)
	_, drop := s.value("softnic_dropped_packets_total", "reason", name)
	_, refused := s.value("softnic_refused_accesses_total", "reason", strings.TrimPrefix(name, "rejected_"))
	_, fault := s.value("softnic_injected_faults_total", "fault", strings.TrimPrefix(name, "fault_"))
	return total || gauge || drop || refused && strings.HasPrefix(name, "rejected_") || fault && strings.HasPrefix(name, "fault_") ||
		exportedQuota(s, name)
}

// exportedQuota reports whether stat's quota counter name is in the
// scrape: quota_refused_RESOURCE as softnic_quota_refused_total{resource},
// quota_uidUID_refused as softnic_quota_user_refused_total{uid}, and
// quota_total_RESOURCE or quota_uidUID_RESOURCE (with _limit, its limit)
// as softnic_quota_used or _limit {scope, uid, resource}.
func exportedQuota(s scrape, name string) bool {
	rest, ok := strings.CutPrefix(name, "quota_")
	if !ok {
		return false
	}
	if res, ok := strings.CutPrefix(rest, "refused_"); ok {
		_, found := s.value("softnic_quota_refused_total", "resource", res)
		return found
	}
	scope, uid := "total", ""
	if after, ok := strings.CutPrefix(rest, "uid"); ok {
		scope = "uid"
		uid, rest, _ = strings.Cut(after, "_")
		if rest == "refused" {
			_, found := s.value("softnic_quota_user_refused_total", "uid", uid)
			return found
		}
	} else {
		rest = strings.TrimPrefix(rest, "total_")
	}
	metric := "softnic_quota_used"
	if res, ok := strings.CutSuffix(rest, "_limit"); ok {
		metric, rest = "softnic_quota_limit", res
	}
	_, found := s.value(metric, "scope", scope, "uid", uid, "resource", rest)
	return found
}

// runtimeHasProcfs says whether the process collector can read this
// system's /proc.
func runtimeHasProcfs() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// TestServeMetricsAttached: an attached process's QPs and counters have
// series of their own, labelled with its PID.
func TestServeMetricsAttached(t *testing.T) {
	d := startDaemon(t, "--metrics", "127.0.0.1:0")
	q := attachedQP(t, d)
	s := scrapeMetrics(t, d.ready.Metrics)
	pid := fmt.Sprint(os.Getpid())
	if n := s.must(t, "softnic_attached_qps", "pid", pid); n != 1 {
		t.Errorf("softnic_attached_qps{pid=%s} = %v, want 1", pid, n)
	}
	s.must(t, "softnic_attached_doorbells_total", "pid", pid)
	s.must(t, "softnic_qp_sent_pkts_total", "qpn", fmt.Sprintf("%#x", q.Num()), "pid", pid)
	if n := s.must(t, "softnic_qps", "state", "RESET"); n != 1 {
		t.Errorf("softnic_qps{state=RESET} = %v, want the attached QP", n)
	}
	if n := s.must(t, "softnic_attached_processes"); n != 1 {
		t.Errorf("softnic_attached_processes = %v, want 1", n)
	}
	uid := fmt.Sprint(os.Geteuid())
	if n := s.must(t, "softnic_quota_used", "scope", "uid", "uid", uid, "resource", "qps"); n != 1 {
		t.Errorf("softnic_quota_used{uid=%s,resource=qps} = %v, want 1", uid, n)
	}
	s.must(t, "softnic_quota_limit", "scope", "total", "resource", "memory")
}

// attachedQP attaches a device to the daemon for the test, and creates a
// QP on it.
func attachedQP(t *testing.T, d *testDaemon) *nic.QP {
	t.Helper()
	pd, cq := attachedPD(t, d)
	q, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// attachedPD attaches a device to the daemon for the test, and allocates
// a PD and a CQ of 16 on it.
func attachedPD(t *testing.T, d *testDaemon) (*nic.PD, *nic.CQ) {
	t.Helper()
	dev, err := nic.Open(nic.Config{Attach: d.control})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	var cq *nic.CQ
	if err == nil {
		cq, err = dev.CreateCQ(16)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pd, cq
}

// TestServeMetricsFlags: a bad --metrics address is a usage error, one in
// use stops serve with status 2, and /metrics answers GET only.
func TestServeMetricsFlags(t *testing.T) {
	code, _, stderr := runCmd("serve", "--metrics", "nonsense", "--control", t.TempDir()+"/ctl.sock")
	if code != 2 || !strings.Contains(stderr, `--metrics "nonsense": want ADDR:PORT`) {
		t.Errorf("--metrics nonsense: exit status %d, stderr %q", code, stderr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, stderr = runCmd("serve", "--listen", "127.0.0.1:0", "--metrics", l.Addr().String(), "--control", t.TempDir()+"/ctl.sock")
	if code != 2 || !regexp.MustCompile(`^softnic serve: --metrics: .*address already in use\n$`).MatchString(stderr) {
		t.Errorf("--metrics on a port in use: exit status %d, stderr %q", code, stderr)
	}

	d := startDaemon(t, "--metrics", "127.0.0.1:0")
	resp, err := http.Post("http://"+d.ready.Metrics+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %s, want 405", resp.Status)
	}
}

// TestGrafanaDashboard: every metric the dashboard in contrib/grafana
// queries is in the exposition of a daemon with a connection and an
// attached process, and its panels are well formed.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../contrib/grafana/softnic.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			ID      int
			Type    string
			Title   string
			GridPos struct{ X, Y, W, H int }
			Targets []struct {
				RefID string
				Expr  string
			}
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("contrib/grafana/softnic.json: %v", err)
	}
	d := startDaemon(t, "--metrics", "127.0.0.1:0")
	dialDaemon(t, d)
	attachedQP(t, d)
	s := scrapeMetrics(t, d.ready.Metrics)
	metric := regexp.MustCompile(`\b(?:softnic|go|process)_[a-z0-9_]+\b`)
	ids, queried := map[int]bool{}, 0
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q at %+v: outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			names := metric.FindAllString(tg.Expr, -1)
			if tg.RefID == "" || len(names) == 0 {
				t.Errorf("panel %q: target %+v has no refId or no metric", p.Title, tg)
			}
			for _, name := range names {
				queried++
				if _, ok := s[name]; !ok {
					t.Errorf("panel %q queries %s, which the daemon does not export", p.Title, name)
				}
			}
		}
	}
	if queried < 30 {
		t.Errorf("the dashboard queries %d metrics, want the counters of every panel", queried)
	}
}
