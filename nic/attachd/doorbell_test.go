package attachd

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// onlySession returns the one session of srv.
func onlySession(t *testing.T, srv *Server) *session {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.sessions) != 1 {
		t.Fatalf("%d sessions, want 1", len(srv.sessions))
	}
	for s := range srv.sessions {
		return s
	}
	return nil
}

// TestDoorbellLooksAtMarkedQPs: a doorbell has the daemon look at the QPs
// marked in the page and no other, however many the process has; a mark
// of no QP, or of a QP with nothing new, counts as a look for nothing.
func TestDoorbellLooksAtMarkedQPs(t *testing.T) {
	_, srv, path := serveTest(t, Config{})
	l := newLoop(t, path, false)
	const others = 100
	for range others {
		if _, err := l.pd.CreateQP(nic.QPConfig{SendCQ: l.acq}); err != nil {
			t.Fatal(err)
		}
	}
	if wc := l.write(t, 1); wc.Status != verbs.Success {
		t.Fatalf("before: %v", wc.String())
	}
	s := onlySession(t, srv)
	wr := verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{l.m.SGE(0, 64)}, RemoteAddr: l.m.Addr() + 4096, RKey: l.m.RKey()}
	if err := l.a.PostSendDeferred(&wr); err != nil { // in the ring, without a doorbell
		t.Fatal(err)
	}
	// The doorbell goroutine sleeps once it has asked for a doorbell and
	// looked once more; then nothing wakes it.
	for s.bell.needWake.Load() == 0 {
		runtime.Gosched()
	}
	// Three marks: the QP with the WRITE (which the device may have taken
	// already, running the QP for a late ACK), an idle QP and no QP.
	var worked, idle int
	for try := 0; try < 100; try++ { // the goroutine may have been finishing its last look
		for _, slot := range []uint32{hostedOf(t, srv, l.a).slot, hostedOf(t, srv, l.b).slot, shm.MaxSlots - 1} {
			s.bell.db.Mark(slot)
		}
		if worked, idle, _ = s.scan(true); worked+idle == 3 {
			break
		}
	}
	if worked+idle != 3 || worked > 1 {
		t.Errorf("the daemon found %d QPs with work and %d without for 3 marks among %d QPs; want 3 looks, 1 with work at most", worked, idle, others+2)
	}
	if wc := waitWC(t, l.acq); wc.Status != verbs.Success || wc.ID != 2 {
		t.Errorf("the WRITE posted without a doorbell: %v", wc.String())
	}
}

// TestDoorbellFloodThrottled: a process that signals its doorbell in a
// loop without posting wakes the daemon no more than the budget allows
// (of limits below the defaults, which the server must have taken from
// its Config), is counted, and then finds its doorbell heard again: its
// posts complete, as another process's do throughout.
func TestDoorbellFloodThrottled(t *testing.T) {
	limits := DoorbellLimits{Burst: 64, Rate: 250}
	_, srv, path := serveTest(t, Config{Doorbell: limits})
	flooder := newLoop(t, path, false)
	s := onlySession(t, srv)
	other := newLoop(t, path, false)
	began := time.Now()
	stop := make(chan struct{})
	flooded := make(chan int)
	go func() {
		n := 0
		for ; ; n++ {
			select {
			case <-stop:
				flooded <- n
				return
			default:
				shm.Signal(s.bell.fd) // the process's doorbell eventfd
			}
		}
	}()
	// The flood goes on until the daemon has stopped hearing it for a
	// while, however fast this machine floods, and 100 ms more.
	var throttled time.Time
	for id := uint64(1); throttled.IsZero() || time.Since(throttled) < 100*time.Millisecond; id++ {
		if wc := other.write(t, id); wc.Status != verbs.Success {
			t.Fatalf("another process's WRITE during the flood: %v", wc.String())
		}
		if throttled.IsZero() && s.cnt[cntDoorbellsThrottled].Load() > 0 {
			throttled = time.Now()
		}
		if time.Since(began) > 20*time.Second {
			t.Fatalf("a flood of 20 s is not throttled: %d wakeups", s.cnt[cntDoorbells].Load())
		}
	}
	close(stop)
	signals := <-flooded
	took := time.Since(began)
	c := map[string]uint64{}
	for _, x := range s.describe().Counters {
		c[x.Name] = x.Value
	}
	t.Logf("%d signals in %v: %v", signals, took, c)
	if most := uint64(limits.Burst) + uint64(took.Seconds()*float64(limits.Rate)) + 1; c["doorbells"] > most {
		t.Errorf("the daemon woke %d times for the flood in %v, more than %d", c["doorbells"], took, most)
	}
	if c["doorbells_empty"] == 0 || c["doorbells_throttled"] == 0 || c["doorbell_signals"] < c["doorbells"] {
		t.Errorf("the flood is not counted as such: %v", c)
	}
	if wc := flooder.write(t, 1); wc.Status != verbs.Success {
		t.Errorf("the flooder's own WRITE after the flood: %v", wc.String())
	}
}

