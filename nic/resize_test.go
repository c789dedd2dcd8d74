package nic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// qpOn makes a QP on e with cfg (e's CQ unless cfg names one) and
// connects it to a new QP of peer's, which it returns too.
func qpOn(t *testing.T, e, peer *end, cfg nic.QPConfig) (*nic.QP, *nic.QP) {
	t.Helper()
	if cfg.SendCQ == nil {
		cfg.SendCQ = e.cq
	}
	q, err := e.pd.CreateQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := peer.pd.CreateQP(nic.QPConfig{SendCQ: peer.cq})
	if err != nil {
		t.Fatal(err)
	}
	connectEnds(t, &end{dev: e.dev, qp: q}, &end{dev: peer.dev, qp: pq})
	return q, pq
}

// TestSRQLimit: an SRQ's limit, armed by Modify, raises one OnSRQLimit
// when a SEND takes the SRQ's WRs below it, and reads 0 from then on, as
// ibv_modify_srq and ibv_query_srq describe; what rxe refuses is
// ErrInvalid and changes nothing; a resize keeps the WRs in order.
// Embedded and attached alike.
func TestSRQLimit(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		limits := make(chan *nic.SRQ, 4)
		cfg := nic.Config{OnSRQLimit: func(s *nic.SRQ) { limits <- s }}
		var b *end
		if p.attached {
			cfg.Attach = startDaemon(t, nic.Config{}).path
			dev, err := nic.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			b = attachedEndOn(t, dev)
		} else {
			b = openEnd(t, cfg)
		}
		a := openEnd(t, nic.Config{})
		srq, err := b.pd.CreateSRQ(8, 1)
		if err != nil {
			t.Fatal(err)
		}
		_, qa := qpOn(t, b, a, nic.QPConfig{SRQ: srq})
		posted := 0
		postRecvs := func(n int) {
			for range n {
				if err := srq.PostRecv(&verbs.RecvWR{ID: uint64(posted), SGL: []verbs.SGE{b.mr.SGE(posted*64, 64)}}); err != nil {
					t.Fatal(err)
				}
				posted++
			}
		}
		sent := 0
		send := func() verbs.WC {
			t.Helper()
			wr := &verbs.SendWR{ID: uint64(sent), Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 8)}}
			if err := qa.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			sent++
			return nictest.Wait(t, b.cq)
		}
		expectAttr := func(when string, want verbs.SRQAttr) {
			t.Helper()
			if got := srq.Attr(); got != want {
				t.Errorf("%s: Attr = %+v, want %+v", when, got, want)
			}
		}
		postRecvs(4)
		for _, c := range []struct {
			name string
			attr verbs.SRQAttr
			mask verbs.SRQAttrMask
		}{
			{"limit past max_wr", verbs.SRQAttr{Limit: 9}, verbs.SRQLimit},
			{"max_wr below the WRs posted", verbs.SRQAttr{MaxWR: 3}, verbs.SRQMaxWR},
			{"max_wr 0", verbs.SRQAttr{}, verbs.SRQMaxWR},
			{"max_wr past the device's", verbs.SRQAttr{MaxWR: qp.MaxSRQWR + 1}, verbs.SRQMaxWR},
			{"limit past the new max_wr", verbs.SRQAttr{MaxWR: 5, Limit: 6}, verbs.SRQMaxWR | verbs.SRQLimit},
		} {
			if err := srq.Modify(&c.attr, c.mask); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("Modify with %s: %v, want ErrInvalid", c.name, err)
			}
		}
		expectAttr("after the refused modifies", verbs.SRQAttr{MaxWR: 8, MaxSGE: 1})
		if err := srq.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
			t.Fatal(err)
		}
		expectAttr("armed", verbs.SRQAttr{MaxWR: 8, MaxSGE: 1, Limit: 3})
		if wc := send(); wc.Status != verbs.Success || wc.ID != 0 {
			t.Fatalf("first SEND: %v, want the SRQ's WR 0", &wc)
		}
		select {
		case <-limits:
			t.Error("OnSRQLimit called with 3 WRs left, limit 3")
		case <-time.After(100 * time.Millisecond):
		}
		expectAttr("3 WRs left", verbs.SRQAttr{MaxWR: 8, MaxSGE: 1, Limit: 3})
		send()
		select {
		case s := <-limits:
			if s != srq {
				t.Errorf("OnSRQLimit called with SRQ %p, want %p", s, srq)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("OnSRQLimit not called once 2 WRs were left, limit 3")
		}
		expectAttr("limit reached", verbs.SRQAttr{MaxWR: 8, MaxSGE: 1})
		send()
		select {
		case <-limits:
			t.Error("OnSRQLimit called again without the limit re-armed")
		case <-time.After(100 * time.Millisecond):
		}

		// 1 WR left: grow the SRQ to 16, fill it, and see the SENDs take
		// the WRs in the order they were posted.
		if err := srq.Modify(&verbs.SRQAttr{MaxWR: 16}, verbs.SRQMaxWR); err != nil {
			t.Fatal(err)
		}
		expectAttr("resized", verbs.SRQAttr{MaxWR: 16, MaxSGE: 1})
		postRecvs(15)
		if err := srq.PostRecv(&verbs.RecvWR{ID: 99}); !errors.Is(err, nic.ErrNoMem) {
			t.Errorf("PostRecv to a full SRQ of 16: %v, want ErrNoMem", err)
		}
		for want := 3; want < 6; want++ {
			if wc := send(); wc.ID != uint64(want) {
				t.Errorf("SEND %d took WR %d, want %d", sent, wc.ID, want)
			}
		}
		if err := srq.Modify(&verbs.SRQAttr{MaxWR: 13}, verbs.SRQMaxWR); err != nil {
			t.Errorf("shrinking the SRQ to the 13 WRs it holds: %v", err)
		}
		if wc := send(); wc.ID != 6 {
			t.Errorf("after the shrink a SEND took WR %d, want 6", wc.ID)
		}
	})
}

