package qp_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden transcripts in testdata/scenarios")

// checkTranscript compares the packet trace of a scenario with its golden
// transcript, testdata/scenarios/NAME.txt (go test -run NAME -rewrite
// regenerates it; review the diff before committing). A scenario run from
// another test (TestPSNWrap) is checked against its own golden transcript
// and never rewrites it.
func checkTranscript(t *testing.T, s *sim) {
	t.Helper()
	name := t.Name()
	if i := strings.Index(name, "/Test"); i >= 0 {
		name = name[i+1:]
	}
	path := filepath.Join("testdata", "scenarios", strings.ReplaceAll(name, "/", "_")+".txt")
	got := s.trace.String()
	if *rewrite && name == t.Name() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no golden transcript (run with -rewrite): %v\ngot:\n%s", err, got)
	}
	if got != string(want) {
		t.Errorf("transcript differs from %s (run with -rewrite to accept):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
