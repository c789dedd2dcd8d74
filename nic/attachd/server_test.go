package attachd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// mustHaveAttach skips t unless attach mode works here, as
// nictest.MustHaveAttach does for tests that can import nictest (which
// imports this package).
func mustHaveAttach(t testing.TB) {
	t.Helper()
	if err := nic.AttachSupported(); err != nil {
		t.Skipf("attach mode is not supported here: %v", err)
	}
}

// serveTest serves a device on loopback to attached processes from the
// test process, with cfg, and returns the server and its socket's path.
func serveTest(t testing.TB, cfg Config) (*nic.Device, *Server, string) {
	t.Helper()
	return serveTestWith(t, cfg, nil)
}

// serveTestWith is serveTest with setup called on the server before it
// serves.
func serveTestWith(t testing.TB, cfg Config, setup func(*Server)) (*nic.Device, *Server, string) {
	t.Helper()
	mustHaveAttach(t)
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(dev, cfg)
	if setup != nil {
		setup(srv)
	}
	path := filepath.Join(t.TempDir(), "softnic.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		srv.Close()
		dev.Close()
	})
	return dev, srv, path
}

// loop is two RC QPs of one attached device connected to each other
// through the daemon's device, with a CQ each and a region.
type loop struct {
	dev      *nic.Device
	pd       *nic.PD
	m        *nic.MR
	a, b     *nic.QP
	acq, bcq *nic.CQ
	srq      *nic.SRQ
}

func newLoop(t *testing.T, path string, withSRQ bool) *loop {
	t.Helper()
	dev, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	l := &loop{dev: dev}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	l.pd, err = dev.AllocPD()
	must(err)
	l.acq, err = dev.CreateCQ(16)
	must(err)
	l.bcq, err = dev.CreateCQ(16)
	must(err)
	l.m, err = l.pd.AllocMR(1<<16, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	must(err)
	cfg := nic.QPConfig{SendCQ: l.bcq, MaxSendWR: 8, MaxRecvWR: 8}
	if withSRQ {
		l.srq, err = l.pd.CreateSRQ(8, 1)
		must(err)
		cfg.SRQ = l.srq
	}
	l.a, err = l.pd.CreateQP(nic.QPConfig{SendCQ: l.acq, MaxSendWR: 8, MaxRecvWR: 8})
	must(err)
	l.b, err = l.pd.CreateQP(cfg)
	must(err)
	must(l.a.Connect(dev.Addr(), l.b.Num(), nic.ConnectOptions{}))
	must(l.b.Connect(dev.Addr(), l.a.Num(), nic.ConnectOptions{}))
	return l
}

func waitWC(t *testing.T, cq *nic.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return wc[0]
}

// write makes a signaled WRITE from a to b and returns its completion.
func (l *loop) write(t *testing.T, id uint64) verbs.WC {
	t.Helper()
	wr := verbs.SendWR{ID: id, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{l.m.SGE(0, 64)}, RemoteAddr: l.m.Addr() + 4096, RKey: l.m.RKey()}
	if err := l.a.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	return waitWC(t, l.acq)
}

// waitState waits until q is in state st.
func waitState(t *testing.T, q *nic.QP, st verbs.State) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); q.Status().State != st; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x is %s, want %s", q.Num(), q.Status().State, st)
		}
	}
}

// hostedOf returns the daemon's side of the attached process's QP q.
func hostedOf(t testing.TB, srv *Server, q *nic.QP) *hostedQP {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for s := range srv.sessions {
		if h := s.qpByNum(q.Num()); h != nil {
			return h
		}
	}
	t.Fatalf("no attached QP %#x", q.Num())
	return nil
}

// ring rings h's doorbell, as its process does: it marks h in the
// doorbell page and signals its doorbell eventfd.
func ring(h *hostedQP) {
	h.s.bell.db.Mark(h.slot)
	shm.Signal(h.s.bell.fd)
}

// spoilSend returns a spoiler of TestAttachedQueueCorruption that posts a
// WRITE of id on the loop's QP a with byte at of its send WQE set to v.
func spoilSend(id uint64, at int, v byte) func(*testing.T, *loop, *hostedQP, *hostedQP) (*nic.CQ, uint64) {
	return func(t *testing.T, l *loop, a, _ *hostedQP) (*nic.CQ, uint64) {
		prod := a.SendRing().Producer().Load()
		slot := a.SendRing().Slot(prod)
		shm.EncodeSend(slot, &verbs.SendWR{ID: id, Opcode: verbs.WRWrite})
		slot[at] = v
		a.SendRing().Producer().Store(prod + 1)
		return l.acq, id
	}
}

