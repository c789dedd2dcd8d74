package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
)

// TestUCBadRecvWR: a receive WR whose lkey the responder cannot write
// through is an error of the QP whatever its transport (IBTA class A; rxe
// completes the WR with an error and moves the QP to ERR): on UC too the WR
// completes with LOC_PROT_ERR, as on RC and UD, rather than vanish.
func TestUCBadRecvWR(t *testing.T) {
	s, a, b := pairOf(t, qp.UC, defaultAttr())
	postRecv(t, b, &qp.RecvWR{ID: 1, SGL: sgl(qp.SGE{Addr: b.va(0), Length: 4096, LKey: b.region.LKey() ^ 0x100})})
	postRecv(t, b, &qp.RecvWR{ID: 2, SGL: sgl(b.sge(0, 4096))})
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRSend, SGL: sgl(a.sge(0, 64))})
	s.settle(time.Second)
	wcs := b.poll()
	if len(wcs) != 2 {
		t.Fatalf("b has %d completions %v, want the bad WR's error and the next WR's flush", len(wcs), wcs)
	}
	expectWC(t, wcs[0], qp.WC{ID: 1, Status: qp.LocProtErr, Opcode: qp.WCRecv, QPN: b.qp.Num()})
	expectWC(t, wcs[1], qp.WC{ID: 2, Status: qp.WRFlushErr, Opcode: qp.WCRecv, QPN: b.qp.Num()})
	if st := b.qp.Status(); st.State != qp.Err || st.Cause != qp.LocProtErr {
		t.Errorf("b is %s (cause %s), want ERR (cause LOC_PROT_ERR)", st.State, st.Cause)
	}
}
