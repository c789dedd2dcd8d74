package qp_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// countFrom returns a drop hook that loses nothing and counts the packets
// h sends into n.
func countFrom(h *host, n *int) func(*host, *wire.Packet) bool {
	return func(from *host, _ *wire.Packet) bool {
		if from == h {
			*n++
		}
		return false
	}
}

// TestUCOperations: an unreliable connected QP carries WRITE, WRITE with
// immediate, SEND and SEND with immediate (IBTA table 38, the UC opcodes);
// the responder never answers (UC has no ACKs), and the requester completes
// each WR as soon as its last packet is sent (rxe: a UC or UD WQE is done
// once sent).
func TestUCOperations(t *testing.T) {
	cases := []struct {
		name   string
		op     verbs.WROpcode
		recv   bool           // the message consumes a receive WR
		recvOp verbs.WCOpcode // its opcode at the responder
		imm    bool
	}{
		{"write", verbs.WRWrite, false, 0, false},
		{"write-imm", verbs.WRWriteImm, true, verbs.WCRecvWriteImm, true},
		{"send", verbs.WRSend, true, verbs.WCRecv, false},
		{"send-imm", verbs.WRSendImm, true, verbs.WCRecv, true},
	}
	for _, c := range cases {
		for _, n := range []uint32{0, 100, 3*testMTU + 5} {
			t.Run(c.name+"/"+itoa(n), func(t *testing.T) {
				s, a, b := pairOf(t, verbs.UC, defaultAttr())
				var fromB int
				s.drop = countFrom(b, &fromB)
				fill(a.buf[:n], 7)
				if c.recv {
					postRecv(t, b, &verbs.RecvWR{ID: 50, SGL: sgl(b.sge(8192, 8192))})
				}
				wr := &verbs.SendWR{ID: 1, Opcode: c.op, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)), Imm: 0xBEEF}
				if c.op == verbs.WRWrite || c.op == verbs.WRWriteImm {
					wr.RemoteAddr, wr.RKey = b.va(8192), b.region.RKey()
				}
				post(t, a, wr)
				s.transmitAll()
				if got := a.poll(); len(got) != 1 {
					t.Fatalf("%d completions once the packets are sent, want 1 before anything arrives", len(got))
				}
				want := verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: n, QPN: a.qp.Num()}
				if c.op == verbs.WRWrite || c.op == verbs.WRWriteImm {
					want.Opcode = verbs.WCWrite
				}
				if c.imm {
					want.Flags = verbs.WCWithImm
				}
				expectWC(t, a.wcs[0], want)
				s.settle(time.Second)
				if !bytes.Equal(b.buf[8192:8192+n], a.buf[:n]) {
					t.Error("target memory differs from the source")
				}
				if fromB != 0 {
					t.Errorf("the UC responder sent %d packets, want none", fromB)
				}
				got := b.poll()
				if !c.recv {
					if len(got) != 0 {
						t.Errorf("a plain WRITE produced receive completions %v", got)
					}
					return
				}
				if len(got) != 1 {
					t.Fatalf("%d receive completions, want 1", len(got))
				}
				want = verbs.WC{ID: 50, Status: verbs.Success, Opcode: c.recvOp, ByteLen: n, QPN: b.qp.Num()}
				if c.imm {
					want.Flags, want.Imm = verbs.WCWithImm, 0xBEEF
				}
				expectWC(t, got[0], want)
			})
		}
	}
}

// TestUCSendWithoutRecvWR: a UC SEND that finds no receive WR is dropped
// (IBTA class D; rxe drops it), never RNR-NAKed: UC has no NAKs. The next
// SEND, once a receive WR is posted, is delivered.
func TestUCSendWithoutRecvWR(t *testing.T) {
	s, a, b := pairOf(t, verbs.UC, defaultAttr())
	var fromB int
	s.drop = countFrom(b, &fromB)
	fill(a.buf[:2*testMTU], 3)
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 2*testMTU))})
	s.settle(time.Second)
	if n := b.counter(verbs.UCDroppedMsgs); n != 1 {
		t.Errorf("uc_dropped_msgs = %d, want 1", n)
	}
	if n := b.counter(verbs.SendRNRErr); n != 0 || fromB != 0 {
		t.Errorf("b sent %d packets (%d RNR NAKs), want none", fromB, n)
	}
	postRecv(t, b, &verbs.RecvWR{ID: 5, SGL: sgl(b.sge(0, 4096))})
	post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(100, 300))})
	s.settle(time.Second)
	wcs := a.poll()
	if len(wcs) != 2 {
		t.Fatalf("a has %d completions, want 2: a UC SEND completes once sent, received or not", len(wcs))
	}
	expectWC(t, wcs[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: 2 * testMTU, QPN: a.qp.Num()})
	expectWC(t, wcs[1], verbs.WC{ID: 2, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: 300, QPN: a.qp.Num()})
	expectWC(t, b.onlyWC(t), verbs.WC{ID: 5, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: 300, QPN: b.qp.Num()})
	if !bytes.Equal(b.buf[:300], a.buf[100:400]) {
		t.Error("received data differs")
	}
}

