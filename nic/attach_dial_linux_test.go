package nic_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
)

// TestDialControlWaitsForRoom: DialControl to a daemon whose backlog is
// full waits for room, until its context's deadline (then EAGAIN), or
// until the daemon accepts; it does not fail at once as a non-blocking
// connect would.
func TestDialControlWaitsForRoom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.(*net.UnixListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { err = syscall.Listen(int(fd), 0) })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var queued []net.Conn
	for { // net.Dial connects without blocking: EAGAIN once the backlog is full
		c, err := net.Dial("unix", path)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil || len(queued) > 16 {
			for _, c := range queued {
				c.Close()
			}
			t.Fatalf("filling a backlog of 0: %d connections, %v", len(queued), err)
		}
		queued = append(queued, c)
	}

	const wait = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	start := time.Now()
	_, err = nic.DialControl(ctx, path)
	if took := time.Since(start); !errors.Is(err, syscall.EAGAIN) || took < wait*3/4 {
		t.Errorf("DialControl to a full backlog never accepted: %v after %v, want EAGAIN after %v", err, took, wait)
	}

	for _, c := range queued { // still in the backlog until accepted, but read to their end at once
		c.Close()
	}
	dialed := make(chan error, 1)
	go func() {
		c, err := nic.DialControl(t.Context(), path)
		if err == nil {
			_, err = c.Write([]byte("hello"))
			c.Close()
		}
		dialed <- err
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := c.Read(b)
		c.Close()
		if string(b[:n]) == "hello" {
			break
		}
	}
	if err := <-dialed; err != nil {
		t.Errorf("DialControl once the daemon accepts: %v", err)
	}
}
