package nic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// The conformance suite: the public API behaves the same whichever
// provider a device has, embedded or attached to a daemon. Each test of
// the API runs its checks once per provider (forEachProvider), or checks
// an attached device against what the embedded one does.

// A provider opens the devices of a test, embedded ones or ones attached
// to a daemon each. An attached device's daemon runs with the Config the
// test gives: the address, MTU, faults and hooks are the daemon's device's.
type provider struct {
	name     string
	attached bool
}

var providers = []provider{{"embedded", false}, {"attached", true}}

// forEachProvider runs f as a subtest for each provider.
func forEachProvider(t *testing.T, f func(t *testing.T, p provider)) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) { f(t, p) })
	}
}

// device opens a device that the test closes when it ends.
func (p provider) device(t testing.TB, cfg nic.Config) *nic.Device {
	t.Helper()
	if p.attached {
		return attachTo(t, startDaemon(t, cfg))
	}
	return nictest.OpenDevice(t, cfg)
}

// end opens an end on a device of its own: an attached end's region is
// memory it shares with its daemon.
func (p provider) end(t testing.TB, cfg nic.Config) *end {
	t.Helper()
	if p.attached {
		return attachedEnd(t, startDaemon(t, cfg))
	}
	return openEnd(t, cfg)
}

// connected returns two ends with connected RC QPs.
func (p provider) connected(t testing.TB, cfg nic.Config, opts nic.ConnectOptions) (*end, *end) {
	t.Helper()
	nictest.CheckLeaks(t)
	a, b := p.end(t, cfg), p.end(t, cfg)
	oa, ob := opts, opts
	oa.LocalPSN, oa.RemotePSN = 100, 2000
	ob.LocalPSN, ob.RemotePSN = 2000, 100
	if err := a.qp.Connect(b.dev.Addr(), b.qp.Num(), oa); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.dev.Addr(), a.qp.Num(), ob); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// cmEnd opens a connection manager's end on a device of its own.
func (p provider) cmEnd(t testing.TB, cfg nic.Config) *cmEnd {
	t.Helper()
	e := &cmEnd{dev: p.device(t, cfg)}
	var err error
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	access := mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	if p.attached {
		e.mr, err = e.pd.AllocMR(1<<20, access)
	} else {
		e.mr, err = e.pd.RegMR(make([]byte, 1<<20), access)
	}
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// unknownQPN is a QP number no test device hands out: requests to it are
// dropped unanswered.
const unknownQPN = 0xFFFFF0

// TestPostAfterSessionEnds: once the device is closed, or the daemon of an
// attached device is gone, posting fails with ErrClosed rather than
// queueing WRs nobody will carry out. Attr and Status then tell the QP's
// last known state: RESET once the device is closed (its QPs destroyed),
// what the daemon told last once it is gone.
func TestPostAfterSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		attached  bool
		end       func(t *testing.T, d *daemon, a *end)
		wantState verbs.State
	}{
		{"embedded device closed", false, func(t *testing.T, d *daemon, a *end) { a.dev.Close() }, verbs.Reset},
		{"attached device closed", true, func(t *testing.T, d *daemon, a *end) { a.dev.Close() }, verbs.Reset},
		{"daemon gone", true, func(t *testing.T, d *daemon, a *end) {
			d.srv.Close()
			// Wait returns ErrClosed once the device has seen the session end.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wc [1]verbs.WC
			if _, err := a.cq.Wait(ctx, wc[:]); !errors.Is(err, nic.ErrClosed) {
				t.Fatalf("Wait after the daemon went away: %v, want ErrClosed", err)
			}
		}, verbs.RTS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d *daemon
			var a *end
			if tc.attached {
				d = startDaemon(t, nic.Config{})
				a = attachedEnd(t, d)
			} else {
				a = openEnd(t, nic.Config{})
			}
			b := openEnd(t, nic.Config{})
			if err := a.qp.Connect(b.dev.Addr(), unknownQPN, nic.ConnectOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.end(t, d, a)
			select {
			case <-a.dev.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("Done is not closed once the device is closed or its daemon gone")
			}
			send := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			recv := verbs.RecvWR{SGL: []verbs.SGE{a.mr.SGE(8, 8)}}
			for _, post := range []struct {
				name string
				do   func() error
			}{
				{"PostSend", func() error { return a.qp.PostSend(&send) }},
				{"PostSendDeferred", func() error { return a.qp.PostSendDeferred(&send) }},
				{"PostSends", func() error { _, err := a.qp.PostSends([]verbs.SendWR{send}); return err }},
				{"RingDoorbell", a.qp.RingDoorbell},
				{"PostRecv", func() error { return a.qp.PostRecv(&recv) }},
			} {
				if err := post.do(); !errors.Is(err, nic.ErrClosed) {
					t.Errorf("%s: %v, want ErrClosed", post.name, err)
				}
			}
			if st := a.qp.Attr().State; st != tc.wantState {
				t.Errorf("Attr().State %s, want %s", st, tc.wantState)
			}
			if st := a.qp.Status().State; st != tc.wantState {
				t.Errorf("Status().State %s, want %s", st, tc.wantState)
			}
		})
	}
}

