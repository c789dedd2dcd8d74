package embedded_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestAnswersLeaveDuringABatch: a device that reads a peer's whole window
// of WRITEs at once (its goroutine was held off the socket while they
// came, as on a loaded machine) sends the ACKs they ask for as it goes,
// every 64 datagrams, not once it has placed them all: the peer's window
// opens while the rest is placed, so the two sides work at once.
func TestAnswersLeaveDuringABatch(t *testing.T) {
	var mu sync.Mutex
	var events []string // what b received and sent: "data" and "ack"
	tracing := false
	trace := func(p *nic.TracePacket) {
		op := wire.BTH(p.Data).OpCode()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !tracing:
		case p.Dir == nic.Received && op.IsWrite():
			events = append(events, "data")
		case p.Dir == nic.Sent && op == wire.OpRCAck:
			events = append(events, "ack")
		}
	}
	const size = 64 << 10
	// a receives no WRITE and sends no ACK: the trace hears b's alone.
	p := nictest.NewPair(t, &nictest.Options{
		Config:     nic.Config{Trace: trace},
		Connect:    nic.ConnectOptions{MTU: 4096, Timeout: 20}, // 4 s: nothing resent for being slow
		RegionSize: 16 * size,
	})
	a, b := p.A, p.B
	write := func(n int) {
		t.Helper()
		for i := range n {
			wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled,
				SGL: []verbs.SGE{a.MR.SGE(i*size, size)}, RemoteAddr: b.MR.Addr() + uint64(i*size), RKey: b.MR.RKey()}
			if err := a.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		wcs := make([]verbs.WC, n)
		for got := 0; got < n; {
			k, err := a.CQ.Wait(ctx, wcs[got:])
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[got : got+k] {
				if wc.Status != verbs.Success {
					t.Fatalf("WRITE: %v", wc.String())
				}
			}
			got += k
		}
	}
	// Two rounds of 1 MiB open a's congestion window past 128 packets.
	for range 2 {
		write(16)
		wait(16)
	}
	sent := func() uint64 { n, _ := a.Dev.Counter("sent_pkts"); return n }
	mu.Lock()
	tracing = true
	mu.Unlock()
	release := embedded.HoldProgress(device(b.Dev))
	before := sent()
	const writes = 8 // 128 packets, an ACK asked for every 16
	write(writes)
	for deadline := time.Now().Add(10 * time.Second); sent() < before+writes*size/4096; {
		if time.Now().After(deadline) {
			release()
			t.Fatalf("a sent %d packets of %d", sent()-before, writes*size/4096)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wait(writes)
	mu.Lock()
	defer mu.Unlock()
	data, firstACK := 0, -1
	for i, e := range events {
		switch {
		case e == "data":
			data++
		case firstACK < 0:
			firstACK = i
		}
	}
	if data != writes*size/4096 {
		t.Fatalf("b received %d WRITE packets, want %d", data, writes*size/4096)
	}
	if firstACK < 0 || firstACK >= data {
		t.Fatalf("b's first ACK left after %d of the %d WRITE packets it read at once, want it before the last: %v", firstACK, data, events)
	}
}
