package nic_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// noLoss are counters that a lost, repeated or reordered packet moves on
// one side or the other.
var noLoss = []string{"retransmitted_pkts", "duplicate_request", "out_of_seq_request", "rcvd_seq_err", "completer_retry_err"}

// Packets are processed by whoever holds the device's progress role: the
// reader goroutine, or an application polling its CQ. Two applications on
// one device, one that polls in streaks (and sleeps between them, so the
// reader takes over) and one that waits, each keep FETCH_ADDs on one word
// of the peer in flight: every FETCH_ADD completes once, and the values
// they fetched are each count exactly once, so that no request was
// executed twice or lost; no packet was resent, repeated or taken out of
// order.
func TestPollAndReaderHandOver(t *testing.T) {
	const (
		perQP = 600
		depth = 8
	)
	a, b, ends := twoEndsToOne(t, nic.Config{})
	fetched := make([][]uint64, len(ends))
	var wg sync.WaitGroup
	for i, e := range ends {
		polls := i == 0
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var wcs [depth]verbs.WC
			posted, done := 0, 0
			for done < perQP {
				for posted < perQP && posted-done < depth {
					slot := posted % depth
					wr := verbs.SendWR{ID: uint64(slot), Opcode: verbs.WRFetchAdd, Flags: verbs.Signaled, SGL: []verbs.SGE{e.mr.SGE(8*slot, 8)},
						RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1}
					if err := e.qp.PostSend(&wr); err != nil {
						t.Error(err)
						return
					}
					posted++
				}
				var n int
				var err error
				switch {
				case polls && done%100 < 50: // a streak of polls
					n, err = e.cq.Poll(wcs[:])
				case polls && done%100 == 50:
					time.Sleep(time.Millisecond) // off: the reader resumes
					fallthrough
				default:
					n, err = e.cq.Wait(ctx, wcs[:])
				}
				if err != nil {
					t.Error(err)
					return
				}
				syncMemory(e)
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.Success {
						t.Errorf("FETCH_ADD: %v", wc.String())
						return
					}
					fetched[i] = append(fetched[i], leUint64(e.mr.Bytes()[8*wc.ID:]))
				}
				done += n
			}
		})
	}
	wg.Wait()
	all := slices.Concat(fetched...)
	slices.Sort(all)
	if len(all) != len(ends)*perQP {
		t.Fatalf("%d FETCH_ADDs completed, want %d", len(all), len(ends)*perQP)
	}
	for i, v := range all {
		if v != uint64(i) {
			t.Fatalf("the %dth value fetched is %d: a FETCH_ADD executed twice or not at all", i, v)
		}
	}
	for _, d := range []*nic.Device{a, b.dev} {
		for _, name := range noLoss {
			if v, _ := d.Counter(name); v != 0 {
				t.Errorf("%v: %s = %d, want 0", d.Addr(), name, v)
			}
		}
	}
}

// twoEndsToOne opens device a with two ends, each with a QP connected to a
// QP of its own on the end b of another device.
func twoEndsToOne(t *testing.T, cfg nic.Config) (a *nic.Device, b *end, ends []*end) {
	a = nictest.OpenDevice(t, cfg)
	b = endOn(t, nictest.OpenDevice(t, nic.Config{}))
	opts := nic.ConnectOptions{Timeout: 20} // 4 s: under -race, nothing resent for being slow
	ends = []*end{endOn(t, a), endOn(t, a)}
	for _, e := range ends {
		peer, err := b.pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Connect(b.dev.Addr(), peer.Num(), opts); err != nil {
			t.Fatal(err)
		}
		if err := peer.Connect(a.Addr(), e.qp.Num(), opts); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, ends
}

func leUint64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// A round trip completed by polling, the device's packets processed by the
// poller, allocates nothing: neither the post, nor the polls that find
// nothing and read the socket, nor what they process, nor the peer device.
// What is counted is every goroutine's allocations, which rare events
// leave at a fraction of one per round trip (the waiter of a contended
// lock, the socket registered again in the netpoller when the reader comes
// back between two polls); one on the path would make it one at least.
//
// The same holds for a round trip waited for with CQ.Wait, whose waiter
// busy-polls as Poll does (Config.WaitSpin), or, without the spin, waits
// for the socket and processes what arrives itself.
func TestPollRoundTripAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops packet batches on purpose")
	}
	for _, m := range []struct {
		name string
		wait bool
		spin time.Duration
	}{{"polling", false, 0}, {"waiting", true, 0}, {"waiting without a spin", true, -1}} {
		t.Run(m.name, func(t *testing.T) {
			a, b := connected(t, nic.Config{WaitSpin: m.spin}, nic.ConnectOptions{})
			for _, op := range []verbs.WROpcode{verbs.WRWrite, verbs.WRRead, verbs.WRFetchAdd} {
				wr := verbs.SendWR{Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1}
				var wcs [1]verbs.WC
				roundTrip := func() {
					if err := a.qp.PostSend(&wr); err != nil {
						t.Fatal(err)
					}
					for {
						var n int
						var err error
						if m.wait {
							n, err = a.cq.Wait(context.Background(), wcs[:])
						} else {
							n, err = a.cq.Poll(wcs[:])
						}
						if err != nil || n == 1 && wcs[0].Status != verbs.Success {
							t.Fatalf("%v: %v, %v", op, wcs[0].String(), err)
						}
						if n == 1 {
							return
						}
					}
				}
				roundTrip() // the batches' pools fill
				if n := mallocsPer(200, roundTrip); n >= 1 {
					t.Errorf("%v: %v allocations per round trip, want 0", op, n)
				}
			}
		})
	}
}