// TestSRQPostAfterDaemonGone: an attached SRQ refuses WRs with ErrClosed
// once its daemon is gone.
func TestSRQPostAfterDaemonGone(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	a := attachedEnd(t, d)
	srq, err := a.pd.CreateSRQ(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.srv.Close()
	expectClosed(t, waitInBackground(a.cq), "the daemon went away")
	if err := srq.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{a.mr.SGE(0, 8)}}); !errors.Is(err, nic.ErrClosed) {
		t.Errorf("SRQ.PostRecv: %v, want ErrClosed", err)
	}
}

// TestUDSendChecks: a UD send the QP cannot carry is refused with
// ErrInvalid when posted, and the QP stays in RTS.
func TestUDSendChecks(t *testing.T) {
	forEachProvider(t, func(t *testing.T, m provider) {
		a := m.end(t, nic.Config{})
		q, err := a.pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: a.cq})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		mtu := q.Attr().PathMTU
		dest := a.dev.Addr()
		for _, tc := range []struct {
			name string
			wr   verbs.SendWR
		}{
			{"longer than the MTU", verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, mtu+1)}, Dest: dest, DestQPN: unknownQPN}},
			{"no destination address", verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, DestQPN: unknownQPN}},
			{"no destination QPN", verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, Dest: dest}},
			{"QPN beyond 24 bits", verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, Dest: dest, DestQPN: 1 << 24}},
		} {
			if err := q.PostSend(&tc.wr); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
			}
		}
		ok := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, mtu)}, Dest: dest, DestQPN: unknownQPN}
		if err := q.PostSend(&ok); err != nil {
			t.Fatalf("a send of the MTU: %v", err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
			t.Errorf("a send of the MTU: %v", &wc)
		}
		if st := q.Status().State; st != verbs.RTS {
			t.Errorf("QP %s after the refused sends, want RTS", st)
		}
	})
}

// TestStatusCountsQueuedWRs: Status counts the WRs posted and not
// completed, including those an attached device's daemon has not taken
// from the rings yet.
func TestStatusCountsQueuedWRs(t *testing.T) {
	forEachProvider(t, func(t *testing.T, m provider) {
		a := m.end(t, nic.Config{})
		b := openEnd(t, nic.Config{})
		// A peer that never answers: the send stays outstanding.
		if err := a.qp.Connect(b.dev.Addr(), unknownQPN, nic.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := a.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{a.mr.SGE(8*i, 8)}}); err != nil {
				t.Fatal(err)
			}
		}
		wr := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if err := a.qp.PostSendDeferred(&wr); err != nil {
			t.Fatal(err)
		}
		if st := a.qp.Status(); st.SendQueued != 1 || st.RecvQueued != 3 {
			t.Errorf("%d sends and %d receives queued, want 1 and 3", st.SendQueued, st.RecvQueued)
		}
	})
}

