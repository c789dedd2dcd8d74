package nic_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
)

// daemon is a device served to attached processes over a unix socket, as
// softnic serve does, inside the test process.
type daemon struct {
	dev  *nic.Device
	srv  *nic.AttachServer
	path string
}

func startDaemon(t testing.TB, cfg nic.Config) *daemon {
	t.Helper()
	if !cfg.Addr.IsValid() {
		cfg.Addr = loopback
	}
	cfg.Embed = true
	dev, err := nic.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{dev: dev, srv: nic.NewAttachServer(dev, nic.AttachServerConfig{}), path: filepath.Join(t.TempDir(), "softnic.sock")}
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
	dev := attachTo(t, d)
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

func TestAttachedOperations(t *testing.T) {
	checkLeaks(t)
	d := startDaemon(t, nic.Config{})
	a := attachedEnd(t, d)
	b := openEnd(t, nic.Config{})
	connectEnds(t, a, b)
	src := a.mr.Bytes()
	for i := range 100000 {
		src[i] = byte(i * 13)
	}
	post := func(wr *qp.SendWR) qp.WC {
		t.Helper()
		wr.Flags |= qp.Signaled
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wc := wait(t, a.cq)
		if wc.Status != qp.Success || wc.ID != wr.ID {
			t.Fatalf("%s: completion %v", wr.Opcode, &wc)
		}
		return wc
	}
	post(&qp.SendWR{ID: 1, Opcode: qp.WRWrite, SGL: []qp.SGE{a.mr.SGE(0, 100000)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	syncMemory(b)
	if !bytes.Equal(b.mr.Bytes()[4096:4096+100000], src[:100000]) {
		t.Fatal("WRITE: remote memory differs")
	}
	post(&qp.SendWR{ID: 2, Opcode: qp.WRRead, SGL: []qp.SGE{a.mr.SGE(200000, 100000)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	if !bytes.Equal(src[200000:300000], src[:100000]) {
		t.Fatal("READ: data differs")
	}
	binary.NativeEndian.PutUint64(b.mr.Bytes()[8:], 5)
	syncMemory(b)
	post(&qp.SendWR{ID: 3, Opcode: qp.WRFetchAdd, SGL: []qp.SGE{a.mr.SGE(512, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 10})
	syncMemory(b)
	if got, orig := binary.NativeEndian.Uint64(b.mr.Bytes()[8:]), binary.NativeEndian.Uint64(src[512:]); got != 15 || orig != 5 {
		t.Fatalf("FETCH_ADD: target %d (want 15), returned %d (want 5)", got, orig)
	}
	// A SEND from b lands in a's receive buffer.
	if err := a.qp.PostRecv(&qp.RecvWR{ID: 77, SGL: []qp.SGE{a.mr.SGE(500000, 1000)}}); err != nil {
		t.Fatal(err)
	}
	copy(b.mr.Bytes()[700000:], "hello, attached process")
	if err := b.qp.PostSend(&qp.SendWR{ID: 9, Opcode: qp.WRSendImm, Imm: 7, Flags: qp.Signaled, SGL: []qp.SGE{b.mr.SGE(700000, 23)}}); err != nil {
		t.Fatal(err)
	}
	wc := wait(t, a.cq)
	if wc.ID != 77 || wc.Status != qp.Success || wc.ByteLen != 23 || wc.Imm != 7 || string(src[500000:500023]) != "hello, attached process" {
		t.Fatalf("receive: %v imm %d, buffer %q", &wc, wc.Imm, src[500000:500023])
	}
	if wc := wait(t, b.cq); wc.Status != qp.Success {
		t.Fatalf("send: %v", &wc)
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
	_ = context.Background
	_ = time.Second
}
