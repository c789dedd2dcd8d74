package udp

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// watchdog bounds a loopback read that should complete at once: if the test
// has not finished after a generous delay, it closes c, which turns the
// blocked ReadBatch into an error the test reports.
const watchdog = 10 * time.Second

func listen(t *testing.T, addr string, opt Options) *Conn {
	t.Helper()
	c, err := Listen(netip.MustParseAddrPort(addr), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCloseUnblocksReader(t *testing.T) {
	tests := []struct {
		name        string
		waitBlocked bool
	}{
		// Close races with the start of the read: whichever comes first,
		// ReadBatch must return net.ErrClosed.
		{name: "racing the read"},
		// The reader is parked in the netpoller when Close comes.
		{name: "blocked read", waitBlocked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 20 {
				c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan error)
				go func() {
					_, err := c.ReadBatch(make([]Message, 4))
					done <- err
				}()
				if tt.waitBlocked {
					waitForIOWait(t, "udp.(*Conn).readBatch")
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if !errors.Is(err, net.ErrClosed) {
						t.Fatalf("round %d: ReadBatch after Close = %v, want net.ErrClosed", i, err)
					}
				case <-time.After(watchdog):
					t.Fatalf("round %d: ReadBatch still blocked after Close", i)
				}
			}
		})
	}
}

// waitForIOWait yields until some goroutine whose stack holds fn is parked
// waiting for the network poller.
func waitForIOWait(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, fn) {
				return
			}
		}
		runtime.Gosched()
	}
	t.Fatalf("no goroutine in %s blocked on the network poller", fn)
}

func TestUseAfterClose(t *testing.T) {
	c := listen(t, "127.0.0.1:0", Options{})
	c.Close()
	msgs := []Message{{Buf: make([]byte, 10), Addr: c.LocalAddr()}}
	if n, err := c.WriteBatch(msgs); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteBatch after Close = %d, %v, want 0, net.ErrClosed", n, err)
	}
	if n, err := c.ReadBatch(msgs); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadBatch after Close = %d, %v, want 0, net.ErrClosed", n, err)
	}
}

// TryReadBatch takes what is queued and returns 0 at once when nothing is,
// without blocking; after Close it fails like ReadBatch.
func TestTryReadBatch(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	msgs := make([]Message, 4)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 2048)
	}
	start := time.Now()
	if n, err := b.TryReadBatch(msgs); n != 0 || err != nil {
		t.Fatalf("TryReadBatch of an empty socket = %d, %v; want 0, nil", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryReadBatch of an empty socket took %v", d)
	}
	if _, err := a.WriteBatch([]Message{{Buf: []byte("one"), Addr: b.LocalAddr()}, {Buf: []byte("two"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for deadline := time.Now().Add(watchdog); got < 2 && time.Now().Before(deadline); {
		n, err := b.TryReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs[:n] {
			for range Segments(&msgs[i]) { // GRO may have joined the two
				got++
			}
		}
	}
	if got != 2 {
		t.Fatalf("TryReadBatch took %d datagrams of 2", got)
	}
	if n, err := b.TryReadBatch(msgs); n != 0 || err != nil {
		t.Errorf("TryReadBatch of a drained socket = %d, %v; want 0, nil", n, err)
	}
	b.Close()
	if _, err := b.TryReadBatch(msgs); !errors.Is(err, net.ErrClosed) {
		t.Errorf("TryReadBatch after Close = %v, want net.ErrClosed", err)
	}
}
