package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBench: softnic bench measures every workload, alone and attached
// to a daemon against an embedded device, and reports figures that can be
// right: positive rates, a p99 no shorter than its median. (How fast is
// not a test's business; see the README's tables.)
func TestBench(t *testing.T) {
	d := startDaemon(t)
	code, stdout, stderr := runCmd("bench", "--ops", "200", "--attach", d.control, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if res.Attached == nil {
		t.Fatalf("no attached figures: %s", stdout)
	}
	a := res.Attached
	rates := map[string]float64{
		"raw UDP": res.RawUDPGbps, "WRITE": res.WriteGbps, "READ": res.ReadGbps, "FETCH_ADD": res.FetchAddOps,
		"attached WRITE": a.WriteGbps, "embedded WRITE": a.EmbeddedGbps, "ratio": a.WriteRatio,
	}
	for name, v := range rates {
		if !(v > 0) {
			t.Errorf("%s: %v, want a positive figure", name, v)
		}
	}
	latencies := map[string]benchLatency{
		"ping-pong": res.RawPingPong, "wait": res.Write8Wait, "poll": res.Write8Poll,
		"attached wait": a.Write8Wait, "embedded wait": a.EmbeddedWait, "attached poll": a.Write8Poll, "embedded poll": a.EmbeddedPoll,
	}
	for name, l := range latencies {
		if !(l.MedianMicros > 0) || l.P99Micros < l.MedianMicros {
			t.Errorf("%s: %+v, want a positive median and a p99 no shorter", name, l)
		}
	}
	if a.Control != d.control || a.Daemon != d.ready.Listen {
		t.Errorf("attached to %s (%s), want the daemon at %s (%s)", a.Control, a.Daemon, d.control, d.ready.Listen)
	}
}

// TestBenchTable: without --json the figures come as tables, one row a
// workload, with their ratios.
func TestBenchTable(t *testing.T) {
	code, stdout, stderr := runCmd("bench", "--ops", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"RDMA WRITE, 64 KiB", "RDMA READ, 64 KiB", "8-byte RDMA WRITE", "busy-polling CQ.Poll", "FETCH_ADD", "×"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "attached") {
		t.Errorf("an attached table without --attach:\n%s", stdout)
	}
}

// TestBenchUsage: what softnic bench cannot do is said at once, with the
// exit status of a usage error or of a failure.
func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "--ops", "5"}, 2, "--ops 5"},
		{[]string{"bench", "extra"}, 2, ""},
		{[]string{"bench", "--ops", "100", "--attach", "/nonexistent/softnic.sock"}, 1, "softnic serve"},
	} {
		code, _, stderr := runCmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
