package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/softnic/softnic/cmd/softnic/internal/capture"
	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/cmd/softnic/internal/live"
	"github.com/softnic/softnic/cmd/softnic/internal/metrics"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// The daemon's HTTP servers, both off unless asked for: Prometheus's
// /metrics (--metrics ADDR) and the live page (--http ADDR).

// WebConfig is softnic serve's flags for its HTTP servers.
type WebConfig struct {
	Metrics     string // --metrics ADDR:PORT; "" for none
	HTTP        string // --http ADDR:PORT; "" for none
	AllowRemote bool   // --http-allow-remote
}

// webServers are the daemon's HTTP servers.
type webServers struct {
	metrics     net.Listener // --metrics
	metricsAddr string       // its address, port picked
	http        net.Listener // --http
	httpURL     string       // the live page's URL
	feed        *live.Feed   // the packets for the live page's ladder
	live        *live.Server
	servers     []*http.Server
	wg          sync.WaitGroup
}

// listenWeb listens on the addresses of the HTTP servers the flags ask
// for, before the device opens: a bad or busy address stops the daemon
// before it starts anything. The live page's feed is made here, for the
// device's trace.
func (d *daemon) listenWeb() error {
	w := &d.web
	if a := d.cfg.Web.Metrics; a != "" {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		w.metrics, w.metricsAddr = l, l.Addr().String()
	}
	if a := d.cfg.Web.HTTP; a != "" {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		w.http, w.httpURL, w.feed = l, "http://"+l.Addr().String()+"/", live.NewFeed()
	}
	return nil
}

// trace returns the device's trace function: the capture's (--pcap) and
// the live page's (--http), or nil for neither.
func (d *daemon) trace() func(*nic.TracePacket) {
	var fns []func(*nic.TracePacket)
	if d.capture != nil {
		fns = append(fns, d.capture.TraceBoth())
	}
	if d.web.feed != nil {
		fns = append(fns, d.web.feed.Trace)
	}
	switch len(fns) {
	case 0:
		return nil
	case 1:
		return fns[0]
	}
	return capture.Tee(fns...)
}

// serveWeb starts serving on the listeners of listenWeb, once the device
// is up.
func (d *daemon) serveWeb() {
	w := &d.web
	if w.metrics != nil {
		logf := func(format string, args ...any) { d.log.Warn("--metrics: " + fmt.Sprintf(format, args...)) }
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler(metrics.NewCollector(d.metricsSnapshot, 0, 0), logf))
		w.serve(d.log, w.metrics, mux, 30*time.Second)
		d.log.Info("serving Prometheus metrics", zap.String("url", "http://"+w.metricsAddr+"/metrics"))
	}
	if w.http != nil {
		w.live = live.NewServer(d.liveSource(), w.feed, !d.cfg.Web.AllowRemote)
		w.wg.Go(w.live.Run)
		// No write timeout: the event stream is long; it bounds each
		// event's write itself.
		w.serve(d.log, w.http, w.live.Handler(), 0)
		d.log.Info("serving the live page", zap.String("url", w.httpURL))
	}
}

// showRows is how many QPs and regions the live page lists.
const showRows = 64

// liveSource is what the live page shows: the daemon as softnic info, qp,
// mr and stat show it to its owner.
func (d *daemon) liveSource() live.Source {
	type rows struct {
		Rows  any `json:"rows"`
		Total int `json:"total"`
	}
	var levels []string
	for _, c := range d.deviceCounters() {
		if control.Level(c.Name) {
			levels = append(levels, c.Name)
		}
	}
	return live.Source{
		Info: func() any { return d.info() },
		QPs: func() any {
			r := d.qpRows()
			return rows{r[:min(len(r), showRows)], len(r)}
		},
		Regions: func() any {
			r := d.regionRows()
			return rows{r[:min(len(r), showRows)], len(r)}
		},
		Counters: func() any { return d.deviceCounters() },
		Levels:   levels,
	}
}

// serve serves h on l until stopWeb, with timeouts that keep a slow or
// idle client from holding a connection: writeTimeout bounds each answer
// (0 for none, for a stream of events).
func (w *webServers) serve(log *zap.Logger, l net.Listener, h http.Handler, writeTimeout time.Duration) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: writeTimeout, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: zap.NewStdLog(log.Named("http"))}
	w.servers = append(w.servers, srv)
	w.wg.Go(func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server", zap.Stringer("addr", l.Addr()), zap.Error(err))
		}
	})
}

// stopWeb closes the HTTP servers and their connections, or the listeners
// not served yet, and waits for them: the device they read is closed next.
func (d *daemon) stopWeb() {
	w := &d.web
	if len(w.servers) == 0 {
		for _, l := range []net.Listener{w.metrics, w.http} {
			if l != nil {
				l.Close()
			}
		}
	}
	if w.live != nil {
		w.live.Close() // its event streams end
	}
	for _, srv := range w.servers {
		srv.Close()
	}
	w.wg.Wait()
}

// metricsSnapshot is what a scrape of /metrics shows: softnic stat's
// counters, every QP of the device with its traffic (as softnic qp lists
// them), the attached processes and the regions.
func (d *daemon) metricsSnapshot() *metrics.Snapshot {
	s := &metrics.Snapshot{}
	for _, c := range slices.Concat(d.deviceCounters(), d.limitCounters()) {
		s.Counters = append(s.Counters, metrics.Counter(c))
	}
	owners := map[uint32]int{}
	for _, p := range d.attach.Processes() {
		for _, q := range p.QPs {
			owners[q.Num()] = p.PID
		}
	}
	for _, q := range d.dev.QPs() {
		st := q.Status()
		tr, _ := q.Traffic() // the device's own QPs: no error
		s.QPs = append(s.QPs, metrics.QP{QPN: q.Num(), PID: cmp.Or(owners[q.Num()], os.Getpid()), State: st.State.String(),
			SendQueued: st.SendQueued, Traffic: tr})
	}
	procs := d.attachedSums()
	s.Counters = append(s.Counters, metrics.Counter{Name: "attached_processes", Value: uint64(len(procs))})
	for _, p := range procs {
		mp := metrics.Process{PID: p.pid}
		for i, c := range p.counters {
			if i < attachedResources {
				mp.Gauges = append(mp.Gauges, metrics.Counter(c))
			} else {
				mp.Counters = append(mp.Counters, metrics.Counter(c))
			}
		}
		s.Processes = append(s.Processes, mp)
	}
	d.quotaSnapshot(s)
	for ri := range d.dev.Memory().Regions() {
		if ri.Kind != mr.ImplicitODP { // an implicit region spans the address space
			s.Regions++
			s.RegionBytes += ri.Len
		}
	}
	return s
}