// TestUCRemoteErrorsDropped: a UC WRITE the responder must refuse is
// dropped silently (IBTA class D; rxe drops it, UC has no NAK): the
// requester completes it successfully, the responder stays in RTS and takes
// the next message.
func TestUCRemoteErrorsDropped(t *testing.T) {
	cases := []struct {
		name   string
		access mr.Access // the responder QP's access flags
		rkey   func(b *host) uint32
	}{
		{"bad-rkey", mr.RemoteWrite, func(b *host) uint32 { return b.region.RKey() ^ 0x100 }},
		{"qp-without-remote-write", mr.RemoteRead, func(b *host) uint32 { return b.region.RKey() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, a, b := pairOf(t, verbs.UC, defaultAttr())
			if err := b.qp.Modify(&verbs.Attr{AccessFlags: c.access}, verbs.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			var fromB int
			s.drop = countFrom(b, &fromB)
			fill(a.buf[:64], 9)
			postRecv(t, b, &verbs.RecvWR{ID: 5, SGL: sgl(b.sge(4096, 64))})
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: c.rkey(b)})
			post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64))})
			s.settle(time.Second)
			if got := a.poll(); len(got) != 2 || got[0].Status != verbs.Success || got[1].Status != verbs.Success {
				t.Fatalf("requester completions %v, want two successes", got)
			}
			if !bytes.Equal(b.buf[:64], make([]byte, 64)) {
				t.Error("the refused WRITE was placed")
			}
			expectWC(t, b.onlyWC(t), verbs.WC{ID: 5, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: 64, QPN: b.qp.Num()})
			if b.qp.State() != verbs.RTS || fromB != 0 || b.counter(verbs.UCDroppedMsgs) != 1 {
				t.Errorf("b is %s, sent %d packets, dropped %d messages; want RTS, none, 1", b.qp.State(), fromB, b.counter(verbs.UCDroppedMsgs))
			}
		})
	}
}

// TestUCRefusesReadAndAtomics: UC has no READ, ATOMIC or SEND with
// invalidate (IBTA table 38 lists them for RC only); posting them fails
// with EINVAL, as ibv_post_send does on rxe.
func TestUCRefusesReadAndAtomics(t *testing.T) {
	_, a, b := pairOf(t, verbs.UC, defaultAttr())
	for _, op := range []verbs.WROpcode{verbs.WRRead, verbs.WRCompareSwap, verbs.WRFetchAdd, verbs.WRAtomicWrite, verbs.WRSendInv} {
		t.Run(op.String(), func(t *testing.T) {
			err := a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: op, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
			if !errors.Is(err, qp.ErrInvalid) {
				t.Errorf("PostSend(%s) on UC = %v, want ErrInvalid", op, err)
			}
		})
	}
	if st := a.qp.Status(); st.SendQueued != 0 || st.State != verbs.RTS {
		t.Errorf("after refused posts a is %+v, want RTS with nothing queued", st)
	}
}

// TestUCBadRecvWR: a receive WR whose lkey the responder cannot write
// through is an error of the QP whatever its transport (IBTA class A; rxe
// completes the WR with an error and moves the QP to ERR): on UC too the WR
// completes with LOC_PROT_ERR, as on RC and UD, rather than vanish.
func TestUCBadRecvWR(t *testing.T) {
	s, a, b := pairOf(t, verbs.UC, defaultAttr())
	postRecv(t, b, &verbs.RecvWR{ID: 1, SGL: sgl(verbs.SGE{Addr: b.va(0), Length: 4096, LKey: b.region.LKey() ^ 0x100})})
	postRecv(t, b, &verbs.RecvWR{ID: 2, SGL: sgl(b.sge(0, 4096))})
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 64))})
	s.settle(time.Second)
	wcs := b.poll()
	if len(wcs) != 2 {
		t.Fatalf("b has %d completions %v, want the bad WR's error and the next WR's flush", len(wcs), wcs)
	}
	expectWC(t, wcs[0], verbs.WC{ID: 1, Status: verbs.LocProtErr, Opcode: verbs.WCRecv, QPN: b.qp.Num()})
	expectWC(t, wcs[1], verbs.WC{ID: 2, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: b.qp.Num()})
	if st := b.qp.Status(); st.State != verbs.Err || st.Cause != verbs.LocProtErr {
		t.Errorf("b is %s (cause %s), want ERR (cause LOC_PROT_ERR)", st.State, st.Cause)
	}
}
