package attached

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/spin"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// ringDaemon plays the daemon's side of one CQ ring, as attachd's
// hostedCQ writes it: a completion goes into the next slot, the producer
// index is published, and the eventfd is signalled if a waiter armed the
// ring.
type ringDaemon struct {
	ring    shm.Ring
	efd     int // the eventfd registered in the waiter's epoll fd
	mu      sync.Mutex
	prod    uint32
	signals atomic.Int32 // completions that found the ring armed
}

// newWaitCQ returns an attached CQ whose waiters spin for budget, over a
// ring of its own, and the daemon's side of it.
func newWaitCQ(t *testing.T, budget time.Duration) (*attachedCQ, *ringDaemon) {
	t.Helper()
	mustHaveAttach(t)
	const depth = 16
	m, err := shm.Create("softnic-test-cq", shm.RingSize(depth, shm.CQESize))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := shm.NewRing(m.Bytes(), depth, shm.CQESize)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	efd, err := shm.NewEventFD()
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	epfd, err := shm.NewEpoll(efd)
	var ev *shm.Waiter
	if err == nil {
		ev, err = shm.NewWaiter(epfd, "test-cq-wakeup")
	}
	if err != nil {
		m.Close()
		shm.CloseFD(efd)
		t.Fatal(err)
	}
	c := &attachedCQ{st: provider.NewCQState(), depth: depth, ev: ev, spinning: spin.NewPolicy(budget), m: m, ring: ring}
	c.armFn, c.ready = c.arm, c.held
	t.Cleanup(func() {
		c.close(false)
		shm.CloseFD(efd)
	})
	return c, &ringDaemon{ring: ring, efd: efd}
}

// held is what nic's CQ.Wait waits for (provider.CQ.Park's ready).
func (c *attachedCQ) held() bool { return c.Len() > 0 }

// write completes the work request id.
func (d *ringDaemon) write(id uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	shm.EncodeCQE(d.ring.Slot(d.prod), &verbs.WC{ID: id, Opcode: verbs.WCWrite})
	d.prod++
	d.ring.Producer().Store(d.prod)
	if armed := d.ring.Armed(); armed.Load() != 0 && armed.Swap(0) != 0 {
		d.signals.Add(1)
		shm.Signal(d.efd)
	}
}

// wait is nic's CQ.Wait over c alone: poll, park, sleep in CQState.Sleep
// if the park did not, until a completion comes. A completion that never
// comes (a lost wakeup) fails the test after 10 s.
func wait(t *testing.T, c *attachedCQ) verbs.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	for {
		n, err := c.Poll(wcs, false)
		if n > 0 || err != nil {
			if err != nil {
				t.Fatalf("poll: %v", err)
			}
			return wcs[0]
		}
		slept, err := c.Park(ctx, nil, c.held)
		if !slept && err == nil {
			err = c.st.Sleep(ctx, nil)
		}
		if err != nil {
			t.Fatalf("wait: %v (a completion written and never seen)", err)
		}
	}
}

// A completion the daemon writes while the waiter spins is found by the
// spin: the waiter never arms the ring, so the daemon signals nothing and
// no thread sleeps on either side.
func TestWaitFindsCompletionWhileSpinning(t *testing.T) {
	c, d := newWaitCQ(t, time.Second)
	for i := range uint64(100) {
		go func() {
			// Give the waiter a varying head start into its spin.
			for range 1 + i%8 {
				shm.Yield()
			}
			d.write(i)
		}()
		if wc := wait(t, c); wc.ID != i {
			t.Fatalf("op %d: completion of %d", i, wc.ID)
		}
	}
	// The ringDaemon is the only signaller of the CQ's eventfd, and counts
	// each signal before it sends it.
	if d.ring.Armed().Load() != 0 || d.signals.Load() != 0 {
		t.Errorf("ring armed %d, signalled %d times; a waiter that spins arms nothing", d.ring.Armed().Load(), d.signals.Load())
	}
}

// A completion the daemon writes once the waiter has given up spinning
// and armed the ring is signalled, and wakes the waiter.
func TestWaitWakesAfterSpin(t *testing.T) {
	for _, budget := range []time.Duration{-1, time.Microsecond, 50 * time.Microsecond} {
		t.Run(budget.String(), func(t *testing.T) {
			c, d := newWaitCQ(t, budget)
			for i := range uint64(20) {
				go func() {
					for d.ring.Armed().Load() == 0 { // the waiter spun, and sleeps, or is about to
						shm.Yield()
					}
					d.write(i)
				}()
				if wc := wait(t, c); wc.ID != i {
					t.Fatalf("op %d: completion of %d", i, wc.ID)
				}
			}
			if n := d.signals.Load(); n != 20 {
				t.Errorf("%d of 20 completions found the ring armed", n)
			}
		})
	}
}