// TestQPRingsHoldNoDescriptors: a QP costs the process no file descriptor,
// attached (its rings stay mapped without their memfds) as embedded.
func TestQPRingsHoldNoDescriptors(t *testing.T) {
	const n = 16
	forEachProvider(t, func(t *testing.T, m provider) {
		a := m.end(t, nic.Config{})
		before := openDescriptors(t)
		for range n {
			if _, err := a.pd.CreateQP(nic.QPConfig{SendCQ: a.cq}); err != nil {
				t.Fatal(err)
			}
		}
		if more := openDescriptors(t) - before; more >= n {
			t.Errorf("%d QPs hold %d more descriptors", n, more)
		}
	})
}

// TestRegMRAfterClose: registering memory on a closed attached device
// fails with ErrClosed, not as memory the daemon cannot reach.
func TestRegMRAfterClose(t *testing.T) {
	a := attachedEnd(t, startDaemon(t, nic.Config{}))
	buf := make([]byte, 64)
	a.dev.Close()
	if _, err := a.pd.RegMR(buf, 0); !errors.Is(err, nic.ErrClosed) {
		t.Errorf("RegMR after Close: %v, want ErrClosed", err)
	}
}

// TestAttachCreateFailureDestroys: a CQ, SRQ or QP the daemon made, whose
// rings the process then cannot map, is destroyed at once, not left to
// count against the process's limits until it detaches.
func TestAttachCreateFailureDestroys(t *testing.T) {
	dropLast := func(fds []int) []int {
		shm.CloseFDs(fds[len(fds)-1:])
		return fds[:len(fds)-1]
	}
	notShared := func(fds []int) []int {
		f, err := os.Open(os.DevNull)
		if err != nil {
			panic(err)
		}
		defer f.Close()
		fd, err := shm.DupFD(int(f.Fd()))
		if err != nil {
			panic(err)
		}
		shm.CloseFDs(fds[:1])
		fds[0] = fd
		return fds
	}
	for _, tc := range []struct {
		name   string
		op     string
		edit   func([]int) []int
		limit  int // objects: the PD, a CQ for a QP, and the one created
		create func(dev *nic.Device, pd *nic.PD, cq *nic.CQ) error
	}{
		{"CQ missing a descriptor", "create_cq", dropLast, 2, func(dev *nic.Device, _ *nic.PD, _ *nic.CQ) error {
			_, err := dev.CreateCQ(16)
			return err
		}},
		{"CQ ring not shared memory", "create_cq", notShared, 2, func(dev *nic.Device, _ *nic.PD, _ *nic.CQ) error {
			_, err := dev.CreateCQ(16)
			return err
		}},
		{"SRQ missing a descriptor", "create_srq", dropLast, 2, func(_ *nic.Device, pd *nic.PD, _ *nic.CQ) error {
			_, err := pd.CreateSRQ(16, 1)
			return err
		}},
		{"SRQ ring not shared memory", "create_srq", notShared, 2, func(_ *nic.Device, pd *nic.PD, _ *nic.CQ) error {
			_, err := pd.CreateSRQ(16, 1)
			return err
		}},
		{"QP missing a descriptor", "create_qp", dropLast, 3, func(_ *nic.Device, pd *nic.PD, cq *nic.CQ) error {
			_, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
			return err
		}},
		{"QP ring not shared memory", "create_qp", notShared, 3, func(_ *nic.Device, pd *nic.PD, cq *nic.CQ) error {
			_, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := startServer(t, nic.Config{}, attachd.Config{Limits: limitsWith(t, "process.objects", int64(tc.limit))}).path
			var once atomic.Bool
			path = startProxy(t, path, func(op string, fds []int) []int {
				if op == tc.op && once.CompareAndSwap(false, true) {
					return tc.edit(fds)
				}
				return fds
			})
			dev, err := nic.Open(nic.Config{Attach: path})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			var cq *nic.CQ
			if tc.op == "create_qp" {
				if cq, err = dev.CreateCQ(16); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.create(dev, pd, cq); !errors.Is(err, shm.ErrProtocol) && !errors.Is(err, shm.ErrNotShared) {
				t.Fatalf("creating with the answer spoilt: %v, want ErrProtocol or ErrNotShared", err)
			}
			if err := tc.create(dev, pd, cq); err != nil {
				t.Errorf("creating again, within the daemon's limit of %d objects: %v", tc.limit, err)
			}
		})
	}
}

// TestAttachExtraDescriptorClosed: a descriptor the daemon sends with an
// answer that carries none is closed, not leaked.
func TestAttachExtraDescriptorClosed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := startProxy(t, startDaemon(t, nic.Config{}).path, func(op string, fds []int) []int {
		if op != "alloc_pd" || w == nil {
			return fds
		}
		fd, err := shm.DupFD(int(w.Fd()))
		if err != nil {
			panic(err)
		}
		w.Close()
		w = nil
		return append(fds, fd)
	})
	dev, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	// The pipe reads end of file once every copy of its write end is closed.
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("reading the pipe whose write end came with the answer: %v, want EOF (the process keeps it open)", err)
	}
}

