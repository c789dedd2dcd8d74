package embedded_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// device returns the embedded provider of d, as the daemon reaches it.
func device(d *nic.Device) hooks.Device {
	e, _ := hooks.Embedded.(func(*nic.Device) (hooks.Device, bool))(d)
	return e
}

// noLoss are counters that a lost, repeated or reordered packet moves on
// one side or the other.
var noLoss = []string{"retransmitted_pkts", "duplicate_request", "out_of_seq_request", "rcvd_seq_err", "completer_retry_err"}

// An ACK that arrives while the goroutine that would process it cannot
// (descheduled, on a loaded machine) is processed before the ACK timer
// that falls due meanwhile runs: the timer declares no loss, and nothing
// is sent again.
func TestTimerCatchesUpBeforeTimeout(t *testing.T) {
	const timeout = 8 // 4.096 µs × 2^8: about 1 ms
	p := nictest.NewPair(t, &nictest.Options{Connect: nic.ConnectOptions{Timeout: timeout}})
	a, b := p.A, p.B
	release := embedded.HoldProgress(device(a.Dev))
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	if err := a.QP.PostSend(&wr); err != nil {
		release()
		t.Fatal(err)
	}
	// The ACK comes back and waits in the socket; the timer falls due 20
	// times over.
	time.Sleep(20 * time.Millisecond)
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wcs [1]verbs.WC
	if _, err := a.CQ.Wait(ctx, wcs[:]); err != nil || wcs[0].Status != verbs.Success {
		t.Fatalf("WRITE: %v, %v", wcs[0].String(), err)
	}
	for _, d := range []*nic.Device{a.Dev, b.Dev} {
		for _, name := range noLoss {
			if v, _ := d.Counter(name); v != 0 {
				t.Errorf("%v: %s = %d, want 0", d.Addr(), name, v)
			}
		}
	}
}

// A waiter that waits for the socket itself (see progress.go) wakes for
// what does not come through the socket: a completion another goroutine
// writes to its CQ, the end of its context, its CQ destroyed, its device
// closed.
func TestAttendingWaiterInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(e *nictest.End, cq *nic.CQ, cancel context.CancelFunc)
		want func(n int, wc verbs.WC, err error) bool
	}{
		{"completion", func(e *nictest.End, _ *nic.CQ, _ context.CancelFunc) {
			// The receive posted is flushed to the CQ on this goroutine.
			if err := e.QP.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState); err != nil {
				t.Error(err)
			}
		}, func(n int, wc verbs.WC, err error) bool {
			return n == 1 && err == nil && wc.ID == 42 && wc.Status == verbs.WRFlushErr
		}},
		{"context", func(_ *nictest.End, _ *nic.CQ, cancel context.CancelFunc) { cancel() },
			func(_ int, _ verbs.WC, err error) bool { return errors.Is(err, context.Canceled) }},
		{"CQ destroyed", func(_ *nictest.End, cq *nic.CQ, _ context.CancelFunc) {
			if err := cq.Destroy(); err != nil {
				t.Error(err)
			}
		}, func(_ int, _ verbs.WC, err error) bool { return errors.Is(err, nic.ErrClosed) }},
		{"device closed", func(e *nictest.End, _ *nic.CQ, _ context.CancelFunc) { e.Dev.Close() },
			func(_ int, _ verbs.WC, err error) bool { return errors.Is(err, nic.ErrClosed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := nictest.NewPair(t, nil).A
			dev := device(a.Dev)
			if !embedded.WaitersAttend(dev) {
				t.Skip("the portable socket layer's waits cannot be interrupted: waiters sleep on their CQ")
			}
			cq := a.CQ
			switch tc.name {
			case "completion":
				if err := a.QP.PostRecv(&verbs.RecvWR{ID: 42, SGL: []verbs.SGE{a.MR.SGE(0, 8)}}); err != nil {
					t.Fatal(err)
				}
			case "CQ destroyed":
				var err error
				if cq, err = a.Dev.CreateCQ(4); err != nil { // no QP uses it
					t.Fatal(err)
				}
			}
			embedded.ParkReader(dev)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				n   int
				wc  verbs.WC
				err error
			}
			done := make(chan result, 1)
			go func() {
				var wcs [1]verbs.WC
				n, err := cq.Wait(ctx, wcs[:])
				done <- result{n, wcs[0], err}
			}()
			for deadline := time.Now().Add(10 * time.Second); !embedded.Attending(dev); {
				if time.Now().After(deadline) {
					t.Fatal("the waiter does not wait for the socket")
				}
				runtime.Gosched()
			}
			tc.do(a, cq, cancel)
			select {
			case r := <-done:
				if !tc.want(r.n, r.wc, r.err) {
					t.Errorf("Wait: %d, %v, %v", r.n, r.wc.String(), r.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter still waits 10 s after")
			}
		})
	}
}