// TestAttachedQueueCorruption: garbage in a shared queue, written as a
// buggy or hostile process could, fails the QP that owns the queue and
// nothing else: the QP completes LOC_QP_OP_ERR (or, with its completion
// ring spoilt, overflows) and enters the error state, while another QP of
// the process and another process go on.
func TestAttachedQueueCorruption(t *testing.T) {
	for _, tc := range []struct {
		name  string
		srq   bool
		spoil func(t *testing.T, l *loop, a, b *hostedQP) (cq *nic.CQ, id uint64)
	}{
		{"send WQE with an unknown opcode", false, spoilSend(0xbad, 8, 99)},
		{"send WQE with more SGEs than the QP takes", false, spoilSend(0xbad2, 10, 200)},
		{"send producer index beyond the ring", false, func(t *testing.T, l *loop, a, _ *hostedQP) (*nic.CQ, uint64) {
			a.SendRing().Producer().Store(a.SendRing().Producer().Load() + 1000)
			return l.acq, 0
		}},
		{"receive WQE with reserved bytes set", false, func(t *testing.T, l *loop, _, b *hostedQP) (*nic.CQ, uint64) {
			prod := b.RecvRing().Producer().Load()
			slot := b.RecvRing().Slot(prod)
			shm.EncodeRecv(slot, &verbs.RecvWR{ID: 0xbad3})
			slot[15] = 1
			b.RecvRing().Producer().Store(prod + 1)
			return l.bcq, 0xbad3
		}},
		{"SRQ producer index beyond the ring", true, func(t *testing.T, l *loop, _, b *hostedQP) (*nic.CQ, uint64) {
			srq, err := lookup[*hostedSRQ](b.s, b.cfg.SRQ)
			if err != nil {
				t.Fatal(err)
			}
			srq.Ring().Producer().Store(srq.Ring().Producer().Load() + 77)
			// The daemon takes SRQ receives as packets arrive: send one.
			wr := verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{l.m.SGE(0, 8)}}
			if err := l.a.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			return l.bcq, 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv, path := serveTest(t, Config{})
			l, other := newLoop(t, path, tc.srq), newLoop(t, path, false)
			if wc := l.write(t, 1); wc.Status != verbs.Success {
				t.Fatalf("before: %v", wc.String())
			}
			// The rings are in memory the process and the daemon both map:
			// the test writes into them from the daemon's side what the
			// process could have written from its own.
			a, b := hostedOf(t, srv, l.a), hostedOf(t, srv, l.b)
			cq, id := tc.spoil(t, l, a, b)
			victim, hv := l.a, a
			if cq == l.bcq {
				victim, hv = l.b, b
			}
			ring(hv) // whatever the daemon asked for
			var wc verbs.WC
			for wc = waitWC(t, cq); wc.Status == verbs.WRFlushErr; wc = waitWC(t, cq) {
			}
			if wc.Status != verbs.LocQPOpErr || wc.ID != id || wc.QPN != victim.Num() {
				t.Errorf("completion %v of QP %#x, want LOC_QP_OP_ERR of WR %#x of QP %#x", wc.String(), wc.QPN, id, victim.Num())
			}
			waitState(t, victim, verbs.Err)
			if wc := other.write(t, 2); wc.Status != verbs.Success {
				t.Errorf("another process after the corruption: %v", wc.String())
			}
		})
	}
}

// TestAttachedCQConsumerSpoilt: a completion ring whose consumer index the
// process spoils looks full to the daemon: the completion is lost, the
// ring says so (ErrOverflow once drained) and the QP that completed enters
// the error state, as a CQ overflow does to an embedded device's QP.
func TestAttachedCQConsumerSpoilt(t *testing.T) {
	_, srv, path := serveTest(t, Config{})
	l := newLoop(t, path, false)
	if wc := l.write(t, 1); wc.Status != verbs.Success {
		t.Fatalf("before: %v", wc.String())
	}
	a := hostedOf(t, srv, l.a)
	scq, err := lookup[*hostedCQ](a.s, a.cfg.SendCQ)
	if err != nil {
		t.Fatal(err)
	}
	ring := scq.Ring()
	ring.Consumer().Store(ring.Consumer().Load() + 12345)
	wr := verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{l.m.SGE(0, 8)}, RemoteAddr: l.m.Addr(), RKey: l.m.RKey()}
	if err := l.a.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	waitState(t, l.a, verbs.Err)
	var wcs [4]verbs.WC
	if n, err := l.acq.Poll(wcs[:]); n != 0 || !errors.Is(err, nic.ErrOverflow) {
		t.Errorf("Poll after the overflow: %d completions, %v; want ErrOverflow", n, err)
	}
}

// TestAttachRefusedRegionUncharged: an alloc_mr refused at the process's
// object limit leaves its shared-memory account as it was. (The refused
// region's memory was once uncharged twice, so that a process at its
// object limit could drive its account below zero and then map more than
// its limit.)
func TestAttachRefusedRegionUncharged(t *testing.T) {
	limits := quota.DefaultLimits(quota.Probe(1 << 14))
	limits[quota.Process][quota.Objects] = 2
	_, srv, path := serveTest(t, Config{Limits: &limits})
	dev, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.AllocMR(1<<16, mr.LocalWrite); err != nil {
		t.Fatal(err)
	}
	account := func() int64 { return srv.Usage().Total[quota.Memory] }
	before := account()
	for range 3 {
		if _, err := pd.AllocMR(1<<16, mr.LocalWrite); !errors.Is(err, nic.ErrNoMem) {
			t.Fatalf("AllocMR past the object limit: %v, want ErrNoMem", err)
		}
	}
	if after := account(); after != before {
		t.Errorf("the process's shared memory account went from %d to %d bytes over refused regions", before, after)
	}
}