// startProxy relays the attach protocol between processes and the daemon
// at daemon, and returns the path of its socket. It lets a test tamper
// with the daemon's answers: edit gets the op of each request answered and
// the answer's descriptors, and returns those to pass on (closing those it
// drops).
func startProxy(t *testing.T, daemon string, edit func(op string, fds []int) []int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			dc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: daemon, Net: "unix"})
			if err != nil {
				c.Close()
				continue
			}
			proc, dmn := shm.NewConn(c, 64<<10), shm.NewConn(dc, 64<<10)
			var mu sync.Mutex
			ops := make(map[uint64]string)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer dmn.Close()
				relay(proc, dmn, func(id uint64, op string, fds []int) []int {
					mu.Lock()
					ops[id] = op
					mu.Unlock()
					return fds
				})
			}()
			go func() {
				defer wg.Done()
				defer proc.Close()
				relay(dmn, proc, func(id uint64, _ string, fds []int) []int {
					if id == 0 {
						return fds // the answer to the attach line, or an event
					}
					mu.Lock()
					op := ops[id]
					delete(ops, id)
					mu.Unlock()
					return edit(op, fds)
				})
			}()
		}
	}()
	return path
}

// relay passes messages and their descriptors from one connection to the
// other until either fails, the descriptors as change returns them.
func relay(from, to *shm.Conn, change func(id uint64, op string, fds []int) []int) {
	defer from.DropFDs()
	for {
		line, err := from.ReadLine()
		if err != nil {
			return
		}
		var m struct {
			ID  uint64 `json:"id"`
			Op  string `json:"op"`
			FDs int    `json:"fds"`
		}
		json.Unmarshal(line, &m)
		fds, err := from.TakeFDs(m.FDs)
		if err != nil {
			return
		}
		out := change(m.ID, m.Op, fds)
		if len(out) != len(fds) {
			var fields map[string]json.RawMessage
			json.Unmarshal(line, &fields)
			fields["fds"], _ = json.Marshal(len(out))
			line, _ = json.Marshal(fields)
		}
		fds = out
		err = to.Send(line, fds)
		shm.CloseFDs(fds)
		if err != nil {
			return
		}
	}
}