// A poll whose batch takes longer than the reader's pollIdle to process
// (its answers built and sent: a burst of READ responses) keeps the
// reader off the socket until it ends: the reader would otherwise take
// the next batch while the poller comes back and spins beside it, two
// threads where one does the work. Once the poll ends and none follows,
// the reader comes back. (What is checked is that something does not
// happen for a while: a reader that comes back during the poll fails it
// whenever it is scheduled within the 20 ms.)
func TestReaderStaysOffDuringALongPoll(t *testing.T) {
	a := nictest.NewPair(t, nil).A
	dev := device(a.Dev)
	if !embedded.WaitersAttend(dev) {
		t.Skip("the portable socket layer's waits cannot be interrupted: the reader stays on the socket")
	}
	end := embedded.PollUnderWay(dev)
	deadline := time.Now().Add(10 * time.Second)
	for embedded.Attending(dev) {
		if time.Now().After(deadline) {
			end()
			t.Fatal("the reader did not leave the socket for the poll")
		}
		runtime.Gosched()
	}
	for until := time.Now().Add(20 * time.Millisecond); time.Now().Before(until); time.Sleep(100 * time.Microsecond) {
		if embedded.Attending(dev) {
			end()
			t.Fatal("the reader went back to the socket while the poll was under way")
		}
	}
	end()
	for !embedded.Attending(dev) {
		if time.Now().After(deadline) {
			t.Fatal("the reader did not come back to the socket after the poll")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// An application that polls runs the QPs' timers that fall due as it
// polls: with the timer goroutine held up (as one that gets no CPU on a
// machine whose cores the poller and its peer keep busy), a WRITE whose
// packet was lost is sent again at its ACK timeout, found by a poll, and
// completes while the application polls.
func TestPollerRunsTimers(t *testing.T) {
	var drop atomic.Bool
	drop.Store(true)
	hook := func(pkt []byte) nic.SendAction {
		if wire.BTH(pkt).OpCode() == wire.OpRCWriteOnly && drop.Swap(false) {
			return nic.SendDrop
		}
		return nic.SendPass
	}
	const timeout = 10 // 4.096 µs × 2^10: about 4 ms
	p := nictest.NewPair(t, &nictest.Options{Config: nic.Config{SendHook: hook}, Connect: nic.ConnectOptions{Timeout: timeout}})
	a, b := p.A, p.B
	release := embedded.StallTimers(device(a.Dev))
	defer release()
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.MR.SGE(0, 8)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	if err := a.QP.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	var wcs [1]verbs.WC
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := a.CQ.Poll(wcs[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WRITE did not complete in 10 s of polls with the timer goroutine held up (retransmitted_pkts %d)", counter(a.Dev, "retransmitted_pkts"))
		}
		runtime.Gosched()
	}
	if wcs[0].Status != verbs.Success {
		t.Fatalf("WRITE: %v", wcs[0].String())
	}
	if got := counter(a.Dev, "retransmitted_pkts"); got == 0 {
		t.Error("retransmitted_pkts = 0: the WRITE completed without being sent again")
	}
}

func counter(d *nic.Device, name string) uint64 {
	v, _ := d.Counter(name)
	return v
}
