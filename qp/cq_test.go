package qp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// newTestCQ returns a CQ of depth completions.
func newTestCQ(t *testing.T, depth int) *qp.CQ {
	t.Helper()
	cq, err := qp.NewCQ(depth)
	if err != nil {
		t.Fatal(err)
	}
	return cq
}

// pairWithCQs returns two connected RC hosts whose QPs complete into the
// given CQs (nil: the host's own).
func pairWithCQs(t *testing.T, aSend, bRecv *qp.CQ) (*sim, *host, *host) {
	a := newNode(t, "a", "10.0.0.1")
	b := newNode(t, "b", "10.0.0.2")
	cfgA, cfgB := qp.Config{}, qp.Config{}
	if aSend != nil {
		cfgA.SendCQ, cfgA.RecvCQ = aSend, a.cq
	}
	if bRecv != nil {
		cfgB.SendCQ, cfgB.RecvCQ = b.cq, bRecv
	}
	a.attach(t, verbs.RC, 0x11, cfgA)
	b.attach(t, verbs.RC, 0x22, cfgB)
	connect(t, a, b, defaultAttr())
	return newSim(t, a, b), a, b
}

// postWrites posts n signaled 8-byte WRITEs with IDs 1..n.
func postWrites(t *testing.T, a, b *host, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	}
}

// TestCQPoll: ibv_poll_cq returns completions oldest first, at most as many
// as asked for, and leaves the rest; Depth is the capacity, Len what waits.
func TestCQPoll(t *testing.T) {
	cq := newTestCQ(t, 8)
	s, a, b := pairWithCQs(t, cq, nil)
	postWrites(t, a, b, 5)
	s.run(time.Second, func() bool { return cq.Len() == 5 })
	if cq.Depth() != 8 {
		t.Errorf("Depth = %d, want 8", cq.Depth())
	}
	var wcs [10]verbs.WC
	steps := []struct {
		ask  int
		ids  []uint64
		left int
	}{{2, []uint64{1, 2}, 3}, {10, []uint64{3, 4, 5}, 0}, {10, nil, 0}}
	for _, st := range steps {
		n, err := cq.Poll(wcs[:st.ask])
		if err != nil || n != len(st.ids) {
			t.Fatalf("Poll(%d) = %d, %v; want %d, nil", st.ask, n, err, len(st.ids))
		}
		for i, id := range st.ids {
			if wcs[i].ID != id || wcs[i].Status != verbs.Success {
				t.Errorf("Poll(%d)[%d] = %v, want wr_id %d SUCCESS", st.ask, i, &wcs[i], id)
			}
		}
		if cq.Len() != st.left {
			t.Errorf("Len after Poll(%d) = %d, want %d", st.ask, cq.Len(), st.left)
		}
	}
}

// TestCQOverflow: a completion that does not fit is lost; the CQ reports
// EOVERFLOW once the completions it holds are polled, and the QP that lost
// a completion goes to ERR (IBTA: a CQ overrun is an error of the CQ and of
// the QPs completing into it; rxe moves the QP to ERR, class G).
func TestCQOverflow(t *testing.T) {
	t.Run("send", func(t *testing.T) {
		cq := newTestCQ(t, 2)
		s, a, b := pairWithCQs(t, cq, nil)
		postWrites(t, a, b, 3)
		s.run(time.Second, func() bool { return a.qp.State() == verbs.Err })
		checkOverflowed(t, cq, []uint64{1, 2})
		if st := a.qp.Status(); st.Cause != verbs.Success {
			t.Errorf("cause %s, want SUCCESS (no completion moved the QP to ERR)", st.Cause)
		}
		if b.qp.State() != verbs.RTS {
			t.Errorf("the peer is %s, want RTS: the overflow is a's", b.qp.State())
		}
	})
	t.Run("receive", func(t *testing.T) {
		cq := newTestCQ(t, 1)
		s, a, b := pairWithCQs(t, nil, cq)
		for i := range 2 {
			postRecv(t, b, &verbs.RecvWR{ID: uint64(i + 1), SGL: sgl(b.sge(uint64(i)*64, 64))})
			post(t, a, &verbs.SendWR{ID: uint64(i + 1), Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 8))})
		}
		s.run(time.Second, func() bool { return b.qp.State() == verbs.Err })
		checkOverflowed(t, cq, []uint64{1})
	})
}