// TestQueueLimitsParity: both modes take the same CQ depths (up to
// qp.MaxCQE), and a destroyed QP refuses Modify with ErrClosed in both.
func TestQueueLimitsParity(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	for _, mode := range []struct {
		name string
		end  func(t *testing.T) *end
	}{
		{"embedded", func(t *testing.T) *end { return openEnd(t, nic.Config{}) }},
		{"attached", func(t *testing.T) *end { return attachedEnd(t, d) }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := mode.end(t)
			// An attached device once refused more than 1<<20.
			cq, err := e.dev.CreateCQ(1<<20 + 1)
			if err != nil {
				t.Fatalf("CreateCQ(1<<20 + 1): %v", err)
			}
			cq.Destroy()
			if _, err := e.dev.CreateCQ(qp.MaxCQE + 1); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("CreateCQ(MaxCQE+1): %v, want ErrInvalid", err)
			}
			q, err := e.pd.CreateQP(nic.QPConfig{SendCQ: e.cq})
			if err != nil {
				t.Fatal(err)
			}
			q.Destroy()
			if err := q.Modify(&verbs.Attr{State: verbs.Init}, verbs.AttrState); !errors.Is(err, nic.ErrClosed) {
				t.Errorf("Modify after Destroy: %v, want ErrClosed", err)
			}
		})
	}
}

// TestRegShared registers memory the test mapped itself from a memfd, at
// the address of its own mapping, on an embedded and an attached device:
// the peer's WRITE to that address lands in the test's mapping, a READ of
// it brings back what the test wrote there, and local SGEs name it by the
// same address.
func TestRegShared(t *testing.T) {
	nictest.MustHaveAttach(t) // the region is attach mode's shared memory
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.end(t, nic.Config{}), openEnd(t, nic.Config{})
		connectEnds(t, a, b)
		mem, err := shm.Create("regshared-test", 3*shm.PageSize)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		own := mem.Bytes()[shm.PageSize+100 : 2*shm.PageSize+200]
		iova := uint64(uintptr(unsafe.Pointer(&own[0])))
		m, err := a.pd.RegShared(mem.FD(), shm.PageSize+100, len(own), iova, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if m.Addr() != iova || m.Len() != len(own) {
			t.Fatalf("region at %#x of %d bytes, want %#x and %d", m.Addr(), m.Len(), iova, len(own))
		}
		copy(own[4000:], "written by the owner")
		copy(b.mr.Bytes(), "written by the peer!")
		wrs := []verbs.SendWR{
			{Opcode: verbs.WRWrite, SGL: []verbs.SGE{b.mr.SGE(0, 20)}, RemoteAddr: iova + 10, RKey: m.RKey(), Flags: verbs.Signaled},
			{Opcode: verbs.WRRead, SGL: []verbs.SGE{b.mr.SGE(100, 20)}, RemoteAddr: iova + 4000, RKey: m.RKey(), Flags: verbs.Signaled},
		}
		for i := range wrs {
			if err := b.qp.PostSend(&wrs[i]); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success {
				t.Fatalf("%v", &wc)
			}
		}
		syncMemory(a)
		if got := string(own[10:30]); got != "written by the peer!" {
			t.Errorf("the owner's mapping holds %q after the WRITE", got)
		}
		if got := string(b.mr.Bytes()[100:120]); got != "written by the owner" {
			t.Errorf("the READ brought %q", got)
		}
		// A local SGE by the owner's address: a WRITE from the region.
		w := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{{Addr: iova + 4000, Length: 20, LKey: m.LKey()}},
			RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey(), Flags: verbs.Signaled}
		if err := a.qp.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
			t.Fatalf("%v", &wc)
		}
		syncMemory(b)
		if got := string(b.mr.Bytes()[200:220]); got != "written by the owner" {
			t.Errorf("the WRITE from the region brought %q", got)
		}
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.pd.RegShared(mem.FD(), 4*shm.PageSize, 10, iova, 0); !errors.Is(err, nic.ErrFault) {
			t.Errorf("RegShared past the end of the memfd: %v, want ErrFault", err)
		}
	})
}

