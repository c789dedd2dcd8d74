package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"
)

// fakeListener returns its errors in turn, a nil one standing for a
// connection, then net.ErrClosed.
type fakeListener struct {
	errs []error
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.errs) == 0 {
		return nil, net.ErrClosed
	}
	err := l.errs[0]
	l.errs = l.errs[1:]
	if err != nil {
		return nil, err
	}
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.UnixAddr{Name: "fake", Net: "unix"} }

// TestBackoffRidesOutErrors: errors of a process or system out of
// resources are waited out (5 ms doubling to 1 s), counted, and logged at
// the start of an episode at most once a minute; only the listener's
// closing ends the loop.
func TestBackoffRidesOutErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	var errs []error
	for range 10 {
		errs = append(errs, emfile)
	}
	// A second episode within the minute, then a third a minute later.
	errs = append(errs, nil, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, nil, syscall.EMFILE, nil)
	l := &fakeListener{errs: errs}
	var logged bytes.Buffer // one JSON object a line
	var waits []time.Duration
	clock := time.Unix(1e9, 0)
	b := Backoff{Log: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})), What: "test socket", sleep: func(d time.Duration, _ <-chan struct{}) bool {
		waits = append(waits, d)
		clock = clock.Add(d)
		return true
	}}
	b.episodes.now = func() time.Time { return clock }
	done := make(chan struct{})
	accepted := 0
	for {
		c, err := b.Accept(l, done)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept: %v, want net.ErrClosed once the listener is closed", err)
			}
			break
		}
		c.Close()
		accepted++
		if accepted == 2 {
			clock = clock.Add(time.Minute)
		}
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second,
		5 * ms, 10 * ms, 20 * ms, 40 * ms, 5 * ms}
	if accepted != 3 || b.Errors() != 15 || len(waits) != len(want) {
		t.Fatalf("accepted %d, %d errors, waits %v; want 3 accepted, 15 errors, waits %v", accepted, b.Errors(), waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("wait %d = %v, want %v (all: %v)", i, waits[i], want[i], waits)
		}
	}
	var logs []map[string]any
	for line := range bytes.Lines(logged.Bytes()) {
		var e map[string]any
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		logs = append(logs, e)
	}
	if n := len(logs); n != 2 {
		t.Fatalf("%d warnings for three episodes, two within a minute, want 2: %s", n, logged.Bytes())
	}
	for i, count := range []float64{1, 15} {
		if e := logs[i]; e["socket"] != "test socket" || e["accept_errors"] != count {
			t.Errorf("warning %d: %v, want the socket named and accept_errors=%v", i, e, count)
		}
	}
	if skipped := logs[1]["not_logged_since"]; skipped != float64(1) {
		t.Errorf("the second warning says %v episodes were not logged, want 1", skipped)
	}
}

// TestBackoffDone: a loop told to stop returns net.ErrClosed at its next
// error without waiting, and the real wait ends early when done closes.
func TestBackoffDone(t *testing.T) {
	done := make(chan struct{})
	close(done)
	l := &fakeListener{errs: []error{syscall.EMFILE}}
	var b Backoff
	if _, err := b.Accept(l, done); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after done: %v, want net.ErrClosed", err)
	}
	start := time.Now()
	sleepUnless(time.Hour, done)
	if time.Since(start) > time.Minute {
		t.Error("sleepUnless did not end when done was closed")
	}
}
