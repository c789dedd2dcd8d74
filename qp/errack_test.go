package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/verbs"
)

// TestErrorSendsOwedAck: a QP moved to the error state (ibv_modify_qp,
// or ibv_destroy_qp, which does so first) after it completed a receive
// but before it sent the ACK still sends it, so that the sender's SEND
// completes with success, not WR_FLUSH_ERR: a program that exits once
// it received the last message of a conversation must not fail its
// peer's last send.
func TestErrorSendsOwedAck(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	postRecv(t, b, &verbs.RecvWR{ID: 9, SGL: sgl(b.sge(0, 64))})
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8))})
	s.transmitAll() // the SEND, in flight to b
	for !s.deliverDue() {
		s.now = s.now.Add(time.Microsecond)
	}
	if wcs := b.poll(); len(wcs) != 1 || wcs[0].Status != verbs.Success {
		t.Fatalf("b's receive: %v", wcs)
	}
	if err := b.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	s.run(time.Minute, func() bool { return len(a.poll()) > 0 })
	if wc := a.wcs[0]; wc.ID != 1 || wc.Status != verbs.Success {
		t.Errorf("a's SEND, which b received before its error: %v, want SUCCESS", &wc)
	}
}
