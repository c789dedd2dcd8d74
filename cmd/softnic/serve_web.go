package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/softnic/softnic/cmd/softnic/internal/metrics"
	"github.com/softnic/softnic/mr"
)

// The daemon's HTTP servers, both off unless asked for: Prometheus's
// /metrics (--metrics ADDR) and the live page (--http ADDR).

// webConfig is softnic serve's flags for its HTTP servers.
type webConfig struct {
	metrics string // --metrics ADDR:PORT; "" for none
}

// webFlags registers the flags of the HTTP servers on fs and returns a
// function that checks them once parsed.
func webFlags(fs *flag.FlagSet) func() (webConfig, error) {
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR:PORT`/metrics, such as 127.0.0.1:9470 (port 0 picks a free one)")
	return func() (webConfig, error) {
		cfg := webConfig{metrics: *metricsAddr}
		if cfg.metrics != "" {
			if _, _, err := net.SplitHostPort(cfg.metrics); err != nil {
				return cfg, usagef("--metrics %q: want ADDR:PORT, such as 127.0.0.1:9470", cfg.metrics)
			}
		}
		return cfg, nil
	}
}

// webServers are the daemon's HTTP servers.
type webServers struct {
	metrics     net.Listener // --metrics
	metricsAddr string       // its address, port picked
	servers     []*http.Server
	wg          sync.WaitGroup
}

// listenWeb listens on the addresses of the HTTP servers the flags ask
// for, before the device opens: a bad or busy address stops the daemon
// before it starts anything.
func (d *daemon) listenWeb() error {
	w := &d.web
	if a := d.cfg.web.metrics; a != "" {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		w.metrics, w.metricsAddr = l, l.Addr().String()
	}
	return nil
}

// serveWeb starts serving on the listeners of listenWeb, once the device
// is up.
func (d *daemon) serveWeb() {
	w := &d.web
	if w.metrics != nil {
		logf := func(format string, args ...any) { d.log.Warn("--metrics: " + fmt.Sprintf(format, args...)) }
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler(metrics.NewCollector(d.metricsSnapshot, 0, 0), logf))
		w.serve(d.log, w.metrics, mux, 0)
		d.log.Info("serving Prometheus metrics", zap.String("url", "http://"+w.metricsAddr+"/metrics"))
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
	if len(w.servers) == 0 && w.metrics != nil {
		w.metrics.Close()
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
	for _, c := range d.deviceCounters() {
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
