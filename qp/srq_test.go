package qp_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// srqPair returns b, a node whose two RC QPs b1 and b2 share one SRQ, each
// connected to its own peer (a1, a2), and the two simulations.
func srqPair(t *testing.T, depth int) (srq *qp.SRQ, s1, s2 *sim, a1, a2, b1, b2 *host) {
	b1 = newNode(t, "b", "10.0.0.2")
	srq, err := qp.NewSRQ(b1.pd, depth, 2)
	if err != nil {
		t.Fatal(err)
	}
	b1.attach(t, verbs.RC, 0x22, qp.Config{SRQ: srq})
	b2 = b1.sibling(t, "b", verbs.RC, 0x23, qp.Config{SRQ: srq})
	a1 = newHost(t, "a", "10.0.0.1", verbs.RC, 0x11, qp.Config{})
	a2 = newHost(t, "a", "10.0.0.3", verbs.RC, 0x12, qp.Config{})
	connect(t, a1, b1, defaultAttr())
	connect(t, a2, b2, defaultAttr())
	return srq, newSim(t, a1, b1), newSim(t, a2, b2), a1, a2, b1, b2
}

// TestSRQSharedInOrder: QPs attached to one shared receive queue take its
// WRs in the order they were posted, whichever QP a SEND arrives on (rxe
// takes the SRQ's head WR, under its lock, for any QP).
func TestSRQSharedInOrder(t *testing.T) {
	srq, s1, s2, a1, a2, b1, b2 := srqPair(t, 8)
	for i := range 4 {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(100 + i), SGL: sgl(b1.sge(uint64(i)*4096, 4096))}); err != nil {
			t.Fatal(err)
		}
	}
	// SENDs arrive on b1, b2, b2, b1.
	order := []struct {
		s    *sim
		from *host
		to   *host
	}{{s1, a1, b1}, {s2, a2, b2}, {s2, a2, b2}, {s1, a1, b1}}
	for i, o := range order {
		n := uint32(10 + i)
		fill(o.from.buf[:n], byte(i))
		post(t, o.from, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: sgl(o.from.sge(0, n))})
		wcs := o.s.waitWC(b1, i+1, time.Second)
		expectWC(t, wcs[i], verbs.WC{ID: uint64(100 + i), Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: n, QPN: o.to.qp.Num()})
		if !bytes.Equal(b1.buf[i*4096:i*4096+int(n)], o.from.buf[:n]) {
			t.Errorf("SEND %d was not placed in the SRQ's WR %d", i, 100+i)
		}
	}
	if srq.Len() != 0 {
		t.Errorf("SRQ holds %d WRs, want 0", srq.Len())
	}
}

// TestSRQEmptyRNR: a SEND finding the SRQ empty gets an RNR NAK (as with a
// QP's own receive queue; rxe's get_srq_wqe answers RNR) and succeeds once a WR is
// posted to the SRQ.
func TestSRQEmptyRNR(t *testing.T) {
	srq, s1, _, a1, _, b1, _ := srqPair(t, 8)
	fill(a1.buf[:64], 3)
	post(t, a1, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a1.sge(0, 64))})
	s1.run(time.Second, func() bool { return b1.counter(verbs.SendRNRErr) >= 1 })
	if err := srq.PostRecv(&verbs.RecvWR{ID: 7, SGL: sgl(b1.sge(0, 4096))}); err != nil {
		t.Fatal(err)
	}
	s1.waitWC(a1, 1, time.Second)
	wcs := s1.waitWC(b1, 1, time.Second)
	expectWC(t, a1.wcs[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: 64, QPN: a1.qp.Num()})
	expectWC(t, wcs[0], verbs.WC{ID: 7, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: 64, QPN: b1.qp.Num()})
	if a1.counter(verbs.RcvdRNRErr) == 0 {
		t.Error("the requester saw no RNR NAK")
	}
}

// TestSRQErrorKeepsSharedWRs: a QP on an SRQ that goes to ERR flushes only
// its own work; the SRQ's WRs stay for the other QPs (a WQE on an SRQ
// belongs to no QP until one takes it; rxe flushes only a QP's own receive
// queue).
func TestSRQErrorKeepsSharedWRs(t *testing.T) {
	srq, s1, _, a1, _, b1, b2 := srqPair(t, 8)
	for i := range 2 {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sgl(b1.sge(uint64(i)*4096, 4096))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b2.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if srq.Len() != 2 || len(b1.poll()) != 0 {
		t.Fatalf("after b2 went to ERR the SRQ holds %d WRs and the CQ %d completions; want 2 and none", srq.Len(), len(b1.wcs))
	}
	post(t, a1, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a1.sge(0, 8))})
	if wc := s1.waitWC(b1, 1, time.Second)[0]; wc.ID != 0 || wc.Status != verbs.Success || wc.QPN != b1.qp.Num() {
		t.Errorf("b1's SEND completed %v, want the SRQ's first WR", &wc)
	}
}

