package main

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/cmd/softnic/internal/bench"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
)

// benchJSON is softnic bench --json's output with its figures checked for
// type: every workload's key and the raw-UDP limits, the configuration and
// the attached comparison.
type benchJSON struct {
	Config   string              `json:"config"`
	RawGbps  float64             `json:"raw_udp_gbps"`
	RawPing  bench.Latency       `json:"raw_udp_ping_pong"`
	RawPoll  bench.Latency       `json:"raw_udp_ping_pong_poll"`
	Attached *bench.AttachResult `json:"attached"`
	figures  map[string]json.RawMessage
}

// runBenchJSON runs softnic bench --json with args, and checks that it
// names config and that its figures can be right.
func runBenchJSON(t *testing.T, config string, args ...string) benchJSON {
	t.Helper()
	code, stdout, stderr := runCmd(append([]string{"bench", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res benchJSON
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if err := json.Unmarshal([]byte(stdout), &res.figures); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if res.Config != config {
		t.Errorf("config %q, want %s", res.Config, config)
	}
	checkFigures(t, res)
	return res
}

// checkFigures: every workload has a figure that can be right: a positive
// rate, or a positive median and a p99 no shorter. (How fast is not a
// test's business; see the README's tables.)
func checkFigures(t *testing.T, res benchJSON) {
	t.Helper()
	for _, w := range nicbench.Workloads {
		raw, ok := res.figures[w.Key]
		if !ok {
			t.Errorf("no %s (%s)", w.Key, w.Name)
			continue
		}
		if w.Kind() == nicbench.Delay {
			var l bench.Latency
			if err := json.Unmarshal(raw, &l); err != nil || !(l.MedianMicros > 0) || l.P99Micros < l.MedianMicros {
				t.Errorf("%s: %s, want a positive median and a p99 no shorter", w.Key, raw)
			}
			continue
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil || !(v > 0) {
			t.Errorf("%s: %s, want a positive figure", w.Key, raw)
		}
	}
	if !(res.RawGbps > 0) || !(res.RawPing.MedianMicros > 0) || res.RawPing.P99Micros < res.RawPing.MedianMicros {
		t.Errorf("raw UDP: %v Gbit/s, ping-pong %+v", res.RawGbps, res.RawPing)
	}
	if !(res.RawPoll.MedianMicros > 0) || res.RawPoll.P99Micros < res.RawPoll.MedianMicros {
		t.Errorf("raw UDP: busy-polled ping-pong %+v", res.RawPoll)
	}
}

// TestBench: softnic bench measures every workload with its peer in a
// process of its own (this test binary, run as softnic bench-peer), and
// the attached device against an embedded one; today's keys are there.
func TestBench(t *testing.T) {
	t.Setenv(childEnv, "1") // the peer process runs the test binary as softnic
	d := startDaemon(t)
	res := runBenchJSON(t, "peer-process", "--ops", "200", "--time", "100ms", "--attach", d.control)
	for _, key := range []string{"write_64k_gbps", "read_64k_gbps", "write_8_wait", "write_8_poll", "fetch_add_16_ops", "fetch_add_64_ops",
		"write_4k_gbps", "read_4k_gbps", "read_8_poll", "fetch_add_8_poll", "write_64k_qps16_gbps"} {
		if _, ok := res.figures[key]; !ok {
			t.Errorf("no %s", key)
		}
	}
	a := res.Attached
	if a == nil {
		t.Fatalf("no attached figures: %v", res.figures)
	}
	for name, v := range map[string]float64{"attached WRITE": a.WriteGbps, "embedded WRITE": a.EmbeddedGbps, "ratio": a.WriteRatio} {
		if !(v > 0) {
			t.Errorf("%s: %v, want a positive figure", name, v)
		}
	}
	for name, l := range map[string]bench.Latency{"attached wait": a.Write8Wait, "embedded wait": a.EmbeddedWait, "attached poll": a.Write8Poll, "embedded poll": a.EmbeddedPoll} {
		if !(l.MedianMicros > 0) || l.P99Micros < l.MedianMicros {
			t.Errorf("%s: %+v, want a positive median and a p99 no shorter", name, l)
		}
	}
	if a.Control != d.control || a.Daemon != d.ready.Listen {
		t.Errorf("attached to %s (%s), want the daemon at %s (%s)", a.Control, a.Daemon, d.control, d.ready.Listen)
	}
}

// TestBenchOneProcess: --one-process measures the same workloads with both
// devices in this process, and says so.
func TestBenchOneProcess(t *testing.T) {
	runBenchJSON(t, "one-process", "--one-process", "--ops", "100")
}

// TestBenchPeerWaits: --peer-waits leaves the peer process's device to its
// goroutines, and says so.
func TestBenchPeerWaits(t *testing.T) {
	t.Setenv(childEnv, "1")
	code, stdout, stderr := runCmd("bench", "--peer-waits", "--ops", "50", "--only", "write_8_poll,read_64k_gbps")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"peer-process-waiting", "sleeps until packets come", "RESULT softnic write 8B latency median", "RESULT softnic read 65536B w=64"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestBenchCPUProfile: --cpuprofile FILE writes this process's CPU profile
// to FILE and the peer process's to FILE.peer, both gzipped profiles.
func TestBenchCPUProfile(t *testing.T) {
	t.Setenv(childEnv, "1")
	path := filepath.Join(t.TempDir(), "cpu")
	code, _, stderr := runCmd("bench", "--ops", "50", "--only", "write_8_poll", "--cpuprofile", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, p := range []string{path, path + ".peer"} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if n, err := io.Copy(io.Discard, z); err != nil || n == 0 {
			t.Errorf("%s: %d bytes of profile, %v", p, n, err)
		}
	}
}

// TestBenchTable: without --json the figures come as a table, one row a
// workload with its ratio and the initiator's retries, then fi_rmabw's RESULT lines for the same
// workloads; --only measures only the workloads it names, over several
// runs.
func TestBenchTable(t *testing.T) {
	code, stdout, stderr := runCmd("bench", "--one-process", "--ops", "50", "--runs", "3", "--only", "raw_udp_gbps,write_64k_gbps,read_8_poll,fetch_add_64_ops")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"one-process", "median of 3 runs", "RETRIES (PACKETS)", "raw UDP: 4 KiB datagrams", "write 65536B w=64 ", "read 8B latency ", "fetch_sum u64 w=64 ", "×",
		"RESULT softnic write 65536B w=64 | median ", " Gbit/s (runs=3)\n",
		"RESULT softnic read 8B latency median | median ", "RESULT softnic read 8B latency p99 | median ", " us (runs=3)\n",
		"RESULT softnic fetch_sum u64 w=64 | median ", " Mops/s (runs=3)\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, stdout)
		}
	}
	for _, unwanted := range []string{"attached", "read 4096B", "write 8B", "ping-pong", "GSO"} {
		if strings.Contains(stdout, unwanted) {
			t.Errorf("the output has %q, which was not asked for:\n%s", unwanted, stdout)
		}
	}
}

// TestBenchUsage: what softnic bench cannot do is said at once, with the
// exit status of a usage error or of a failure.
func TestBenchUsage(t *testing.T) {
	// Without a daemon at --attach, bench names softnic serve; where attach
	// mode is not supported, it says that.
	noDaemon := "softnic serve"
	if nic.AttachSupported() != nil {
		noDaemon = "not supported (EOPNOTSUPP)"
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "extra"}, 2, ""},
		{[]string{"bench", "--runs", "0"}, 2, "--runs 0"},
		{[]string{"bench", "--time", "0", "--ops", "0"}, 2, "want a limit"},
		{[]string{"bench", "--ops", "-1"}, 2, "--ops -1"},
		{[]string{"bench", "--one-process", "--peer-waits"}, 2, "--peer-waits: the peer device in this process"},
		{[]string{"bench", "--only", "write_64k_gbps,warp_speed"}, 2, `no workload "warp_speed"; the workloads are raw_udp_gbps,`},
		{[]string{"bench", "--one-process", "--ops", "100", "--only", "write_8_poll", "--attach", "/nonexistent/softnic.sock"}, 1, noDaemon},
	} {
		code, _, stderr := runCmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
