package nic_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/mr/keyspace"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// daemon is a device served to attached processes over a unix socket, as
// softnic serve does, inside the test process.
type daemon struct {
	dev  *nic.Device
	srv  *attachd.Server
	path string
}

func startDaemon(t testing.TB, cfg nic.Config) *daemon {
	t.Helper()
	return startServer(t, cfg, attachd.Config{})
}

// startServer is startDaemon with the attach server configured by scfg.
func startServer(t testing.TB, cfg nic.Config, scfg attachd.Config) *daemon {
	t.Helper()
	nictest.MustHaveAttach(t)
	if !cfg.Addr.IsValid() {
		cfg.Addr = loopback
	}
	cfg.Embed = true
	dev, err := nic.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{dev: dev, srv: attachd.NewServer(dev, scfg), path: filepath.Join(t.TempDir(), "softnic.sock")}
	l, err := net.Listen("unix", d.path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		d.srv.Serve(l)
	}()
	t.Cleanup(func() {
		l.Close()
		<-served
		d.srv.Close()
		dev.Close()
	})
	return d
}

func attachTo(t testing.TB, d *daemon) *nic.Device {
	t.Helper()
	dev, err := nic.Open(nic.Config{Attach: d.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// attachedEnd is end with its device attached to a daemon, and its region
// in shared memory.
func attachedEnd(t testing.TB, d *daemon) *end {
	t.Helper()
	return attachedEndOn(t, attachTo(t, d))
}

// attachedEndOn is attachedEnd on an attached device.
func attachedEndOn(t testing.TB, dev *nic.Device) *end {
	t.Helper()
	e := &end{dev: dev}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.AllocMR(1<<20, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(nic.QPConfig{SendCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	return e
}

// attachedToEmbedded returns a daemon, an end attached to it and an
// embedded end, connected to each other.
func attachedToEmbedded(t testing.TB) (*daemon, *end, *end) {
	t.Helper()
	d := startDaemon(t, nic.Config{})
	a := attachedEnd(t, d)
	b := openEnd(t, nic.Config{})
	connectEnds(t, a, b)
	return d, a, b
}

func connectEnds(t testing.TB, a, b *end) {
	t.Helper()
	oa := nic.ConnectOptions{LocalPSN: 100, RemotePSN: 2000}
	ob := nic.ConnectOptions{LocalPSN: 2000, RemotePSN: 100}
	if err := a.qp.Connect(b.dev.Addr(), b.qp.Num(), oa); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.dev.Addr(), a.qp.Num(), ob); err != nil {
		t.Fatal(err)
	}
}

// newQPPair makes a QP on a with cfg (its CQ a's unless cfg names one)
// and one on b, and connects them.
func newQPPair(t testing.TB, a, b *end, cfg nic.QPConfig) (*nic.QP, *nic.QP) {
	t.Helper()
	if cfg.SendCQ == nil {
		cfg.SendCQ = a.cq
	}
	q, err := a.pd.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bq, err := b.pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Connect(b.dev.Addr(), bq.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := bq.Connect(a.dev.Addr(), q.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	return q, bq
}

func TestAttachedOperations(t *testing.T) {
	nictest.CheckLeaks(t)
	_, a, b := attachedToEmbedded(t)
	exerciseOperations(t, a, b)
}

// Between two processes attached to one daemon, the goroutine that sends
// a process's packets to the daemon's own device reads the device's
// socket and processes what it holds (hooks.Device.Drive), beside the
// device's reader, which waits for the socket: with both processes
// writing to each other at once, every WRITE arrives and completes, and
// every packet the device sent it took once, none resent (the ACK
// timeout is a minute, past the test's wait).
func TestAttachDrivesItsOwnPackets(t *testing.T) {
	nictest.CheckLeaks(t)
	d := startDaemon(t, nic.Config{})
	a, b := attachedEnd(t, d), attachedEnd(t, d)
	if err := a.qp.Connect(b.dev.Addr(), b.qp.Num(), nic.ConnectOptions{Timeout: 24}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.dev.Addr(), a.qp.Num(), nic.ConnectOptions{Timeout: 24}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n, size = 200, 64
	// Each writes from the first n*size bytes of its region to the next
	// n*size of the other's, a pattern of its own.
	writes := func(from, to *end, seed int) error {
		for i := range n {
			fill(from.mr.Bytes()[i*size:(i+1)*size], seed+i)
			wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{from.mr.SGE(i*size, size)},
				RemoteAddr: to.mr.Addr() + uint64((n+i)*size), RKey: to.mr.RKey()}
			if err := from.qp.PostSend(&wr); err != nil {
				return err
			}
			var wc [1]verbs.WC
			if _, err := from.cq.Wait(ctx, wc[:]); err != nil {
				return fmt.Errorf("WRITE %d: %w", i, err)
			}
			if wc[0].Status != verbs.Success || wc[0].ID != uint64(i) {
				return fmt.Errorf("WRITE %d: %v", i, wc[0].String())
			}
		}
		return nil
	}
	done := make(chan error)
	go func() { done <- writes(b, a, n) }()
	if err := writes(a, b, 0); err != nil {
		t.Error(err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
	for _, e := range [][2]*end{{a, b}, {b, a}} {
		if !bytes.Equal(e[1].mr.Bytes()[n*size:2*n*size], e[0].mr.Bytes()[:n*size]) {
			t.Error("the WRITEs' data did not arrive")
		}
	}
	sent, rcvd := counter(t, d.dev, "sent_pkts"), counter(t, d.dev, "rcvd_pkts")
	if sent < 2*n || rcvd != sent {
		t.Errorf("the daemon's device sent %d packets and took %d; want as many, at least %d", sent, rcvd, 2*n)
	}
	for _, c := range []string{"retransmitted_pkts", "duplicate_request", "duplicate_response"} {
		if v := counter(t, d.dev, c); v != 0 {
			t.Errorf("%s = %d, want 0", c, v)
		}
	}
}

func TestAttachRefusesPrivateMemory(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	dev := attachTo(t, d)
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 4096), mr.LocalWrite); !errors.Is(err, nic.ErrFault) {
		t.Errorf("RegMR of heap memory: %v, want ErrFault", err)
	}
	m, err := pd.AllocMR(8192, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	part, err := pd.RegMR(m.Bytes()[4096:6000], mr.LocalWrite|mr.RemoteWrite)
	if err != nil {
		t.Fatalf("RegMR of part of an AllocMR region: %v", err)
	}
	if part.Len() != 6000-4096 || part.LKey() == m.LKey() || part.Addr() != m.Addr()+4096 {
		t.Errorf("part: %d bytes at %#x key %#x; whole: at %#x key %#x", part.Len(), part.Addr(), part.LKey(), m.Addr(), m.LKey())
	}
	// The part keeps the memory after the whole is deregistered, as an
	// embedded arena stays mapped under its regions.
	if err := m.Dereg(); err != nil {
		t.Fatal(err)
	}
	part.Bytes()[0] = 1
	if _, err := pd.RegMR(m.Bytes()[:64], mr.LocalWrite); !errors.Is(err, nic.ErrFault) {
		t.Errorf("RegMR of memory whose AllocMR region is gone: %v, want ErrFault", err)
	}
	if err := part.Dereg(); err != nil {
		t.Fatal(err)
	}
}

func TestAttachConfig(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	for _, tc := range []struct {
		name     string
		cfg      nic.Config
		env      string
		want     error // nil: opens; attached says which way
		attached bool
	}{
		{"Attach", nic.Config{Attach: d.path}, "", nil, true},
		{"Attach and Embed", nic.Config{Attach: d.path, Embed: true}, "", nic.ErrInvalid, false},
		{"Attach with an address of its own", nic.Config{Attach: d.path, Addr: loopback}, "", nic.ErrInvalid, false},
		{"Attach with an MTU", nic.Config{Attach: d.path, MTU: 1024}, "", nic.ErrInvalid, false},
		{"Attach with busy polling", nic.Config{Attach: d.path, BusyPoll: time.Millisecond}, "", nic.ErrInvalid, false},
		{"Attach with a wait spin", nic.Config{Attach: d.path, WaitSpin: time.Millisecond}, "", nil, true},
		{"Attach with a wait spin past 1s", nic.Config{Attach: d.path, WaitSpin: 2 * time.Second}, "", nic.ErrInvalid, false},
		{"SOFTNIC_SOCKET", nic.Config{}, d.path, nil, true},
		{"SOFTNIC_SOCKET ignores embedded fields", nic.Config{Addr: loopback, MTU: 1024}, d.path, nil, true},
		{"Embed wins over SOFTNIC_SOCKET", nic.Config{Embed: true, Addr: loopback}, d.path, nil, false},
		{"Attach wins over SOFTNIC_SOCKET", nic.Config{Attach: d.path}, filepath.Join(t.TempDir(), "nothing"), nil, true},
		{"no daemon there", nic.Config{Attach: filepath.Join(t.TempDir(), "nothing")}, "", syscall.ENOENT, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(nic.EnvSocket, tc.env)
			dev, err := nic.Open(tc.cfg)
			if !errors.Is(err, tc.want) || (err != nil) != (tc.want != nil) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			defer dev.Close()
			if attached := dev.Memory() == nil; attached != tc.attached {
				t.Errorf("attached %v, want %v", attached, tc.attached)
			}
			if tc.attached && (dev.Addr() != d.dev.Addr() || dev.MTU() != d.dev.MTU()) {
				t.Errorf("attached device at %v MTU %d, the daemon's at %v MTU %d", dev.Addr(), dev.MTU(), d.dev.Addr(), d.dev.MTU())
			}
		})
	}
}

// TestAttachIsolation: two processes on one daemon cannot use each
// other's keys: the daemon's device checks a process's lkeys and rkeys
// against the PDs it owns.
func TestAttachIsolation(t *testing.T) {
	nictest.CheckLeaks(t)
	d := startDaemon(t, nic.Config{})
	a, b := attachedEnd(t, d), attachedEnd(t, d)
	// b's QP connected to a second QP of b's own.
	q2, err := b.pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(d.dev.Addr(), q2.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q2.Connect(d.dev.Addr(), b.qp.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		wr   verbs.SendWR
		want verbs.WCStatus
	}{
		{"its own keys", verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{b.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()}, verbs.Success},
		{"another process's lkey", verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()}, verbs.LocProtErr},
		{"another process's rkey", verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{b.mr.SGE(0, 8)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}, verbs.RemAccessErr},
	} {
		if tc.want != verbs.Success {
			// The previous case left the QPs usable only if it succeeded.
			q := b.qp
			for _, x := range []*nic.QP{q, q2} {
				x.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState)
			}
			b.qp.Connect(d.dev.Addr(), q2.Num(), nic.ConnectOptions{})
			q2.Connect(d.dev.Addr(), b.qp.Num(), nic.ConnectOptions{})
		}
		tc.wr.Flags = verbs.Signaled
		if err := b.qp.PostSend(&tc.wr); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if wc := nictest.Wait(t, b.cq); wc.Status != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, &wc, tc.want)
		}
	}
	if !bytes.Equal(a.mr.Bytes()[:8], make([]byte, 8)) {
		t.Error("another process wrote into a's region")
	}
}

// TestAttachDetachCleansUp: when an attached process closes its device
// (or exits), the daemon destroys everything it made: its connections are
// disconnected (the peer sees a DREQ), its QPs and regions are gone.
func TestAttachDetachCleansUp(t *testing.T) {
	nictest.CheckLeaks(t)
	d := startDaemon(t, nic.Config{})
	regionsBefore := countRegions(d.dev)
	peer := openCMEnd(t, nic.Config{})
	l := peer.listen(t, 0)
	dev := attachTo(t, d)
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	region, err := pd.AllocMR(1<<16, mr.LocalWrite|mr.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pd.AllocMW(mr.WindowType2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.CreateQP(nic.QPConfig{SendCQ: cq}); err != nil {
		t.Fatal(err)
	}
	accepted := acceptAsync(t, cmContext(t), l, func(r *nic.Request) (*nic.Conn, error) { return r.Accept(nic.AcceptOptions{}) })
	c, err := dev.Dial(cmContext(t), peer.dev.Addr(), l.Port(), nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if ps := d.srv.Processes(); len(ps) != 1 || len(ps[0].QPs) != 2 || len(ps[0].PDs) != 1 || ps[0].PID != os.Getpid() {
		t.Fatalf("processes %+v, want this one with 2 QPs", ps)
	}
	// A bound window keeps its region from being deregistered: the daemon
	// must free the window first.
	bind := verbs.SendWR{Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &mr.BindRequest{
		WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: region.LKey(),
		Addr: region.Addr(), Length: 4096, Access: mr.RemoteRead}}
	if err := c.QP().PostSend(&bind); err != nil {
		t.Fatal(err)
	}
	if wc := nictest.Wait(t, cq); wc.Status != verbs.Success {
		t.Fatalf("bind: %v", wc.String())
	}
	if got := countRegions(d.dev); got != regionsBefore+1 {
		t.Errorf("%d regions with the process attached, want %d", got, regionsBefore+1)
	}
	dev.Close()
	select {
	case <-s.Done():
		if !errors.Is(s.Err(), nic.ErrConnReset) {
			t.Errorf("the peer's connection ended with %v, want ErrConnReset", s.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the peer saw no disconnect")
	}
	for deadline := time.Now().Add(10 * time.Second); len(d.srv.Processes()) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the process is still attached")
		}
	}
	if got := countRegions(d.dev); got != regionsBefore {
		t.Errorf("%d regions after the process detached, want %d", got, regionsBefore)
	}
	for wi := range d.dev.Memory().Windows() {
		t.Errorf("window %#x left after the process detached", wi.RKey)
	}
}

func countRegions(d *nic.Device) int {
	n := 0
	for range d.Memory().Regions() {
		n++
	}
	return n
}

// TestAttachConnectionManager: an attached process dials and listens
// through the daemon's connection manager; errors keep their sentinels and
// types across the socket.
func TestAttachConnectionManager(t *testing.T) {
	nictest.CheckLeaks(t)
	d := startDaemon(t, nic.Config{})
	dev := attachTo(t, d)
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64)
	m, err := pd.AllocMR(1<<16, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	peer := openCMEnd(t, nic.Config{})

	// Nothing listens: ECONNREFUSED, with the REJ's details.
	_, err = dev.Dial(cmContext(t), peer.dev.Addr(), 5555, nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
	var rej *nic.RejectError
	if !errors.Is(err, nic.ErrConnRefused) || !errors.As(err, &rej) || rej.Port != 5555 {
		t.Errorf("dial with no listener: %v, want a RejectError for port 5555 (ErrConnRefused)", err)
	}

	// The attached process listens; the embedded peer dials; the request
	// is rejected with private data, then accepted.
	l, err := dev.Listen(6000, nic.ListenOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Listen(6000, nic.ListenOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}}); !errors.Is(err, nic.ErrBusy) {
		t.Errorf("a second listener on the port: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := l.AcceptRequest(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcceptRequest with no request: %v, want the context's deadline", err)
	}
	cancel()
	for _, accept := range []bool{false, true} {
		dialed := make(chan error, 1)
		var pc *nic.Conn
		go func() {
			var err error
			pc, err = peer.dev.Dial(cmContext(t), d.dev.Addr(), 6000, peer.dialOptions())
			dialed <- err
		}()
		r, err := l.AcceptRequest(cmContext(t))
		if err != nil {
			t.Fatal(err)
		}
		if r.RemoteAddr() != peer.dev.Addr() {
			t.Errorf("request from %v, want %v", r.RemoteAddr(), peer.dev.Addr())
		}
		if !accept {
			if err := r.Reject([]byte("not now")); err != nil {
				t.Fatal(err)
			}
			if err := <-dialed; !errors.As(err, &rej) || !bytes.HasPrefix(rej.PrivateData, []byte("not now")) {
				t.Errorf("the peer's dial after a reject: %v", err)
			}
			continue
		}
		c, err := r.Accept(nic.AcceptOptions{PrivateData: []byte("welcome")})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-dialed; err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(pc.PrivateData(), []byte("welcome")) {
			t.Errorf("the peer got private data %q", pc.PrivateData()[:8])
		}
		// The attached side WRITEs into the peer's region through its
		// connection; the peer disconnects; the attached side sees it.
		wr := verbs.SendWR{ID: 5, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(0, 16)},
			RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
		if err := c.QP().PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, cq); wc.Status != verbs.Success || wc.ID != 5 {
			t.Errorf("WRITE over the accepted connection: %v", &wc)
		}
		pc.Close()
		select {
		case <-c.Done():
			if !errors.Is(c.Err(), nic.ErrConnReset) {
				t.Errorf("the attached connection ended with %v, want ErrConnReset", c.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the attached side saw no disconnect")
		}
		c.Close()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAttachQueueFull: an attached QP's send queue holds max_send_wr WRs
// as an embedded one does; a process that posts again on each completion
// never finds it full.
func TestAttachQueueFull(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	a := attachedEnd(t, d)
	b := openEnd(t, nic.Config{})
	const depth = 8
	q, _ := newQPPair(t, a, b, nic.QPConfig{MaxSendWR: depth})
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	// Deferred posts send nothing: the queue fills up.
	for i := range depth {
		wr.ID = uint64(i)
		if err := q.PostSendDeferred(&wr); err != nil {
			t.Fatalf("post %d of %d: %v", i, depth, err)
		}
	}
	if err := q.PostSendDeferred(&wr); !errors.Is(err, nic.ErrNoMem) {
		t.Errorf("post beyond max_send_wr: %v, want ErrNoMem", err)
	}
	if err := q.RingDoorbell(); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
			t.Fatalf("completion %d: %v", i, &wc)
		}
		wr.ID = uint64(depth + i)
		if err := q.PostSend(&wr); err != nil {
			t.Fatalf("posting on completion %d: %v", i, err)
		}
	}
}

// TestAttachNoAllocations: posting and polling an attached QP allocate
// nothing, whether the waiter spins for its completion or sleeps on the
// CQ's wakeup.
func TestAttachNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops packet batches on purpose")
	}
	for _, tc := range []struct {
		name string
		spin time.Duration
	}{{"spinning", 0}, {"sleeping", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, nic.Config{})
			dev, err := nic.Open(nic.Config{Attach: d.path, WaitSpin: tc.spin})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			a := attachedEndOn(t, dev)
			b := openEnd(t, nic.Config{})
			connectEnds(t, a, b)
			wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			var wcs [1]verbs.WC
			ctx := context.Background()
			n := testing.AllocsPerRun(200, func() {
				if err := a.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if _, err := a.cq.Wait(ctx, wcs[:]); err != nil || wcs[0].Status != verbs.Success {
					t.Fatal(err, wcs[0].String())
				}
			})
			if n != 0 {
				t.Errorf("%v allocations per WRITE posted and completed", n)
			}
		})
	}
}

// Two goroutines wait on one CQ and each completion wakes one of them: the
// second waiter must still be woken by the second completion, although
// the first waiter took the wakeup that the first completion's arming
// asked for (an attached CQ's daemon signals once per arming).
func TestCQConcurrentWaiters(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a := p.end(t, nic.Config{})
		b := openEnd(t, nic.Config{})
		connectEnds(t, a, b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got := make(chan uint64, 2)
		for range 2 {
			go func() {
				var wc [1]verbs.WC
				if n, err := a.cq.Wait(ctx, wc[:]); err != nil || n != 1 {
					t.Errorf("Wait: %d, %v", n, err)
					got <- 0
					return
				}
				got <- wc[0].ID
			}()
		}
		time.Sleep(50 * time.Millisecond) // both waiters asleep
		wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		for id := uint64(1); id <= 2; id++ {
			wr.ID = id
			if err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if w := <-got; w != id {
				t.Fatalf("a waiter returned WR %d, want %d", w, id)
			}
		}
	})
}

// An attached CQ's waiter leaves when its context ends, the next waiter
// still sleeps until the daemon signals, and a waiter asleep when the
// daemon goes away wakes with ErrClosed.
func TestAttachedCQWaitEnds(t *testing.T) {
	nictest.CheckLeaks(t)
	d, a, b := attachedToEmbedded(t)
	var wc [1]verbs.WC
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if n, err := a.cq.Wait(ctx, wc[:]); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a context that ends: %d, %v", n, err)
	}
	wr := verbs.SendWR{ID: 7, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.qp.PostSend(&wr)
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if n, err := a.cq.Wait(ctx2, wc[:]); n != 1 || err != nil || wc[0].ID != 7 {
		t.Fatalf("Wait after a cancelled one: %d, %v, WR %d", n, err, wc[0].ID)
	}
	waited := waitInBackground(a.cq)
	time.Sleep(20 * time.Millisecond)
	d.srv.Close()
	expectClosed(t, waited, "the daemon went away")
}

// waitInBackground waits on cq in a goroutine of its own and hands over
// what Wait returned.
func waitInBackground(cq *nic.CQ) <-chan error {
	errs := make(chan error, 1)
	go func() {
		var wc [1]verbs.WC
		_, err := cq.Wait(context.Background(), wc[:])
		errs <- err
	}()
	return errs
}

// expectClosed checks that a Wait of waitInBackground returns ErrClosed
// after what happened to its CQ.
func expectClosed(t *testing.T, waited <-chan error, what string) {
	t.Helper()
	select {
	case err := <-waited:
		if !errors.Is(err, nic.ErrClosed) {
			t.Errorf("Wait when %s: %v, want ErrClosed", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Wait still asleep 10 s after %s", what)
	}
}

// CQs and SRQs are destroyed as ibv_destroy_cq and ibv_destroy_srq do it,
// embedded and attached alike: EBUSY while a QP uses them, then gone.
func TestDestroyQueues(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		dev := p.device(t, nic.Config{})
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		scq, err := dev.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		rcq, err := dev.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		srq, err := pd.CreateSRQ(16, 1)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(nic.QPConfig{SendCQ: scq, RecvCQ: rcq, SRQ: srq})
		if err != nil {
			t.Fatal(err)
		}
		for name, destroy := range map[string]func() error{"send CQ": scq.Destroy, "receive CQ": rcq.Destroy, "SRQ": srq.Destroy} {
			if err := destroy(); !errors.Is(err, nic.ErrBusy) {
				t.Errorf("destroying the %s of a QP: %v, want ErrBusy", name, err)
			}
		}
		waited := waitInBackground(scq)
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
		for name, destroy := range map[string]func() error{"send CQ": scq.Destroy, "receive CQ": rcq.Destroy, "SRQ": srq.Destroy} {
			if err := destroy(); err != nil {
				t.Errorf("destroying the %s once its QP is gone: %v", name, err)
			}
			if err := destroy(); err != nil {
				t.Errorf("destroying the %s again: %v", name, err)
			}
		}
		expectClosed(t, waited, "its CQ was destroyed")
		var wc [1]verbs.WC
		if _, err := scq.Poll(wc[:]); !errors.Is(err, nic.ErrClosed) {
			t.Errorf("Poll of a destroyed CQ: %v, want ErrClosed", err)
		}
		if err := srq.PostRecv(&verbs.RecvWR{ID: 1}); !errors.Is(err, nic.ErrClosed) {
			t.Errorf("PostRecv to a destroyed SRQ: %v, want ErrClosed", err)
		}
		if _, err := pd.CreateQP(nic.QPConfig{SendCQ: scq}); err == nil {
			t.Error("CreateQP with a destroyed CQ succeeded")
		}
		if _, err := pd.CreateQP(nic.QPConfig{SendCQ: rcq, SRQ: srq}); err == nil {
			t.Error("CreateQP with a destroyed SRQ succeeded")
		}
	})
}

// Memory windows work the same embedded and attached: a BIND_MW posted on
// the owner's QP opens a range of its region to the peer under the
// window's new rkey, and a window of another PD (attached: of another
// process) cannot be bound.
func TestMemoryWindows(t *testing.T) {
	for _, mode := range []string{"embedded", "attached"} {
		t.Run(mode, func(t *testing.T) {
			nictest.CheckLeaks(t)
			var a *end
			var other *nic.Device // where the foreign window lives
			if mode == "attached" {
				d := startDaemon(t, nic.Config{})
				a, other = attachedEnd(t, d), attachTo(t, d)
			} else {
				a = openEnd(t, nic.Config{})
				other = a.dev
			}
			b := openEnd(t, nic.Config{})
			connectEnds(t, a, b)
			region, err := a.pd.AllocMR(1<<16, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.MWBind)
			if err != nil {
				t.Fatal(err)
			}
			w, err := a.pd.AllocMW(mr.WindowType2)
			if err != nil {
				t.Fatal(err)
			}
			old := w.RKey()
			bind := verbs.SendWR{ID: 1, Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &mr.BindRequest{
				WindowKey: old, NewKey: keyspace.IncRKey(old), RegionKey: region.LKey(),
				Addr: region.Addr() + 4096, Length: 4096, Access: mr.RemoteWrite | mr.RemoteRead}}
			if err := a.qp.PostSend(&bind); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCBindMW {
				t.Fatalf("bind: %v", wc.String())
			}
			if w.RKey() != keyspace.IncRKey(old) {
				t.Fatalf("after the bind the window's rkey is %#x, want %#x", w.RKey(), keyspace.IncRKey(old))
			}
			copy(b.mr.Bytes(), "windowed")
			write := verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{b.mr.SGE(0, 8)},
				RemoteAddr: region.Addr() + 4096 + 8, RKey: w.RKey()}
			if err := b.qp.PostSend(&write); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success {
				t.Fatalf("WRITE through the window: %v", wc.String())
			}
			syncMemory(a)
			if got := string(region.Bytes()[4104:4112]); got != "windowed" {
				t.Errorf("the window's memory holds %q after the WRITE", got)
			}

			opd, err := other.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			foreign, err := opd.AllocMW(mr.WindowType2)
			if err != nil {
				t.Fatal(err)
			}
			bind.ID, bind.Bind.WindowKey, bind.Bind.NewKey = 3, foreign.RKey(), keyspace.IncRKey(foreign.RKey())
			if err := a.qp.PostSend(&bind); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.MWBindErr {
				t.Errorf("binding a window of another PD: %v, want MW_BIND_ERR", wc.String())
			}
			if foreign.RKey() == bind.Bind.NewKey {
				t.Error("the foreign window took the refused bind's key")
			}
			for _, x := range []*nic.MW{w, foreign} {
				if err := x.Dealloc(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A busy-polling device (Config.BusyPoll) carries the same operations,
// embedded and serving attached processes; while its reader polls, an
// attached process posts without ringing the doorbell, and once the
// reader has slept, the doorbell is rung again.
func TestBusyPoll(t *testing.T) {
	const poll = 200 * time.Millisecond
	t.Run("embedded", func(t *testing.T) {
		nictest.CheckLeaks(t)
		a, b := openEnd(t, nic.Config{BusyPoll: poll}), openEnd(t, nic.Config{BusyPoll: poll})
		connectEnds(t, a, b)
		exerciseOperations(t, a, b)
	})
	t.Run("attached", func(t *testing.T) {
		nictest.CheckLeaks(t)
		d := startDaemon(t, nic.Config{BusyPoll: poll})
		a := attachedEnd(t, d)
		b := openEnd(t, nic.Config{})
		connectEnds(t, a, b)
		exerciseOperations(t, a, b)

		doorbells := func() uint64 {
			for _, c := range d.srv.Processes()[0].Counters {
				if c.Name == "doorbells" {
					return c.Value
				}
			}
			t.Fatal("no doorbells counter")
			return 0
		}
		write := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		post := func() {
			t.Helper()
			if err := a.qp.PostSend(&write); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
				t.Fatalf("WRITE: %v", wc.String())
			}
		}
		post() // the reader polls from here on
		before := doorbells()
		for range 20 {
			post()
		}
		if rung := doorbells() - before; rung != 0 {
			t.Errorf("%d doorbells rung while the device polled", rung)
		}
		// The reader sleeps once nothing has come for poll; on a loaded
		// machine it may see that late, so the post is tried again, for 5 s
		// at most, until one rings.
		rang := false
		for deadline := time.Now().Add(5 * time.Second); !rang && time.Now().Before(deadline); {
			time.Sleep(2 * poll)
			before = doorbells()
			post()
			rang = doorbells() != before
		}
		if !rang {
			t.Error("no doorbell rung after the device stopped polling")
		}
	})
	if _, err := nic.Open(nic.Config{Addr: loopback, BusyPoll: -time.Microsecond}); !errors.Is(err, nic.ErrInvalid) {
		t.Errorf("a negative BusyPoll: %v, want ErrInvalid", err)
	}
	if _, err := nic.Open(nic.Config{Addr: loopback, WaitSpin: 2 * time.Second}); !errors.Is(err, nic.ErrInvalid) {
		t.Errorf("a WaitSpin past 1s: %v, want ErrInvalid", err)
	}
}

// Posting to an attached QP, and waiting on its CQ, while another
// goroutine destroys the QP or closes the device never touches the
// unmapped rings or doorbell page or the closed doorbell eventfd: every
// call succeeds or fails with ErrClosed, as on an embedded device.
func TestAttachPostWhileClosing(t *testing.T) {
	const posters, quota, rounds = 4, 32, 20
	// Checked over the whole test, not each subtest: the daemon's and b's
	// sockets, opened here, take their epoll descriptors when first waited on.
	nictest.CheckLeaks(t)
	d := startDaemon(t, nic.Config{})
	b := openEnd(t, nic.Config{})
	for _, tc := range []struct {
		name  string
		close func(a *end, q *nic.QP) error
	}{
		{"QP destroyed", func(a *end, q *nic.QP) error { return q.Destroy() }},
		{"device closed", func(a *end, q *nic.QP) error { return a.dev.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range rounds {
				a := attachedEnd(t, d)
				q, bq := newQPPair(t, a, b, nic.QPConfig{MaxSendWR: posters * quota, MaxRecvWR: posters * quota})
				// Each poster posts its share of sends and receives, then
				// rings the doorbell, until a call fails.
				var ops atomic.Int64
				posted := make(chan error, posters)
				for range posters {
					go func() {
						wr := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
						recv := verbs.RecvWR{SGL: []verbs.SGE{a.mr.SGE(8, 8)}}
						for i := 0; ; i++ {
							var err error
							switch {
							case i < quota:
								err = q.PostSend(&wr)
							case i < 2*quota:
								err = q.PostRecv(&recv)
							default:
								err = q.RingDoorbell()
							}
							if err != nil {
								posted <- err
								return
							}
							ops.Add(1)
						}
					}()
				}
				ctx, stop := context.WithCancel(context.Background())
				waited := make(chan error, 1)
				go func() {
					var wcs [16]verbs.WC
					for {
						if _, err := a.cq.Wait(ctx, wcs[:]); err != nil {
							waited <- err
							return
						}
					}
				}()
				// Close at a different point of the posting each round.
				for target := int64(round * 29 % (2 * posters * quota)); ops.Load() < target; {
					runtime.Gosched()
				}
				if err := tc.close(a, q); err != nil {
					t.Fatal(err)
				}
				for range posters {
					if err := <-posted; !errors.Is(err, nic.ErrClosed) {
						t.Errorf("round %d: posting: %v, want ErrClosed", round, err)
					}
				}
				stop()
				if err := <-waited; !errors.Is(err, nic.ErrClosed) && !errors.Is(err, context.Canceled) {
					t.Errorf("round %d: Wait: %v, want ErrClosed or the end of its context", round, err)
				}
				a.dev.Close()
				bq.Destroy()
			}
		})
	}
}
