package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
)

func TestWatchFlag(t *testing.T) {
	tests := []struct {
		set     []string // Set's arguments, in order
		on      bool
		every   time.Duration
		wantErr string
	}{
		{[]string{"true"}, true, time.Second, ""},
		{[]string{"2s"}, true, 2 * time.Second, ""},
		{[]string{"0.5"}, true, 500 * time.Millisecond, ""},
		{[]string{"true", "false"}, false, time.Second, ""},
		{[]string{"10ms"}, false, time.Second, `interval "10ms": want 100ms or more`},
		{[]string{"often"}, false, time.Second, `interval "often": want 100ms or more`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.set, ","), func(t *testing.T) {
			w := &watchFlag{interval: defaultWatch}
			var err error
			for _, s := range tt.set {
				if err = w.Set(s); err != nil {
					break
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || w.on != tt.on || w.interval != tt.every {
				t.Errorf("on %v every %v, error %v; want on %v every %v", w.on, w.interval, err, tt.on, tt.every)
			}
		})
	}
	for _, args := range [][]string{{"stat", "2s"}, {"stat", "--watch", "10ms"}, {"stat", "--watch", "1s", "2s"}} {
		if code, _, stderr := runCmd(append(args, "--control", t.TempDir()+"/none.sock")...); code != 2 {
			t.Errorf("%v: exit status %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
}

// TestStatWatcher shows three samples, 2 s apart, in each mode.
func TestStatWatcher(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	samples := []control.Counters{
		{{Name: "sent_pkts", Value: 10}, {Name: "bad_icrc", Value: 0}, {Name: "connections_active", Value: 1}, {Name: "pid7_qps", Value: 2}},
		{{Name: "sent_pkts", Value: 30}, {Name: "bad_icrc", Value: 0}, {Name: "connections_active", Value: 3}, {Name: "pid7_qps", Value: 2}},
		{{Name: "sent_pkts", Value: 30}, {Name: "bad_icrc", Value: 0}, {Name: "connections_active", Value: 3}},
	}
	tests := []struct {
		mode watchMode
		want string
	}{
		{watchLines, `15:04:05.000 sent_pkts 10 -
15:04:05.000 bad_icrc 0 -
15:04:05.000 connections_active 1 -
15:04:05.000 pid7_qps 2 -
15:04:07.000 sent_pkts 30 10.0/s
15:04:07.000 connections_active 3 -
`},
		{watchJSON, `{"time":"2026-01-02T15:04:05Z","counters":{"sent_pkts":10,"bad_icrc":0,"connections_active":1,"pid7_qps":2},"rates":{}}
{"time":"2026-01-02T15:04:07Z","counters":{"sent_pkts":30,"bad_icrc":0,"connections_active":3,"pid7_qps":2},"rates":{"bad_icrc":0,"sent_pkts":10}}
{"time":"2026-01-02T15:04:09Z","counters":{"sent_pkts":30,"bad_icrc":0,"connections_active":3},"rates":{"bad_icrc":0,"sent_pkts":0}}
`},
		{watchRedraw, "\x1b[H\x1b[2Jsoftnic stat every 2s at 15:04:09 (Ctrl-C to stop)\n\n" + `COUNTER             VALUE        RATE/s
sent_pkts              30           0.0
connections_active      3             -

(1 counter at 0 not shown)
`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.mode), func(t *testing.T) {
			var b strings.Builder
			s := &statWatcher{out: &b, mode: tt.mode, interval: 2 * time.Second}
			for i, l := range samples {
				if tt.mode == watchRedraw {
					b.Reset() // the screen shows the last one
				}
				if err := s.sample(t0.Add(time.Duration(i)*2*time.Second), l); err != nil {
					t.Fatal(err)
				}
			}
			if b.String() != tt.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tt.want)
			}
		})
	}
}

// TestServeStatWatch watches a daemon under traffic, ticked by the test:
// the WRITEs between two ticks 2 s apart show as rcvd_pkts' rate; stopping
// the watch is status 0.
func TestServeStatWatch(t *testing.T) {
	d := startDaemon(t)
	pr, pw := io.Pipe()
	lines := bufio.NewScanner(pr)
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := &statWatcher{out: pw, mode: watchLines, interval: 2 * time.Second}
	fetch := func(ctx context.Context) (control.Counters, error) {
		var l control.Counters
		return l, control.Call(ctx, d.control, "stat", &l)
	}
	go func() { done <- w.run(ctx, fetch, ticks) }()
	// sample reads the lines of one sample: up to the one of counter last.
	sample := func(last string) map[string][]string {
		t.Helper()
		got := map[string][]string{}
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) != 4 {
				t.Fatalf("line %q: want time, counter, value and rate", lines.Text())
			}
			got[f[1]] = f[2:]
			if f[1] == last {
				return got
			}
		}
		t.Fatalf("the watch ended: %v", lines.Err())
		return nil
	}
	// The whole first sample is read, up to its last counter, so that the
	// watcher is not left writing it when the next tick comes.
	var all control.Counters
	if err := control.Call(context.Background(), d.control, "stat", &all); err != nil {
		t.Fatal(err)
	}
	first := sample(all[len(all)-1].Name)
	before, _ := strconv.ParseUint(first["rcvd_pkts"][0], 10, 64)
	const writes = 3
	for i := range writes {
		if code, _, stderr := d.op(0, "write", "--addr", d.addr(0, 8*i), "--data", "12345678"); code != 0 {
			t.Fatalf("write: %s", stderr)
		}
	}
	ticks <- w.prevAt.Add(2 * time.Second)
	second := sample("rcvd_pkts") // a changed counter, listed early
	after, _ := strconv.ParseUint(second["rcvd_pkts"][0], 10, 64)
	// Each WRITE is a connection (REQ, RTU, DREQ or DREP) and the WRITE:
	// at least 2 packets each reach the daemon.
	if after < before+2*writes {
		t.Errorf("rcvd_pkts went from %d to %d, want at least %d more", before, after, 2*writes)
	}
	if want := formatRate(float64(after-before)/2) + "/s"; second["rcvd_pkts"][1] != want {
		t.Errorf("rcvd_pkts rate %s, want %s", second["rcvd_pkts"][1], want)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Errorf("the watch ended with %v, want nil", err)
	}
	pw.Close()

	// The command: a sample at once, then status 0 when stopped.
	pr, pw = io.Pipe()
	ctx, cancel = context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() {
		exit <- runContext(ctx, []string{"stat", "--control", d.control, "--watch", "--json"}, pw, io.Discard)
	}()
	line, err := bufio.NewReader(pr).ReadBytes('\n')
	var js struct{ Counters map[string]uint64 }
	if err != nil || json.Unmarshal(line, &js) != nil || js.Counters["rcvd_pkts"] < after {
		t.Errorf("stat --watch --json printed %q (%v)", line, err)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-exit; code != 0 {
		t.Errorf("stat --watch stopped with status %d, want 0", code)
	}
	pw.Close()
	if !regexp.MustCompile(`^\{"time":`).Match(line) {
		t.Errorf("stat --watch --json line %q", line)
	}
}