// messageCounter counts the log lines, written by a slog handler, that
// hold msg.
type messageCounter struct {
	msg []byte
	n   atomic.Int32
}

func (c *messageCounter) Write(line []byte) (int, error) {
	if bytes.Contains(line, c.msg) {
		c.n.Add(1)
	}
	return len(line), nil
}

// TestAttachedBadWQEsLoggedOnce: every bad work request of a QP completes
// LOC_QP_OP_ERR, but the QP's failure is counted and logged once: a
// process that keeps filling its ring with garbage must not flood the
// daemon's log.
func TestAttachedBadWQEsLoggedOnce(t *testing.T) {
	var warned messageCounter
	warned.msg = []byte("attached QP failed")
	_, srv, path := serveTest(t, Config{Logger: slog.New(slog.NewTextHandler(&warned, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	l := newLoop(t, path, false)
	h := hostedOf(t, srv, l.a)
	const bad = 6
	prod := h.SendRing().Producer().Load()
	for i := range bad {
		slot := h.SendRing().Slot(prod)
		shm.EncodeSend(slot, &verbs.SendWR{ID: uint64(0xbad0 + i), Opcode: verbs.WRWrite})
		slot[8] = 99 // no such opcode
		prod++
	}
	h.SendRing().Producer().Store(prod)
	ring(h)
	for i := range bad {
		if wc := waitWC(t, l.acq); wc.Status != verbs.LocQPOpErr || wc.ID != uint64(0xbad0+i) {
			t.Errorf("completion %d: %v, want LOC_QP_OP_ERR of WR %#x", i, wc.String(), 0xbad0+i)
		}
	}
	if n := warned.n.Load(); n != 1 {
		t.Errorf("%d warnings logged for the failed QP, want 1", n)
	}
	counters := srv.Processes()[0].Counters
	if i := slices.IndexFunc(counters, func(c nic.CounterValue) bool { return c.Name == "bad_queues" }); i < 0 || counters[i].Value != 1 {
		t.Errorf("counters %v, want bad_queues = 1", counters)
	}
}

// TestHostedQPCountsRingWRs: the daemon's view of an attached QP counts
// the work requests still in its rings, as the process's Status does:
// receives wait there until a packet comes.
func TestHostedQPCountsRingWRs(t *testing.T) {
	dev, _, path := serveTest(t, Config{})
	l := newLoop(t, path, false)
	for i := range 3 {
		if err := l.b.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{l.m.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	var hosted *nic.QP
	for _, q := range dev.QPs() {
		if q.Num() == l.b.Num() {
			hosted = q
		}
	}
	if hosted == nil {
		t.Fatalf("no QP %#x at the daemon", l.b.Num())
	}
	if got, want := hosted.Status().RecvQueued, l.b.Status().RecvQueued; got != 3 || want != 3 {
		t.Errorf("receives queued: %d at the daemon, %d in the process; want 3 and 3", got, want)
	}
}

// emfileListener fails its first accepts with EMFILE, as a process out of
// descriptors does.
type emfileListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServeOutlastsEMFILE: Serve waits out a process out of descriptors,
// counts it, and attaches the next process; it ends only when its
// listener closes.
func TestServeOutlastsEMFILE(t *testing.T) {
	mustHaveAttach(t)
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srv := NewServer(dev, Config{})
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "softnic.sock")
	ul, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l := &emfileListener{Listener: ul}
	l.fail.Store(3)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	att, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatalf("attach after three EMFILEs: %v", err)
	}
	att.Close()
	if n := srv.AcceptErrors(); n != 3 {
		t.Errorf("AcceptErrors = %d, want 3", n)
	}
	l.Close()
	if err := <-served; err == nil {
		t.Error("Serve returned nil once its listener closed")
	}
}

// TestAttachListenBacklogCut: a listener asking for an absurd backlog gets
// the most the daemon gives, charged to the process, instead of a channel
// of that many slots (which once ended the daemon).
func TestAttachListenBacklogCut(t *testing.T) {
	_, srv, path := serveTest(t, Config{})
	lp := newLoop(t, path, false)
	l, err := lp.dev.Listen(0, nic.ListenOptions{PD: lp.pd, QP: nic.QPConfig{SendCQ: lp.acq}, Backlog: 1 << 40})
	if err != nil {
		t.Fatalf("Listen with a backlog of 2^40: %v", err)
	}
	heap := srv.Usage().Total[quota.Heap]
	l.Close()
	if after := srv.Usage().Total[quota.Heap]; heap-after < 4096<<10 {
		t.Errorf("the listener's backlog was charged %d bytes, want 4096 requests' worth", heap-after)
	}
}