// The doorbell goroutine's wait (await) ends at once, taking the signals
// that came before it, when a QP is marked or the daemon poked it, and
// otherwise when the process signals, with the signals it took; once the
// process detached (stop), it fails.
func TestDoorbellAwait(t *testing.T) {
	mustHaveAttach(t)
	var b doorbell
	if err := b.open(); err != nil {
		t.Fatal(err)
	}
	defer b.close()
	raw, err := b.listen()
	if err != nil || raw == nil {
		t.Fatalf("listen: %v, %v", raw, err)
	}
	var signals atomic.Uint64
	b.db.Mark(3)
	shm.Signal(b.fd) // the process's
	if rang, err := b.await(raw, &signals); signals.Load() != 1 || rang || err != nil {
		t.Errorf("await with a QP marked: %d signals, rang %v, %v; want the signal taken, not rung, nil", signals.Load(), rang, err)
	}
	for slot := range b.db.Take {
		if slot != 3 {
			t.Errorf("marked slot %d, want 3", slot)
		}
	}
	signals.Store(0)
	b.poke()
	if rang, err := b.await(raw, &signals); signals.Load() != 1 || rang || err != nil {
		t.Errorf("await after a poke: %d signals, rang %v, %v; want the poke's taken, not rung, nil", signals.Load(), rang, err)
	}
	// A signal that came before the wait's look is taken before it (a post
	// marks its QP first, which the look sees): the process signals until
	// the wait ends, with every signal made.
	stop := make(chan struct{})
	signalled := make(chan uint64)
	go func() {
		n := uint64(0)
		for {
			select {
			case <-stop:
				signalled <- n
				return
			case <-time.After(time.Millisecond):
				shm.Signal(b.fd)
				n++
			}
		}
	}()
	signals.Store(0)
	rang, err := b.await(raw, &signals)
	close(stop)
	made := <-signalled
	if n := signals.Load(); err != nil || !rang || n == 0 || n > made {
		t.Errorf("await while signalled: %d signals, rang %v, %v; want 1 to %d, rung", n, rang, err, made)
	}
	done := make(chan error)
	go func() {
		_, err := b.await(raw, nil)
		done <- err
	}()
	b.stop()
	if err := <-done; err == nil {
		t.Error("await after stop: no error")
	}
	if raw, err := b.listen(); raw != nil || err != nil {
		t.Errorf("listen after stop: %v, %v; want nil, nil", raw, err)
	}
}

// TestDoorbellSpinsAfterWork: after it took a process's work requests,
// the doorbell goroutine stays awake (DoorbellLimits.Spin), so that the
// process's next post, made as soon as its completion came, needs no
// doorbell signal and wakes nothing; once the process stops posting, the
// goroutine asks for a doorbell again and sleeps when the spin is over,
// and a post then rings and completes. The spin is long here (a second)
// so that a loaded machine does not end it between two WRITEs.
func TestDoorbellSpinsAfterWork(t *testing.T) {
	for _, spin := range []time.Duration{time.Second, 20 * time.Millisecond} {
		t.Run(spin.String(), func(t *testing.T) {
			_, srv, path := serveTest(t, Config{Doorbell: DoorbellLimits{Spin: spin}})
			l := newLoop(t, path, false)
			s := onlySession(t, srv)
			if wc := l.write(t, 1); wc.Status != verbs.Success {
				t.Fatalf("the first WRITE: %v", wc.String())
			}
			const writes = 20
			signals := s.cnt[cntDoorbellSignals].Load()
			start := time.Now()
			for id := uint64(2); id < 2+writes; id++ {
				if wc := l.write(t, id); wc.Status != verbs.Success || wc.ID != id {
					t.Fatalf("WRITE %d: %v", id, wc.String())
				}
			}
			if n := s.cnt[cntDoorbellSignals].Load() - signals; spin == time.Second && time.Since(start) < spin && n != 0 {
				t.Errorf("%d WRITEs posted one after the other's completion rang %d times; want none, the daemon awake", writes, n)
			}
			// Nothing posted: the doorbell goroutine stops spinning and
			// asks for a doorbell, within the spin.
			for s.bell.needWake.Load() == 0 {
				if time.Since(start) > spin+10*time.Second {
					t.Fatalf("the doorbell goroutine still awake %v after the last post", time.Since(start))
				}
				runtime.Gosched()
			}
			asleep(s)
			signals = s.cnt[cntDoorbellSignals].Load()
			if wc := l.write(t, 100); wc.Status != verbs.Success {
				t.Fatalf("a WRITE to the sleeping daemon: %v", wc.String())
			}
			if !signalCounted(s, signals) {
				t.Error("a WRITE posted to the sleeping daemon rang no doorbell")
			}
		})
	}
}