// TestCQResize: a CQ resized keeps the completions not polled, in order,
// and holds as many as its new depth; a depth below the completions
// waiting, 0 or past the device's is ErrInvalid. Embedded and attached
// alike.
func TestCQResize(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		b := p.end(t, nic.Config{})
		a := openEnd(t, nic.Config{})
		cq, err := b.dev.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		q, _ := qpOn(t, b, a, nic.QPConfig{SendCQ: cq})
		id := uint64(0)
		write := func(n int) {
			t.Helper()
			want := cq.Len() + n
			for range n {
				id++
				wr := &verbs.SendWR{ID: id, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{b.mr.SGE(0, 8)},
					RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}
				if err := q.PostSend(wr); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(10 * time.Second)
			for cq.Len() < want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		poll := func(want ...uint64) {
			t.Helper()
			wcs := make([]verbs.WC, 16)
			n, err := cq.Poll(wcs)
			if err != nil || n != len(want) {
				t.Fatalf("Poll: %d completions, %v; want %d", n, err, len(want))
			}
			for i, w := range want {
				if wcs[i].ID != w || wcs[i].Status != verbs.Success {
					t.Errorf("completion %d: %v, want wr_id %d SUCCESS", i, &wcs[i], w)
				}
			}
		}
		write(3)
		for _, depth := range []int{2, 0, qp.MaxCQE + 1} {
			if err := cq.Resize(depth); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("Resize(%d) holding 3 completions: %v, want ErrInvalid", depth, err)
			}
		}
		if err := cq.Resize(8); err != nil {
			t.Fatal(err)
		}
		write(5)
		poll(1, 2, 3, 4, 5, 6, 7, 8)
		if err := cq.Resize(2); err != nil {
			t.Fatal(err)
		}
		write(2)
		poll(9, 10)
	})
}