// TestCQWaitReady: WaitReady returns once a completion arrives and leaves
// it in the CQ for Poll; on an empty CQ it waits until its context ends.
func TestCQWaitReady(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.end(t, nic.Config{}), openEnd(t, nic.Config{})
		connectEnds(t, a, b)
		short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := a.cq.WaitReady(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitReady on an empty CQ: %v, want DeadlineExceeded", err)
		}
		ready := make(chan error, 1)
		go func() { ready <- a.cq.WaitReady(context.Background()) }()
		w := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Flags: verbs.Signaled}
		if err := a.qp.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-ready:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitReady did not return after a completion")
		}
		var wc [2]verbs.WC
		if n, err := a.cq.Poll(wc[:]); n != 1 || err != nil || wc[0].Status != verbs.Success {
			t.Fatalf("Poll after WaitReady: %d completions (%v), %v", n, err, &wc[0])
		}
	})
}

// TestCQNotify: a CQ armed with Notify wakes its Notification's Wait for
// the next completion written to it, as ibv_req_notify_cq: not for one
// already in the CQ when it was armed, but for one written after, even if
// it was polled before the Wait; armed for solicited completions, not for
// one not solicited, which stays in the CQ, but for the receive
// completion of a SEND sent with verbs.Solicited. The arming outlives a
// resize of the CQ, which an attached device's daemon does on a new ring.
func TestCQNotify(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.end(t, nic.Config{}), openEnd(t, nic.Config{})
		connectEnds(t, a, b)
		for i := range 6 {
			if err := a.qp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{a.mr.SGE(64*i, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		send := func(flags verbs.SendFlags) {
			t.Helper()
			w := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{b.mr.SGE(0, 8)}, Flags: verbs.Signaled | flags}
			if err := b.qp.PostSend(&w); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success {
				t.Fatalf("the SEND: %v", &wc)
			}
			if err := a.cq.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
		}
		notWoken := func(n nic.Notification, what string) {
			t.Helper()
			short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancelShort()
			if err := n.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait %s: %v, want DeadlineExceeded", what, err)
			}
			if n.Written() {
				t.Fatalf("Written %s: true", what)
			}
		}
		poll := func(want int) []verbs.WC {
			t.Helper()
			wc := make([]verbs.WC, 4)
			n, err := a.cq.Poll(wc)
			if n != want || err != nil {
				t.Fatalf("Poll: %d completions (%v), want %d", n, err, want)
			}
			return wc[:n]
		}

		send(0)
		notWoken(a.cq.Notify(false), "with a completion in the CQ before it was armed")
		n := a.cq.Notify(false)
		send(0)
		poll(2)
		if !n.Written() {
			t.Fatal("Written after a completion written after arming, polled since: false")
		}
		if err := n.Wait(ctx); err != nil {
			t.Fatalf("Wait for a completion written after arming, polled since: %v", err)
		}

		sol := a.cq.Notify(true)
		send(0)
		notWoken(sol, "armed for solicited completions, after a SEND not solicited")
		woken := make(chan error, 1)
		go func() { woken <- sol.Wait(ctx) }()
		send(verbs.Solicited)
		if err := <-woken; err != nil {
			t.Fatalf("Wait after a solicited SEND: %v", err)
		}
		if wc := poll(2); wc[0].Flags&verbs.WCSolicited != 0 || wc[1].Flags&verbs.WCSolicited == 0 {
			t.Fatalf("Poll after the solicited SEND: %v, %v; want the second solicited", &wc[0], &wc[1])
		}

		send(0)
		n = a.cq.Notify(false)
		if err := a.cq.Resize(64); err != nil {
			t.Fatal(err)
		}
		notWoken(n, "after a resize, with the completion written before arming")
		send(0)
		if err := n.Wait(ctx); err != nil {
			t.Fatalf("Wait for a completion written after arming and a resize: %v", err)
		}
		poll(2)
	})
}

