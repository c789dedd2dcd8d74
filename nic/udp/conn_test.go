package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
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

// waitForIOWait yields until some goroutine whose stack holds fn waits for
// the socket: parked on the network poller (the portable fallback), or in
// poll(2) (Linux, whose sockets are outside the netpoller).
func waitForIOWait(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			waiting := strings.Contains(g, "[IO wait") || strings.Contains(g, "[syscall") && strings.Contains(g, "waitFor")
			if waiting && strings.Contains(g, fn) {
				return
			}
		}
		runtime.Gosched()
	}
	t.Fatalf("no goroutine in %s waits for the socket", fn)
}

// messages returns n messages with buffers of size bytes.
func messages(n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
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
	msgs := messages(4, 2048)
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

// ReadBatchTurn waits without its turn, returns with it held and what it
// read once a datagram is queued, does not hold up TryReadBatch while it
// waits, and is woken by Close.
func TestReadBatchTurn(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	msgs := messages(4, 2048)
	var turn sync.Mutex
	type result struct {
		n   int
		err error
	}
	woke := make(chan result, 1)
	read := func() {
		n, err := b.ReadBatchTurn(msgs, &turn)
		woke <- result{n, err}
	}
	go read()
	waitForIOWait(t, "udp.(*Conn).readBatchTurn")
	select {
	case r := <-woke:
		t.Fatalf("ReadBatchTurn on an empty socket returned %+v", r)
	default:
	}
	if !turn.TryLock() {
		t.Fatal("ReadBatchTurn holds the turn while it waits")
	}
	other := make([]Message, 1)
	other[0].Buf = make([]byte, 64)
	start := time.Now()
	if n, err := b.TryReadBatch(other); n != 0 || err != nil || time.Since(start) > time.Second {
		t.Fatalf("TryReadBatch beside a waiting ReadBatchTurn = %d, %v after %v; want 0, nil at once", n, err, time.Since(start))
	}
	if _, err := a.WriteBatch([]Message{{Buf: []byte("one"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the datagram is queued; ReadBatchTurn waits for the turn
	select {
	case r := <-woke:
		t.Fatalf("ReadBatchTurn returned %+v while another held the turn", r)
	default:
	}
	turn.Unlock()
	select {
	case r := <-woke:
		if r.n != 1 || r.err != nil || string(msgs[0].Buf[:msgs[0].N]) != "one" {
			t.Fatalf("ReadBatchTurn = %+v, want the datagram", r)
		}
	case <-time.After(watchdog):
		t.Fatal("ReadBatchTurn still blocked with a datagram queued and the turn free")
	}
	if turn.TryLock() {
		t.Fatal("ReadBatchTurn returned what it read without holding the turn")
	}
	turn.Unlock()
	go read()
	waitForIOWait(t, "udp.(*Conn).readBatchTurn")
	b.Close()
	select {
	case r := <-woke:
		if r.n != 0 || !errors.Is(r.err, net.ErrClosed) {
			t.Fatalf("ReadBatchTurn after Close = %+v, want net.ErrClosed", r)
		}
	case <-time.After(watchdog):
		t.Fatal("ReadBatchTurn still blocked after Close")
	}
	if !turn.TryLock() {
		t.Fatal("ReadBatchTurn failed holding the turn")
	}
}

// StopWaiting between waits changes nothing but the registration: what
// came meanwhile is read by the next TryReadBatch or wait, and waits wait.
func TestStopWaiting(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	msgs := messages(4, 64)
	send := func(s string) {
		t.Helper()
		if _, err := a.WriteBatch([]Message{{Buf: []byte(s), Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	var turn sync.Mutex
	for i, s := range []string{"one", "two", "three"} {
		b.StopWaiting()
		send(s)
		var n int
		var err error
		if i == 1 {
			for deadline := time.Now().Add(watchdog); n == 0 && err == nil && time.Now().Before(deadline); {
				n, err = b.TryReadBatch(msgs)
			}
		} else {
			n, err = b.ReadBatchTurn(msgs, &turn)
			turn.Unlock()
		}
		if n != 1 || err != nil || string(msgs[0].Buf[:msgs[0].N]) != s {
			t.Fatalf("read %d, %v; want %q", n, err, s)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadBatch(msgs)
		done <- err
	}()
	waitForIOWait(t, "udp.(*Conn).readBatch")
	send("four")
	select {
	case err := <-done:
		if err != nil || string(msgs[0].Buf[:msgs[0].N]) != "four" {
			t.Fatalf("ReadBatch = %v, %q; want four", err, msgs[0].Buf[:msgs[0].N])
		}
	case <-time.After(watchdog):
		t.Fatal("ReadBatch still waiting with a datagram queued")
	}
}

// A goroutine that sleeps in ReadBatchTurn, and another that polls with
// TryReadBatch under the same turn, share a socket: between them they read
// every datagram once, in the order it was sent.
func TestReadBatchTurnHandover(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{DisableGSO: true})
	b := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	const n = 2000
	var turn sync.Mutex
	var got []uint32 // in the order read, under turn
	count := func(msgs []Message, k int) {
		for i := range msgs[:k] {
			got = append(got, binary.BigEndian.Uint32(msgs[i].Buf))
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { // the device's reader
		msgs := messages(8, 64)
		for {
			k, err := b.ReadBatchTurn(msgs, &turn)
			if err != nil {
				return
			}
			if k > 0 {
				count(msgs, k)
				turn.Unlock()
			}
		}
	})
	stop := make(chan struct{})
	wg.Go(func() { // a poller
		msgs := messages(8, 64)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			turn.Lock()
			k, err := b.TryReadBatch(msgs)
			if err != nil && !errors.Is(err, net.ErrClosed) {
				t.Error(err)
			}
			count(msgs, k)
			turn.Unlock()
			if i%64 == 0 {
				time.Sleep(50 * time.Microsecond) // and off: the reader takes over
			}
		}
	})
	var out [4]byte
	for i := range uint32(n) {
		binary.BigEndian.PutUint32(out[:], i)
		if _, err := a.WriteBatch([]Message{{Buf: out[:], Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		if i%16 == 0 {
			time.Sleep(10 * time.Microsecond) // let the socket drain: loopback drops when full
		}
	}
	for deadline := time.Now().Add(watchdog); ; time.Sleep(time.Millisecond) {
		turn.Lock()
		k := len(got)
		turn.Unlock()
		if k >= n || time.Now().After(deadline) {
			break
		}
	}
	close(stop)
	b.Close()
	wg.Wait()
	if len(got) != n {
		t.Fatalf("read %d datagrams of %d", len(got), n)
	}
	for i, v := range got {
		if v != uint32(i) {
			t.Fatalf("datagram %d read as the %dth: lost, repeated or out of order", v, i)
		}
	}
}
