package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/verbs"
)

// TestSolicited: a receive completion carries WCSolicited when its message
// was sent with verbs.Solicited (the SE bit of its last packet), whatever
// its size and opcode, and the CQ's counts of completions written
// (Written) grow with each push, the solicited count with those that wake
// a CQ armed for solicited ones, and stay as they are when it is polled.
func TestSolicited(t *testing.T) {
	cq := newTestCQ(t, 16)
	s, a, b := pairWithCQs(t, nil, cq)
	for i := range 4 {
		postRecv(t, b, &verbs.RecvWR{ID: uint64(10 + i), SGL: sgl(b.sge(4096, 3*testMTU))})
	}
	steps := []struct {
		name      string
		wr        verbs.SendWR
		solicited bool
		written   uint32 // Written's solicited count once it completed
	}{
		{"send", verbs.SendWR{Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 8))}, false, 0},
		{"send of three packets, solicited", verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Solicited, SGL: sgl(a.sge(0, 2*testMTU+1))}, true, 1},
		{"write-imm, solicited", verbs.SendWR{Opcode: verbs.WRWriteImm, Flags: verbs.Solicited, SGL: sgl(a.sge(0, 8)), Imm: 1, RemoteAddr: b.va(64), RKey: b.region.RKey()}, true, 2},
		{"send-imm", verbs.SendWR{Opcode: verbs.WRSendImm, SGL: sgl(a.sge(0, 8)), Imm: 2}, false, 2},
	}
	for i, st := range steps {
		post(t, a, &st.wr)
		s.run(time.Second, func() bool { return cq.Len() == i+1 })
		if all, sol := cq.Written(); all != uint32(i+1) || sol != st.written {
			t.Errorf("after %s: Written %d, %d, want %d, %d", st.name, all, sol, i+1, st.written)
		}
	}
	var wcs [2]verbs.WC
	for _, poll := range []struct{ n int }{{2}, {1}, {1}} {
		before := 4 - cq.Len()
		n, err := cq.Poll(wcs[:poll.n])
		if err != nil || n != poll.n {
			t.Fatalf("Poll(%d) = %d, %v", poll.n, n, err)
		}
		for j, wc := range wcs[:n] {
			st := steps[before+j]
			if got := wc.Flags&verbs.WCSolicited != 0; got != st.solicited || wc.Status != verbs.Success {
				t.Errorf("%s: completion %v, solicited %v, want %v", st.name, &wc, got, st.solicited)
			}
		}
		if all, sol := cq.Written(); all != 4 || sol != 2 {
			t.Errorf("with %d completions left: Written %d, %d, want 4, 2", cq.Len(), all, sol)
		}
	}
}