// TestCQDiscard: Discard takes the completions of one QP out of a CQ that
// two QPs complete into, wherever they lie in its ring (the CQ has gone
// round it), and leaves the other QP's, in order, for Poll.
func TestCQDiscard(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.end(t, nic.Config{}), openEnd(t, nic.Config{})
		cq, err := a.dev.CreateCQ(6)
		if err != nil {
			t.Fatal(err)
		}
		q1, _ := newQPPair(t, a, b, nic.QPConfig{SendCQ: cq})
		q2, _ := newQPPair(t, a, b, nic.QPConfig{SendCQ: cq})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		writeAndWait := func(ids map[*nic.QP][]uint64, n int) {
			t.Helper()
			for q, qids := range ids {
				for _, id := range qids {
					w := verbs.SendWR{ID: id, Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Flags: verbs.Signaled}
					if err := q.PostSend(&w); err != nil {
						t.Fatal(err)
					}
				}
			}
			for cq.Len() < n {
				if ctx.Err() != nil {
					t.Fatalf("%d completions in the CQ, want %d", cq.Len(), n)
				}
				time.Sleep(time.Millisecond)
			}
		}
		wcs := make([]verbs.WC, 6)
		writeAndWait(map[*nic.QP][]uint64{q2: {1, 2, 3, 4}}, 4)
		if n, err := cq.Poll(wcs); n != 4 || err != nil {
			t.Fatalf("Poll: %d, %v", n, err)
		}
		writeAndWait(map[*nic.QP][]uint64{q1: {10, 11, 12}, q2: {5, 6}}, 5)
		if n := cq.Discard(q1.Num()); n != 3 {
			t.Errorf("Discard of the QP with 3 completions in the CQ: %d", n)
		}
		if n := cq.Discard(q1.Num()); n != 0 {
			t.Errorf("Discard again: %d", n)
		}
		n, err := cq.Poll(wcs)
		if n != 2 || err != nil || wcs[0].ID != 5 || wcs[1].ID != 6 || wcs[0].QPN != q2.Num() {
			t.Fatalf("Poll after Discard: %d completions (%v): %v, %v; want q2's 5 and 6", n, err, &wcs[0], &wcs[1])
		}
	})
}

// TestCQWaitReadyDestroyed: a waiter of WaitReady, which looks at Len
// and not at Poll's ErrClosed, returns ErrClosed once the CQ is destroyed,
// whether it spins (Config.WaitSpin) or sleeps when that happens; a
// waiter that took the destroyed CQ for a completion went back to its
// spin for ever.
func TestCQWaitReadyDestroyed(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		for _, spin := range []time.Duration{time.Second, -1} {
			t.Run(fmt.Sprintf("spin %v", spin), func(t *testing.T) {
				a := mode.end(t, nic.Config{WaitSpin: spin})
				cq, err := a.dev.CreateCQ(4)
				if err != nil {
					t.Fatal(err)
				}
				ready := make(chan error, 1)
				go func() { ready <- cq.WaitReady(context.Background()) }()
				if err := cq.Destroy(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-ready:
					if !errors.Is(err, nic.ErrClosed) {
						t.Errorf("WaitReady on a destroyed CQ: %v, want ErrClosed", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("WaitReady did not return after the CQ was destroyed")
				}
			})
		}
	})
}

