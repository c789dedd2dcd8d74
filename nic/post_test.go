package nic_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

func TestPostReadContextIsWRID(t *testing.T) {
	// rdma_post_read(3): "The user-defined context associated with the read
	// request will be returned to the user through the work completion
	// wr_id". With the verbs API the context is the WR's ID.
	a, b := connected(t, nic.Config{}, nic.ConnectOptions{})
	fill(b.mr.Bytes()[:4096], 9)
	syncMemory(b)
	for i, id := range []uint64{0, 1, 0xdeadbeef, math.MaxUint64} {
		off := 8192 * (i + 1)
		clear(a.mr.Bytes()[off : off+4096])
		wr := &verbs.SendWR{ID: id, Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(off, 4096)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wc := nictest.Wait(t, a.cq)
		if wc.ID != id || wc.Status != verbs.Success || wc.Opcode != verbs.WCRead || wc.ByteLen != 4096 {
			t.Fatalf("completion %v, want wr_id %d RDMA_READ SUCCESS len 4096", &wc, id)
		}
		if !bytes.Equal(a.mr.Bytes()[off:off+4096], b.mr.Bytes()[:4096]) {
			t.Fatalf("wr_id %d: data read differs", id)
		}
	}
}

func TestQPPostSendDeferred(t *testing.T) {
	a, b := connected(t, nic.Config{}, nic.ConnectOptions{})
	for i := range 3 {
		wr := &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(i*64, 64)},
			RemoteAddr: b.mr.Addr() + uint64(i*64), RKey: b.mr.RKey()}
		if err := a.qp.PostSendDeferred(wr); err != nil {
			t.Fatal(err)
		}
	}
	if n := counter(t, a.dev, "sent_pkts"); n != 0 {
		t.Fatalf("%d packets sent before the doorbell", n)
	}
	if err := a.qp.RingDoorbell(); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, a.dev, "sent_pkts"); n < 3 {
		t.Fatalf("%d packets sent after the doorbell, want 3", n)
	}
	for i := range 3 {
		if wc := nictest.Wait(t, a.cq); wc.ID != uint64(i) || wc.Status != verbs.Success {
			t.Fatalf("completion %v, want wr_id %d SUCCESS", &wc, i)
		}
	}
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.RingDoorbell(); !errors.Is(err, nic.ErrClosed) {
		t.Fatalf("doorbell of a destroyed QP: %v, want ErrClosed", err)
	}
}