// checkOverflowed polls cq dry: the completions with ids first, then
// ErrOverflow, again and again.
func checkOverflowed(t *testing.T, cq *qp.CQ, ids []uint64) {
	t.Helper()
	var wcs [16]verbs.WC
	if n, err := cq.Poll(wcs[:0]); n != 0 || err != nil {
		t.Errorf("Poll of no entries = %d, %v; want 0, nil while completions wait", n, err)
	}
	n, err := cq.Poll(wcs[:])
	if err != nil || n != len(ids) {
		t.Fatalf("first Poll = %d, %v; want the %d completions that fitted and no error yet", n, err, len(ids))
	}
	for i, id := range ids {
		if wcs[i].ID != id {
			t.Errorf("completion %d has wr_id %d, want %d", i, wcs[i].ID, id)
		}
	}
	for range 2 {
		if n, err := cq.Poll(wcs[:]); n != 0 || !errors.Is(err, qp.ErrOverflow) {
			t.Errorf("Poll of the drained CQ = %d, %v; want 0, ErrOverflow", n, err)
		}
	}
}

// TestCQNotify: the function installed by SetNotify runs after every
// completion is added, outside the CQ's lock (it may poll), and no more
// once replaced.
func TestCQNotify(t *testing.T) {
	cq := newTestCQ(t, 8)
	s, a, b := pairWithCQs(t, cq, nil)
	var calls, seen int
	cq.SetNotify(func() {
		calls++
		seen = cq.Len() // would deadlock under the CQ's lock
	})
	postWrites(t, a, b, 3)
	s.settle(time.Second)
	if calls != 3 || seen != 3 {
		t.Errorf("notify ran %d times and last saw %d completions, want 3 and 3", calls, seen)
	}
	cq.SetNotify(nil)
	postWrites(t, a, b, 1)
	s.settle(time.Second)
	if calls != 3 || cq.Len() != 4 {
		t.Errorf("after SetNotify(nil): %d calls, %d completions; want 3 and 4", calls, cq.Len())
	}
}

// TestNewCQDepth: ibv_create_cq refuses a depth of 0 or beyond the device's
// limit with EINVAL.
func TestNewCQDepth(t *testing.T) {
	for _, d := range []int{0, -1, 1<<22 + 1} {
		if _, err := qp.NewCQ(d); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("NewCQ(%d) = %v, want ErrInvalid", d, err)
		}
	}
	if cq, err := qp.NewCQ(1); err != nil || cq.Depth() != 1 {
		t.Errorf("NewCQ(1) = %v, %v", cq, err)
	}
}

// TestCQResize: a CQ resized keeps its completions in order and takes as
// many as its new depth; rxe refuses (EINVAL) a depth below the
// completions it holds, 0 or past max_cqe.
func TestCQResize(t *testing.T) {
	cq := newTestCQ(t, 4)
	s, a, b := pairWithCQs(t, cq, nil)
	postWrites(t, a, b, 3)
	s.run(time.Second, func() bool { return cq.Len() == 3 })
	for _, depth := range []int{2, 0, -1, qp.MaxCQE + 1} {
		if err := cq.Resize(depth); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("Resize(%d) holding 3 = %v, want ErrInvalid", depth, err)
		}
	}
	var wcs [8]verbs.WC
	if n, _ := cq.Poll(wcs[:1]); n != 1 || wcs[0].ID != 1 {
		t.Fatalf("Poll = %d (wr_id %d), want wr_id 1", n, wcs[0].ID)
	}
	for _, depth := range []int{2, 8} {
		if err := cq.Resize(depth); err != nil || cq.Depth() != depth {
			t.Fatalf("Resize(%d) = %v, Depth %d", depth, err, cq.Depth())
		}
	}
	postWrites(t, a, b, 5)
	s.run(time.Second, func() bool { return cq.Len() == 7 })
	n, err := cq.Poll(wcs[:])
	if err != nil || n != 7 {
		t.Fatalf("Poll = %d, %v; want 7 completions", n, err)
	}
	for i, id := range []uint64{2, 3, 1, 2, 3, 4, 5} {
		if wcs[i].ID != id || wcs[i].Status != verbs.Success {
			t.Errorf("completion %d = %v, want wr_id %d SUCCESS", i, &wcs[i], id)
		}
	}
}