// TestConnectOwnQP connects QPs the caller made first and posted receives
// to (rdma_create_qp before rdma_connect and rdma_accept), on embedded and
// attached devices: the dialer's SEND lands in the acceptor's receive
// posted before the connection existed, and Close leaves each QP in the
// error state, its owner's to destroy; a QP that has a connection cannot
// make another.
func TestConnectOwnQP(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.end(t, nic.Config{}), mode.end(t, nic.Config{})
		ownQP := func(e *end) *nic.QP {
			q, err := e.pd.CreateQP(nic.QPConfig{SendCQ: e.cq})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Modify(&verbs.Attr{State: verbs.Init, AccessFlags: mr.RemoteWrite}, verbs.AttrState|verbs.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			return q
		}
		aq, bq := ownQP(a), ownQP(b)
		if err := bq.PostRecv(&verbs.RecvWR{ID: 77, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		l, err := b.dev.Listen(0, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		accepted := make(chan *nic.Conn, 1)
		go func() {
			r, err := l.AcceptRequest(context.Background())
			if err != nil {
				t.Error(err)
				accepted <- nil
				return
			}
			c, err := r.Accept(nic.AcceptOptions{UseQP: bq})
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := a.dev.Dial(ctx, b.dev.Addr(), l.Port(), nic.DialOptions{PD: a.pd, UseQP: aq})
		if err != nil {
			t.Fatal(err)
		}
		bc := <-accepted
		if bc == nil {
			t.FailNow()
		}
		if c.QP() != aq || bc.QP() != bq {
			t.Fatal("the connections do not use the QPs they were given")
		}
		if _, err := a.dev.Dial(ctx, b.dev.Addr(), l.Port(), nic.DialOptions{PD: a.pd, UseQP: aq}); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("a second connection of a connected QP: %v, want ErrInvalid", err)
		}
		copy(a.mr.Bytes(), "sent before nothing")
		s := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 19)}, Flags: verbs.Signaled}
		if err := aq.PostSend(&s); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
			t.Fatalf("SEND: %v", &wc)
		}
		if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success || wc.ID != 77 || string(b.mr.Bytes()[:19]) != "sent before nothing" {
			t.Fatalf("receive posted before the connection: %v holding %q", &wc, b.mr.Bytes()[:19])
		}
		c.Close()
		bc.Close()
		for _, q := range []*nic.QP{aq, bq} {
			if st := q.Attr().State; st != verbs.Err {
				t.Errorf("QP %#x after Close: %s, want ERR (its owner destroys it)", q.Num(), st)
			}
			if err := q.Destroy(); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestPostSendBatchParity: PostSendBatch posts all of its work requests
// or none, the same embedded and attached: a batch larger than the send
// queue's room, or with a work request the QP refuses among valid ones,
// posts nothing (no completion comes of it, and the queue takes a full
// batch after it), and a batch that fits completes whole.
func TestPostSendBatchParity(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		a, b := mode.connected(t, nic.Config{}, nic.ConnectOptions{})
		write := func(i int) verbs.SendWR {
			return verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(i, 1)},
				RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey()}
		}
		batch := func(n int) []verbs.SendWR {
			wrs := make([]verbs.SendWR, n)
			for i := range wrs {
				wrs[i] = write(i)
			}
			return wrs
		}
		if err := a.qp.PostSendBatch(batch(qp.DefaultMaxWR + 1)); !errors.Is(err, nic.ErrNoMem) {
			t.Errorf("a batch of %d on a send queue of %d: %v, want ErrNoMem", qp.DefaultMaxWR+1, qp.DefaultMaxWR, err)
		}
		bad := batch(3)
		bad[1].SGL = make([]verbs.SGE, qp.DefaultMaxSGE+1)
		if err := a.qp.PostSendBatch(bad); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("a batch with %d SGEs in its second WR: %v, want ErrInvalid", qp.DefaultMaxSGE+1, err)
		}
		for i := range qp.DefaultMaxWR {
			a.mr.Bytes()[i] = byte(i + 1)
		}
		if err := a.qp.PostSendBatch(batch(qp.DefaultMaxWR)); err != nil {
			t.Fatalf("a batch that fills the send queue after the refused ones: %v", err)
		}
		for i := range qp.DefaultMaxWR {
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success || wc.ID != uint64(i) {
				t.Fatalf("completion %d: %v, want WRITE %d", i, &wc, i)
			}
		}
		var more [1]verbs.WC
		if n, err := a.cq.Poll(more[:]); n != 0 || err != nil {
			t.Errorf("after the batch: %d more completions (%v), want none of the refused batches", n, err)
		}
		syncMemory(b)
		for i := range qp.DefaultMaxWR {
			if got := b.mr.Bytes()[i]; got != byte(i+1) {
				t.Fatalf("byte %d after the batch: %d, want %d", i, got, i+1)
			}
		}
	})
}
