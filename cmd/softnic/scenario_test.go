package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/cmd/softnic/internal/scenario"
)

// TestDemoScenario runs a scenario as softnic demo does, stepping on
// Enter: every step waits for a line of standard input, the ladder is
// printed and written as a page, and the capture decodes into the same
// ladder's anomalies. (Package scenario tests every scenario's story.)
func TestDemoScenario(t *testing.T) {
	dir := t.TempDir()
	page, pcap := filepath.Join(dir, "loss.html"), filepath.Join(dir, "loss.pcap")
	code, stdout, stderr := runStdin([]byte("\n"), "demo", "--scenario", "loss", "--step", "--html", page, "--pcap", pcap)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q\n%s", code, stderr, stdout)
	}
	for _, want := range []string{
		"softnic demo --scenario loss: a lost WRITE packet",
		"\n(press Enter for the next step)\n\n== 2. RDMA WRITE, one packet lost\n",
		"    (dropped by the fault injector)\n",
		"\n== the ladder\n",
		"retransmission (NAK): go-back-N goes on with PSN 0x001003",
		"\nAll 2 steps behaved as expected.\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, stdout)
		}
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "<svg") || strings.Count(string(html), `<g id="a`) != 9 {
		t.Errorf("the page does not draw the 9 packets")
	}
	// The capture holds what reached the wire: the lost packet is not in
	// it, so decode names the gap it left where the demo named it lost.
	code, out, _ := runCmd("decode", "--ladder", pcap)
	if code != 0 || !strings.Contains(out, "8 packets in 1 conversation; 3 retransmissions (3 NAK), 1 NAK, 2 out of sequence, 1 missing") {
		t.Errorf("decode --ladder of the capture: exit status %d\n%s", code, out)
	}
}

func TestDemoScenarioUsage(t *testing.T) {
	code, stdout, stderr := runCmd("demo", "--scenario", "flood")
	want := "want one of " + strings.Join(scenario.Names(), ", ")
	if code != 2 || stdout != "" || !strings.Contains(stderr, want) {
		t.Errorf("exit status %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, want)
	}
	// --step with no more input: the demo stops at the next step.
	code, stdout, stderr = runStdin(nil, "demo", "--scenario", "bad-rkey", "--step")
	if code != 1 || !strings.Contains(stderr, "waiting for Enter: standard input: EOF") || strings.Contains(stdout, "== 2.") {
		t.Errorf("exit status %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestDemoHTML: the tour writes its ladder too.
func TestDemoHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "tour.html")
	code, stdout, stderr := runCmd("demo", "--html", page)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q\n%s", code, stderr, stdout)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"conversation 1: CM", "conversation 2: RC", "NAK (remote access error)"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the tour's page lacks %q", want)
		}
	}
}
