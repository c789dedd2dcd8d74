package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/nic"
)

// TestServeStatOneProcessTwice: a process attached twice is one process in
// stat and info, its counters the sums of its sessions, and no key is repeated;
// its sessions detaching one by one leave it, then remove it.
func TestServeStatOneProcessTwice(t *testing.T) {
	d := startDaemon(t)
	var devs [2]*nic.Device
	for i := range devs {
		dev, err := nic.Open(nic.Config{Attach: d.control})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		devs[i] = dev
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		for range i + 1 { // one QP in the first session, two in the second
			if _, err := pd.CreateQP(nic.QPConfig{SendCQ: cq}); err != nil {
				t.Fatal(err)
			}
		}
	}
	prefix := fmt.Sprintf("pid%d_", os.Getpid()) // the daemon runs in the test process too
	steps := []struct {
		name     string
		detach   []int // sessions to detach first
		procs    uint64
		pds, qps uint64
	}{
		{"two sessions", nil, 1, 2, 3},
		{"the first detached", []int{0}, 1, 1, 2},
		{"both detached", []int{1}, 0, 0, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			for _, i := range st.detach {
				devs[i].Close()
			}
			var stat control.Counters
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
				d.inspect(t, "stat", &stat)
				settled := statValue(stat, "attached_processes") == st.procs && statValue(stat, prefix+"qps") == st.qps
				if settled || time.Now().After(deadline) {
					break
				}
			}
			seen := map[string]bool{}
			for _, c := range stat {
				if seen[c.Name] {
					t.Errorf("stat has %s twice", c.Name)
				}
				seen[c.Name] = true
				if st.procs == 0 && strings.HasPrefix(c.Name, prefix) {
					t.Errorf("stat has %s after the process detached", c.Name)
				}
			}
			for name, want := range map[string]uint64{"attached_processes": st.procs, prefix + "pds": st.pds, prefix + "qps": st.qps} {
				if got := statValue(stat, name); got != want {
					t.Errorf("%s = %d, want %d", name, got, want)
				}
			}
			var info control.Info
			d.inspect(t, "info", &info)
			if info.Attached != int(st.procs) {
				t.Errorf("info: %d attached processes, want %d as stat says", info.Attached, st.procs)
			}
		})
	}
}

// statValue returns the value of the counter name in l, 0 if it is not there.
func statValue(l control.Counters, name string) uint64 {
	for _, c := range l {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