// TestSRQPosting: the limits of posting to an SRQ and of QPs using one.
func TestSRQPosting(t *testing.T) {
	srq, _, _, _, _, b1, _ := srqPair(t, 2)
	if err := b1.qp.PostRecv(&verbs.RecvWR{ID: 1}); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("PostRecv on a QP with an SRQ = %v, want ErrInvalid (ibv_post_recv refuses it)", err)
	}
	for i := range 2 {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.PostRecv(&verbs.RecvWR{ID: 3}); !errors.Is(err, qp.ErrNoMem) {
		t.Errorf("PostRecv on a full SRQ = %v, want ErrNoMem", err)
	}
	if err := srq.PostRecv(&verbs.RecvWR{ID: 4, SGL: make([]verbs.SGE, 3)}); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("PostRecv with more SGEs than the SRQ's max_sge = %v, want ErrInvalid", err)
	}
	for _, c := range []struct{ depth, sge int }{{0, 1}, {1, 0}, {1, 33}, {-1, 1}} {
		if _, err := qp.NewSRQ(b1.pd, c.depth, c.sge); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("NewSRQ(depth %d, max_sge %d) = %v, want ErrInvalid", c.depth, c.sge, err)
		}
	}
}

// TestSRQLimit: an armed limit raises one event when a SEND takes the SRQ
// below it, and is disarmed (ibv_query_srq's srq_limit 0), as rxe's
// get_srq_wqe does; a limit re-armed raises one more.
func TestSRQLimit(t *testing.T) {
	srq, s1, _, a1, _, b1, _ := srqPair(t, 8)
	events := 0
	srq.SetOnLimit(func() { events++ })
	for i := range 4 {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sgl(b1.sge(uint64(i)*64, 64))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	// 4 WRs, limit 3: the first SEND leaves 3 (no event), the second 2.
	steps := []struct{ events, limit int }{{0, 3}, {1, 0}, {1, 0}}
	for i, st := range steps {
		post(t, a1, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: sgl(a1.sge(0, 8))})
		s1.waitWC(b1, i+1, time.Second)
		if got := srq.Attr(); events != st.events || got.Limit != st.limit {
			t.Errorf("after SEND %d: %d events, limit %d; want %d, %d", i+1, events, got.Limit, st.events, st.limit)
		}
	}
	if err := srq.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	post(t, a1, &verbs.SendWR{ID: 9, Opcode: verbs.WRSend, SGL: sgl(a1.sge(0, 8))})
	s1.waitWC(b1, 4, time.Second)
	if events != 2 || srq.Attr().Limit != 0 {
		t.Errorf("re-armed at 2, a SEND leaving 0: %d events, limit %d; want 2, 0", events, srq.Attr().Limit)
	}
}

// TestSRQModify: resizing keeps the WRs in order; what rxe refuses
// (EINVAL) changes nothing.
func TestSRQModify(t *testing.T) {
	srq, s1, _, a1, _, b1, _ := srqPair(t, 4)
	for i := range 3 {
		if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(10 + i), SGL: sgl(b1.sge(uint64(i)*64, 64))}); err != nil {
			t.Fatal(err)
		}
	}
	bad := []struct {
		name string
		attr verbs.SRQAttr
		mask verbs.SRQAttrMask
	}{
		{"size 0", verbs.SRQAttr{MaxWR: 0}, verbs.SRQMaxWR},
		{"size past max_srq_wr", verbs.SRQAttr{MaxWR: qp.MaxSRQWR + 1}, verbs.SRQMaxWR},
		{"size below the WRs held", verbs.SRQAttr{MaxWR: 2}, verbs.SRQMaxWR},
		{"limit past the size", verbs.SRQAttr{Limit: 5}, verbs.SRQLimit},
		{"limit past the new size", verbs.SRQAttr{MaxWR: 6, Limit: 7}, verbs.SRQMaxWR | verbs.SRQLimit},
		{"negative limit", verbs.SRQAttr{Limit: -1}, verbs.SRQLimit},
		{"unknown mask bit", verbs.SRQAttr{}, 4},
	}
	for _, c := range bad {
		if err := srq.Modify(&c.attr, c.mask); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("%s: Modify = %v, want ErrInvalid", c.name, err)
		}
	}
	if got, want := srq.Attr(), (verbs.SRQAttr{MaxWR: 4, MaxSGE: 2}); got != want {
		t.Errorf("after refused modifies Attr = %+v, want %+v", got, want)
	}
	if err := srq.Modify(&verbs.SRQAttr{MaxWR: 3}, verbs.SRQMaxWR); err != nil {
		t.Fatal(err)
	}
	if err := srq.PostRecv(&verbs.RecvWR{ID: 13}); !errors.Is(err, qp.ErrNoMem) {
		t.Errorf("PostRecv to an SRQ shrunk to the 3 WRs it holds = %v, want ErrNoMem", err)
	}
	if err := srq.Modify(&verbs.SRQAttr{MaxWR: 6, Limit: 6}, verbs.SRQMaxWR|verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got, want := srq.Attr(), (verbs.SRQAttr{MaxWR: 6, MaxSGE: 2, Limit: 6}); got != want {
		t.Errorf("Attr = %+v, want %+v", got, want)
	}
	for i := range 3 {
		post(t, a1, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: sgl(a1.sge(0, 8))})
		if wc := s1.waitWC(b1, i+1, time.Second)[i]; wc.ID != uint64(10+i) {
			t.Errorf("SEND %d took WR %d, want %d: resizing reordered the SRQ", i, wc.ID, 10+i)
		}
	}
}
