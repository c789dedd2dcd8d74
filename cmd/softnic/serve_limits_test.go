package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/nic"
)

// TestPrintStatLimits: a counter followed by its _limit shows as one
// line, "used of limit".
func TestPrintStatLimits(t *testing.T) {
	var b strings.Builder
	l := control.Counters{{Name: "sent_pkts", Value: 7}, {Name: "quota_total_qps", Value: 12}, {Name: "quota_total_qps_limit", Value: 2048}, {Name: "quota_total_waits", Value: 0},
		{Name: "quota_total_waits_limit", Value: math.MaxInt64}}
	j, _ := l.MarshalJSON()
	if err := printStat(&b, j); err != nil {
		t.Fatal(err)
	}
	want := "sent_pkts           7\nquota_total_qps    12 of 2048\nquota_total_waits   0 of unlimited\n"
	if b.String() != want {
		t.Errorf("printStat:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestServeLimit: --limit sets a limit; a process refused at it gets an
// error naming the limit and the flag, and stat shows the process's use
// against its limits, its user's and everyone's, and the refusal.
func TestServeLimit(t *testing.T) {
	d := startDaemon(t, "--limit", "process.qps=2", "--limit", "uid.memory=64m")
	pd, cq := attachedPD(t, d)
	for range 2 {
		if _, err := pd.CreateQP(nic.QPConfig{SendCQ: cq}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
	if !errors.Is(err, nic.ErrNoMem) || !strings.Contains(err.Error(), "softnic serve --limit process.qps=N raises it") {
		t.Errorf("a third QP: %v, want ENOMEM naming --limit process.qps", err)
	}
	if _, err := pd.AllocMR(65<<20, 0); !errors.Is(err, nic.ErrNoMem) || !strings.Contains(err.Error(), "uid.memory") {
		t.Errorf("65 MiB of regions: %v, want ENOMEM naming uid.memory", err)
	}
	pid, uid := fmt.Sprintf("pid%d_", os.Getpid()), fmt.Sprintf("quota_uid%d_", os.Geteuid())
	var stat map[string]uint64
	d.inspect(t, "stat", &stat)
	for name, want := range map[string]uint64{
		pid + "qps": 2, pid + "qps_limit": 2, pid + "refused": 2, uid + "qps": 2, uid + "memory_limit": 64 << 20, uid + "refused": 2,
		"quota_total_qps": 2, "quota_refused_qps": 1, "quota_refused_memory": 1, "quota_total_sessions": 1,
	} {
		if got, ok := stat[name]; !ok || got != want {
			t.Errorf("stat %s = %d (%v), want %d", name, got, ok, want)
		}
	}
	code, out, _ := runCmd("stat", "--control", d.control)
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, pid+"qps ") {
			line = l
		}
	}
	if code != 0 || !strings.HasSuffix(line, " 2 of 2") || strings.Contains(out, "_limit") {
		t.Errorf("stat prints:\n%s\nwant %sqps as 2 of 2, and no _limit line", out, pid)
	}
}