// Two applications wait on two CQs of one device, each for its own QP's
// operations: one at a time waits for the socket and processes what
// comes for both, the other sleeps on its CQ until woken, and the socket
// passes between them; every operation completes once, and nothing is
// resent. The same holds when they busy-poll before they sleep
// (Config.WaitSpin), driving the device in turns.
func TestWaitersShareTheSocket(t *testing.T) {
	for _, spin := range []time.Duration{-1, 0} {
		t.Run(fmt.Sprintf("spin %v", spin), func(t *testing.T) { waitersShareTheSocket(t, nic.Config{WaitSpin: spin}) })
	}
}

func waitersShareTheSocket(t *testing.T, cfg nic.Config) {
	const perQP = 500
	a, b, ends := twoEndsToOne(t, cfg)
	var wg sync.WaitGroup
	for _, e := range ends {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var wcs [1]verbs.WC
			for i := range perQP {
				wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{e.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if err := e.qp.PostSend(&wr); err != nil {
					t.Error(err)
					return
				}
				n, err := e.cq.Wait(ctx, wcs[:])
				if err != nil || n != 1 || wcs[0].ID != uint64(i) || wcs[0].Status != verbs.Success {
					t.Errorf("WRITE %d: %d, %v, %v", i, n, wcs[0].String(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, d := range []*nic.Device{a, b.dev} {
		for _, name := range noLoss {
			if v, _ := d.Counter(name); v != 0 {
				t.Errorf("%v: %s = %d, want 0", d.Addr(), name, v)
			}
		}
	}
}

// mallocsPer is testing.AllocsPerRun without its GOMAXPROCS of 1, under
// which a goroutine that polls in a loop leaves the peer device's
// goroutines a CPU only when the scheduler preempts it, every 10 ms. It
// counts every goroutine's allocations.
func mallocsPer(runs int, f func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}

// What an application posts between two polls leaves at its next poll,
// all of it together, also when the poll before the posts found
// completions the reader goroutine wrote (the application had waited, or
// been descheduled, and the reader took the socket back): a poll that
// returns completions says the application polls, as an empty one does.
// Otherwise such a poller, finding the reader's completions at every
// call, never polled empty, and each of its posts left alone in a system
// call of its own. Each try checks that a WRITE posted after such a poll
// has not left before the next; a try that the scheduler interrupts for
// longer than the reader waits (pollIdle) may see it sent, not all five.
func TestPostAfterPollLeavesAtNextPoll(t *testing.T) {
	a, b := connected(t, nic.Config{}, nic.ConnectOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	var wcs [1]verbs.WC
	post := func() {
		t.Helper()
		if err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() uint64 {
		v, ok := a.dev.Counter("sent_pkts")
		if !ok {
			t.Fatal("no sent_pkts counter")
		}
		return v
	}
	deferred := 0
	for range 5 {
		post()
		if _, err := a.cq.Wait(ctx, wcs[:]); err != nil { // the reader has the socket again
			t.Fatal(err)
		}
		post()
		if err := a.cq.WaitReady(ctx); err != nil { // the reader processed its ACK
			t.Fatal(err)
		}
		if n, err := a.cq.Poll(wcs[:]); n != 1 || err != nil {
			t.Fatalf("poll: %d completions, %v; want the one waiting", n, err)
		}
		before := sent()
		post()
		if sent() == before {
			deferred++
		}
		for n := 0; n == 0; {
			var err error
			if n, err = a.cq.Poll(wcs[:]); err != nil {
				t.Fatal(err)
			}
		}
		if sent() == before {
			t.Fatal("the WRITE posted between two polls was not sent by the second")
		}
	}
	if deferred == 0 {
		t.Error("each WRITE posted after a poll that found a completion was sent at once, not at the next poll")
	}
}