// pollWatch is the daemon's device, with whether the doorbell goroutine
// polls it (hooks.Device.Poll) and has not handed its socket back to the
// reader (StopPolling).
type pollWatch struct {
	hooks.Device
	polls   atomic.Int64
	polling atomic.Bool
}

func (w *pollWatch) Poll() {
	w.polls.Add(1)
	w.polling.Store(true)
	w.Device.Poll()
}

func (w *pollWatch) StopPolling() {
	w.polling.Store(false)
	w.Device.StopPolling()
}

// TestDoorbellSpinHandsBackTheSocket: the doorbell goroutine polls the
// device while it spins, which keeps the device's reader off the socket,
// and hands the socket back before it sleeps: asleep with the device
// polled, it would leave what arrives next to a parked reader, which
// looks again only pollIdle later.
func TestDoorbellSpinHandsBackTheSocket(t *testing.T) {
	w := &pollWatch{}
	_, srv, path := serveTestWith(t, Config{Doorbell: DoorbellLimits{Spin: 20 * time.Millisecond}}, func(srv *Server) {
		w.Device = srv.edev
		srv.edev = w
	})
	l := newLoop(t, path, false)
	s := onlySession(t, srv)
	for id := uint64(1); id <= 5; id++ {
		if wc := l.write(t, id); wc.Status != verbs.Success {
			t.Fatalf("WRITE %d: %v", id, wc.String())
		}
	}
	asleep(s)
	if w.polls.Load() == 0 {
		t.Error("the doorbell goroutine spun after the last WRITE without polling the device")
	}
	// The goroutine sets NeedWake, looks at the marks once more, then
	// hands the socket back and sleeps: on a loaded machine it can be
	// descheduled in between.
	for deadline := time.Now().Add(10 * time.Second); w.polling.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the doorbell goroutine sleeps with the device polled, its reader kept off the socket")
		}
		runtime.Gosched()
	}
}

// TestDoorbellNoSpin: with Spin negative the doorbell goroutine sleeps as
// soon as it has taken the process's work requests, and a process that
// posts after each completion rings for each.
func TestDoorbellNoSpin(t *testing.T) {
	_, srv, path := serveTest(t, Config{Doorbell: DoorbellLimits{Spin: -1}})
	l := newLoop(t, path, false)
	s := onlySession(t, srv)
	// The doorbell page starts with NeedWake set, before the goroutine's
	// first look clears it: the first WRITE is not counted.
	if wc := l.write(t, 1); wc.Status != verbs.Success {
		t.Fatalf("the first WRITE: %v", wc.String())
	}
	for id := uint64(2); id <= 6; id++ {
		asleep(s)
		signals := s.cnt[cntDoorbellSignals].Load()
		if wc := l.write(t, id); wc.Status != verbs.Success {
			t.Fatalf("WRITE %d: %v", id, wc.String())
		}
		if !signalCounted(s, signals) {
			t.Errorf("WRITE %d rang no doorbell, the daemon spinning", id)
		}
	}
}

// asleep returns once s's doorbell goroutine sleeps: NeedWake set, and
// kept for 20 ms with no work request taken. The goroutine sets NeedWake
// before its last look at the marks, and a post that comes before that
// look is taken without a doorbell, the daemon awake; on a loaded machine
// the goroutine can be descheduled between the two.
func asleep(s *session) {
	for {
		for s.bell.needWake.Load() == 0 {
			runtime.Gosched()
		}
		work, since := s.work(), time.Now()
		for s.bell.needWake.Load() != 0 && s.work() == work {
			if time.Since(since) > 20*time.Millisecond {
				return
			}
			runtime.Gosched()
		}
	}
}

// signalCounted reports whether the count of s's doorbell signals moves
// past before within 10 seconds. The daemon counts a signal when its wait
// takes it, which can be after the WRITE that signalled has
// completed: a goroutine that set NeedWake takes the process's post in
// its last look before it sleeps, and takes the signal in the wait that
// follows.
func signalCounted(s *session, before uint64) bool {
	deadline := time.Now().Add(10 * time.Second)
	for s.cnt[cntDoorbellSignals].Load() == before {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}