// A completion the daemon writes between the end of a spin that found
// nothing and the arming of the ring, when the daemon sees no waiter to
// signal, is found by the waiter's look at the ring after it armed it:
// it does not sleep.
func TestWaitSeesCompletionBeforeArming(t *testing.T) {
	c, d := newWaitCQ(t, time.Microsecond)
	if found, spun := c.spin(c.held); found || !spun {
		t.Fatalf("spin over an empty ring: found %v, spun %v; want a spin that found nothing", found, spun)
	}
	d.write(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.sleep(ctx, nil); err != nil {
		t.Fatalf("sleep with a completion in the ring: %v", err)
	}
	if d.signals.Load() != 0 {
		t.Errorf("the daemon signalled a ring armed after its write")
	}
	if wc := wait(t, c); wc.ID != 1 {
		t.Errorf("completion of %d, want 1", wc.ID)
	}
}

// A waiter for a CQ that is closed while it waits, or before, stops
// spinning and returns ErrClosed, as WaitReady, which looks at Len rather
// than polling, needs: a spin that took the closed CQ for a completion
// would send it back to Len, and to the spin, for ever.
func TestWaitOnClosedCQ(t *testing.T) {
	for _, closeFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("closed first %v", closeFirst), func(t *testing.T) {
			c, _ := newWaitCQ(t, time.Second)
			if closeFirst {
				c.close(false)
			} else {
				go func() {
					for range 8 {
						shm.Yield()
					}
					c.close(false)
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 1000 {
				if c.Len() != 0 {
					t.Fatalf("Len %d after the CQ closed, with nothing written", c.Len())
				}
				slept, err := c.Park(ctx, nil, c.held)
				if !slept {
					t.Fatal("the waiter leading the CQ was sent to CQState.Sleep")
				}
				if err != nil {
					if !errors.Is(err, cm.ErrClosed) {
						t.Fatalf("Park: %v, want ErrClosed", err)
					}
					return
				}
			}
			t.Fatal("1000 parks on a closed CQ, none of which reported it")
		})
	}
}

// However the daemon's write falls against the waiter's spin, its arming
// and its sleep, the waiter gets the completion: the daemon writes after
// a delay of its own, up to several spins long, while the spinning
// policy gives the waiter spins or not as they find completions. Run it
// with -count and in parallel to stress the handover.
func TestWaitLosesNoWakeup(t *testing.T) {
	const budget = 20 * time.Microsecond
	c, d := newWaitCQ(t, budget)
	ops := uint64(2000)
	if testing.Short() {
		ops = 300
	}
	for i := range ops {
		delay := time.Duration(i*7919%97) * budget / 32 // 0 to 3 spins
		go func() {
			for end := time.Now().Add(delay); time.Now().Before(end); {
				shm.Yield()
			}
			d.write(i)
		}()
		if wc := wait(t, c); wc.ID != i {
			t.Fatalf("op %d: completion of %d", i, wc.ID)
		}
	}
}

// TestCloseDuringLook: a CQ destroyed while a waiter is in its wait's
// look (arm, which takes the CQ's lock) ends that wait, and the destroy
// returns: close lets the lock go before it closes the wakeup descriptor,
// whose Close waits for the wait under way. Holding it, ibv_destroy_cq
// hung rdma_xclient while libsoftnic's goroutine for ibv_req_notify_cq
// armed the CQ (about once in 150 runs on a loaded machine).
func TestCloseDuringLook(t *testing.T) {
	c, _ := newWaitCQ(t, -1)
	var entered sync.Once
	inLook, goOn := make(chan struct{}), make(chan struct{})
	c.armFn = func() bool {
		entered.Do(func() { close(inLook) })
		<-goOn
		return c.arm()
	}
	slept := make(chan error, 1)
	go func() { slept <- c.sleep(context.Background(), nil) }()
	<-inLook
	closed := make(chan struct{})
	go func() {
		c.close(false)
		close(closed)
	}()
	time.Sleep(50 * time.Millisecond) // for close to reach the descriptor's Close
	close(goOn)
	for _, ch := range []struct {
		what string
		done <-chan struct{}
	}{{"the wait", waited(slept)}, {"close", closed}} {
		select {
		case <-ch.done:
		case <-time.After(10 * time.Second):
			// Deadlocked: the test's cleanups would hang on the same lock
			// (they run on a test's failure, or its panic), so the panic
			// comes from a goroutine of its own, which ends the process.
			go panic(ch.what + " did not return in 10 s: close holds the lock the wait's look needs")
			select {}
		}
	}
}

// waited turns a wait's result into a channel closed when it comes.
func waited(errs <-chan error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		<-errs
		close(done)
	}()
	return done
}
