package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/nic"
)

// TestServeGuardFlags: the limits on what peers and attached programs may
// cost the daemon beyond --limit's (connection requests, R_Key failures,
// doorbells, log lines, the stop's wait) have flags, and stat shows what
// the daemon runs with: the defaults, or what the flags say. Their effects
// are tested where they act (nic's guard, attachd's doorbell, the CM's
// transcripts) and below: R_Key failures held back after
// --access-refusals.
func TestServeGuardFlags(t *testing.T) {
	defaults := map[string]uint64{
		"limit_cm_half_open": 256, "limit_cm_half_open_per_source": 32, "limit_cm_handshake_timeout_ms": 20000,
		"limit_cm_reject_rate": 100, "limit_cm_reject_burst": 32,
		"limit_access_refusals": 16, "limit_access_refusal_rate": 2, "limit_access_sources": 256,
		"limit_doorbell_burst": 256, "limit_doorbell_rate": 1000, "limit_log_rate": 10, "limit_stop_grace_ms": 2000,
		"limit_send_rate": 10000,
	}
	set := map[string]uint64{
		"limit_cm_half_open": 7, "limit_cm_half_open_per_source": 3, "limit_cm_handshake_timeout_ms": 1500,
		"limit_cm_reject_rate": 50, "limit_cm_reject_burst": 32,
		"limit_access_refusals": 2, "limit_access_refusal_rate": 1, "limit_access_sources": 12,
		"limit_doorbell_burst": 40, "limit_doorbell_rate": 400, "limit_log_rate": 4, "limit_stop_grace_ms": 300,
		"limit_send_rate": 2500,
	}
	for _, tc := range []struct {
		name string
		args []string
		want map[string]uint64
	}{
		{"defaults", nil, defaults},
		{"set", []string{"--cm-half-open", "7", "--cm-half-open-per-source", "3", "--cm-handshake-timeout", "1.5s", "--cm-reject-rate", "50",
			"--access-refusals", "2", "--access-refusal-rate", "1", "--access-sources", "10", // 10 sources round up to 12
			"--doorbell-burst", "40", "--doorbell-rate", "400", "--log-rate", "4", "--stop-grace", "300ms", "--send-rate", "2500"}, set},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, append([]string{"--region", "mem:4k:rw"}, tc.args...)...)
			var stat map[string]uint64
			d.inspect(t, "stat", &stat)
			for name, want := range tc.want {
				if got, ok := stat[name]; !ok || got != want {
					t.Errorf("stat %s = %d (%v), want %d", name, got, ok, want)
				}
			}
			code, out, _ := runCmd("stat", "--control", d.control)
			if !regexp.MustCompile(`(?m)^limit_access_refusals +` + strconv.FormatUint(tc.want["limit_access_refusals"], 10) + `$`).MatchString(out) {
				t.Errorf("stat exits %d and prints no line limit_access_refusals %d:\n%s", code, tc.want["limit_access_refusals"], out)
			}

			// A peer failing R_Key checks is held back at its
			// --access-refusals-th failure: one hold with 2, none with 16.
			mem := d.ready.Regions[0]
			for range 2 {
				code, _, stderr := runCmd("read", "--peer", d.ready.Listen, "--timeout", "10s", "--rkey", fmt.Sprint(mem.RKey+0x10000),
					"--addr", "0", "--len", "8")
				if code != 1 || !strings.Contains(stderr, "REM_ACCESS_ERR") {
					t.Fatalf("a read with a bad key: exit status %d, %q; want 1 and REM_ACCESS_ERR", code, stderr)
				}
			}
			want := uint64(0)
			if tc.want["limit_access_refusals"] == 2 {
				want = 1
			}
			if n := d.counter(t, "access_holds"); n != want {
				t.Errorf("access_holds %d after 2 failed R_Key checks, want %d", n, want)
			}
		})
	}
}

// TestServeGuardFlagErrors: a negative limit is a usage error.
func TestServeGuardFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--access-refusals", "-1"}, {"--access-refusal-rate", "-1"}, {"--access-sources", "-4"}, {"--access-sources", "2000000"},
		{"--doorbell-burst", "-1"}, {"--doorbell-rate", "-1"}, {"--log-rate", "-1"}, {"--stop-grace", "-1s"},
	} {
		code, _, stderr := runCmd(append([]string{"serve", "--control", t.TempDir() + "/ctl.sock"}, args...)...)
		if code != 2 || !strings.Contains(stderr, args[0]+" ") {
			t.Errorf("serve %v: exit status %d, stderr %q; want 2 and a message naming %s", args, code, stderr, args[0])
		}
	}
}

// TestServeLibraryLogBounded: the lines the library writes into the
// daemon's log, such as a program attaching and detaching, are as bounded
// as the daemon's own (--log-rate a second of each), and the ones left out
// are counted: a program attaching in a loop cannot fill the log.
func TestServeLibraryLogBounded(t *testing.T) {
	const attaches, rate = 40, 3
	d := startDaemon(t, "--log-rate", strconv.Itoa(rate))
	start := time.Now()
	for range attaches {
		dev, err := nic.Open(nic.Config{Attach: d.control})
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
	}
	secs := int(time.Since(start)/time.Second) + 1
	if code := d.shutdown(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	logged, notLogged := 0, 0
	count := regexp.MustCompile(`"` + daemon.NotLoggedKey + `": (\d+)`)
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		switch {
		case strings.Contains(line, "process attached (the ones not logged)"):
			m := count.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("no count in %q", line)
			}
			n, _ := strconv.Atoi(m[1])
			notLogged += n
		case strings.Contains(line, "process attached"):
			logged++
		}
	}
	t.Logf("%d attaches in %d s: %d lines, %d counted as not logged", attaches, secs, logged, notLogged)
	if logged == 0 || logged > rate*(secs+1) {
		t.Errorf("%d lines of %d attaches in %d s, want from 1 to %d a second", logged, attaches, secs, rate)
	}
	if logged+notLogged != attaches {
		t.Errorf("%d attaches logged and %d counted as not logged, want %d in all:\n%s", logged, notLogged, attaches, d.stderr)
	}
}
