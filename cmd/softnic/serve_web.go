package main

import (
	"errors"
	"flag"
	"fmt"
	"net"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
)

// webFlags registers the flags of the HTTP servers on fs and returns a
// function that checks them once parsed.
func webFlags(fs *flag.FlagSet) func() (daemon.WebConfig, error) {
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR:PORT`/metrics, such as 127.0.0.1:9470 (port 0 picks a free one)")
	httpAddr := fs.String("http", "", "serve the live page (QPs, regions, counters, the last packets as a ladder) at http://`ADDR:PORT`/, "+
		"such as 127.0.0.1:8080: a loopback address unless --http-allow-remote")
	allowRemote := fs.Bool("http-allow-remote", false, "let --http listen on an address other hosts reach: the page asks for no password "+
		"and shows every QP and region (keys included) and the packets to whoever connects")
	return func() (daemon.WebConfig, error) {
		cfg := daemon.WebConfig{Metrics: *metricsAddr, HTTP: *httpAddr, AllowRemote: *allowRemote}
		if cfg.Metrics != "" {
			if _, _, err := net.SplitHostPort(cfg.Metrics); err != nil {
				return cfg, usagef("--metrics %q: want ADDR:PORT, such as 127.0.0.1:9470", cfg.Metrics)
			}
		}
		if cfg.HTTP != "" {
			if err := checkLoopback(cfg.HTTP, cfg.AllowRemote); err != nil {
				return cfg, usagef("--http %q: %v", cfg.HTTP, err)
			}
		}
		return cfg, nil
	}
}

// checkLoopback checks that the listening address addr is a loopback one,
// unless allowRemote: the live page has no authentication.
func checkLoopback(addr string, allowRemote bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want ADDR:PORT, such as 127.0.0.1:8080")
	}
	if allowRemote {
		return nil
	}
	const why = "the live page asks for no password: it listens on a loopback address (127.0.0.1, ::1, localhost) unless --http-allow-remote is given"
	if host == "" {
		return errors.New("no address is every interface; " + why)
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		if ips, err = net.LookupIP(host); err != nil {
			return fmt.Errorf("%v; %s", err, why)
		}
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s is not a loopback address; %s", ip, why)
		}
	}
	return nil
}
