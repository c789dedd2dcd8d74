package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// The attacks of issue 14 on the local side of the daemon, each repeated
// at a scale that reaches the limit it meets, and the daemon's state
// afterwards.

// TestControlSurvivesEMFILE: a daemon whose descriptors run out (a limit
// of 64, and 200 connections that send nothing) stops accepting while
// they last and answers again once they are gone: its accept loop waits
// out EMFILE instead of taking it for the socket's end, counts it
// (control_accept_errors) and logs it once (at most once a minute).
func TestControlSurvivesEMFILE(t *testing.T) {
	d := startChildDaemon(t, []string{childNoFileEnv + "=64"})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("unix", d.control)
		if err != nil {
			t.Fatalf("connection %d to the control socket: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	const warning = "accept failed"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.stderr.String(), warning); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not run out of descriptors with 200 connections and a limit of 64; stderr:\n%s", d.stderr)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// The backoff waits at most a second between tries.
	var info deviceInfo
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := controlCall(ctx, d.control, "info", &info); err != nil {
		t.Fatalf("info once the connections are gone: %v; stderr:\n%s", err, d.stderr)
	}
	if info.PID != d.cmd.Process.Pid {
		t.Errorf("info answers pid %d, want the daemon's %d", info.PID, d.cmd.Process.Pid)
	}
	var stat map[string]uint64
	if err := controlCall(ctx, d.control, "stat", &stat); err != nil {
		t.Fatal(err)
	}
	if stat["control_accept_errors"] == 0 {
		t.Errorf("control_accept_errors = 0 after the daemon ran out of descriptors")
	}
	if n := strings.Count(d.stderr.String(), warning); n != 1 {
		t.Errorf("%d %q lines within a minute, want 1; stderr:\n%s", n, warning, d.stderr)
	}
}
