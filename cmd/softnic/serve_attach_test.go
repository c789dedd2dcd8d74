package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// TestServeAttach: a process attaches through the daemon's control socket
// and uses its device: a region of its own, written by the daemon's device
// through a loopback QP pair; the listings and the counters name what it
// owns; when it detaches everything is gone; when the daemon stops, a
// process still attached finds its device closed.
func TestServeAttach(t *testing.T) {
	d := startDaemon(t, "--region", "mem:64k:rwa")
	dev, err := nic.Open(nic.Config{Attach: d.control})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Addr().String() != d.ready.Listen || dev.MTU() != 4096 {
		t.Errorf("attached device at %v, MTU %d; the daemon listens on %s", dev.Addr(), dev.MTU(), d.ready.Listen)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.AllocMR(8192, mr.LocalWrite|mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	// Two QPs of the process, connected to each other through the
	// daemon's device.
	var qps [2]*nic.QP
	for i := range qps {
		if qps[i], err = pd.CreateQP(nic.QPConfig{SendCQ: cq}); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range qps {
		if err := q.Connect(dev.Addr(), qps[1-i].Num(), nic.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	copy(m.Bytes(), "through the daemon")
	wr := verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(0, 18)}, RemoteAddr: m.Addr() + 4096, RKey: m.RKey()}
	if err := qps[0].PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
		t.Fatalf("WRITE: %v, %v", wc[0].String(), err)
	}
	if got := string(m.Bytes()[4096 : 4096+18]); got != "through the daemon" {
		t.Errorf("the region reads %q after the WRITE", got)
	}

	pid := os.Getpid() // the daemon runs in the test process too
	var regions []control.RegionRow
	d.inspect(t, "mr", &regions)
	found := false
	for _, r := range regions {
		if r.LKey == m.LKey() {
			found = r.PID == pid && r.PD == uint32(pd.Handle()) && r.Len == 8192 && r.Kind == "arena"
		}
	}
	if !found {
		t.Errorf("mr does not list the attached process's region %#x: %+v", m.LKey(), regions)
	}
	// Besides QP1, the connection manager's, which every device has.
	var rows []control.QPRow
	d.inspect(t, "qp", &rows)
	if len(rows) != 3 || rows[0].QPN != 1 || rows[1].QPN != qps[0].Num() || rows[2].QPN != qps[1].Num() || rows[1].State != "RTS" ||
		rows[1].PID != pid || !rows[1].Since.IsZero() {
		t.Errorf("qp lists %+v, want QP1 and the two QPs of the attached process", rows)
	}
	// A QP the connection manager connects (to the daemon's own listener)
	// is listed with the time it was connected.
	before := time.Now()
	conn, err := dev.Dial(ctx, dev.Addr(), defaultCMPort, nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	d.inspect(t, "qp", &rows)
	var connected *control.QPRow
	for i := range rows {
		if rows[i].QPN == conn.QP().Num() {
			connected = &rows[i]
		}
	}
	if connected == nil || connected.PID != pid || connected.Since.Before(before) || connected.Since.After(after) {
		t.Errorf("qp lists %+v; want QP %#x connected between %v and %v", rows, conn.QP().Num(), before, after)
	}
	conn.Close()
	prefix := fmt.Sprintf("pid%d_", pid)
	for name, want := range map[string]uint64{"attached_processes": 1, prefix + "qps": 2, prefix + "pds": 1, prefix + "send_wqes": 1, prefix + "cqes": 1} {
		if got := d.counter(t, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}

	// Detached: the region and the QPs are gone.
	dev.Close()
	if n := d.counterReaches(t, "attached_processes", 0); n != 0 {
		t.Fatalf("attached_processes = %d after the process detached", n)
	}
	d.inspect(t, "mr", &regions)
	for _, r := range regions {
		if r.LKey == m.LKey() {
			t.Errorf("the region of a detached process is still listed: %+v", r)
		}
	}
	d.inspect(t, "qp", &rows)
	if len(rows) != 1 || rows[0].QPN != 1 {
		t.Errorf("qp lists %+v after the process detached, want QP1 alone", rows)
	}

	// A process attached when the daemon stops finds its device closed.
	dev2, err := nic.Open(nic.Config{Attach: d.control})
	if err != nil {
		t.Fatal(err)
	}
	defer dev2.Close()
	cq2, err := dev2.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := cq2.Wait(context.Background(), wc[:])
		waited <- err
	}()
	if code := d.shutdown(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, nic.ErrClosed) {
			t.Errorf("Wait on an attached CQ as the daemon stops: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a waiter on an attached CQ did not return when the daemon stopped")
	}
}
