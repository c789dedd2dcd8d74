package qp_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestUnsignaled: without sq_sig_all an unsignaled WR produces no completion
// when it succeeds, but does when it fails (IBTA; ibv_post_send(3)); a
// signaled WR after unsignaled ones completes them with it, freeing their
// send queue slots.
func TestUnsignaled(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		a := newHost(t, "a", "10.0.0.1", verbs.RC, 0x11, qp.Config{MaxSendWR: 4})
		b := newHost(t, "b", "10.0.0.2", verbs.RC, 0x22, qp.Config{})
		connect(t, a, b, defaultAttr())
		s := newSim(t, a, b)
		for round := range 2 {
			for i := range 4 {
				flags := verbs.SendFlags(0)
				if i == 3 {
					flags = verbs.Signaled
				}
				post(t, a, &verbs.SendWR{ID: uint64(10*round + i), Opcode: verbs.WRWrite, Flags: flags, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
			}
			s.settle(time.Second)
			wcs := a.poll()
			if len(wcs) != 1 {
				t.Fatalf("round %d: %d completions %v, want only the signaled WR's", round, len(wcs), wcs)
			}
			expectWC(t, wcs[0], verbs.WC{ID: uint64(10*round + 3), Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()})
			if n := a.qp.Status().SendQueued; n != 0 {
				t.Fatalf("round %d: %d WRs still queued, want the send queue free again", round, n)
			}
		}
	})
	t.Run("error", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey() ^ 0x100})
		s.settle(time.Second)
		wcs := a.poll()
		if len(wcs) != 1 {
			t.Fatalf("%d completions %v, want the failed WR's alone", len(wcs), wcs)
		}
		expectWC(t, wcs[0], verbs.WC{ID: 2, Status: verbs.RemAccessErr, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()})
	})
	t.Run("sq-sig-all", func(t *testing.T) {
		a := newHost(t, "a", "10.0.0.1", verbs.RC, 0x11, qp.Config{SignalAll: true})
		b := newHost(t, "b", "10.0.0.2", verbs.RC, 0x22, qp.Config{})
		connect(t, a, b, defaultAttr())
		s := newSim(t, a, b)
		for i := range 3 {
			post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		}
		s.settle(time.Second)
		if n := len(a.poll()); n != 3 {
			t.Errorf("%d completions with sq_sig_all, want 3", n)
		}
	})
}

// TestInline: IBV_SEND_INLINE data is copied when the WR is posted: the
// caller may overwrite it at once and the target still gets the original
// (ibv_post_send(3)); more than max_inline_data bytes are refused with
// EINVAL.
func TestInline(t *testing.T) {
	for _, c := range []struct {
		op verbs.WROpcode
		wc verbs.WCOpcode
	}{{verbs.WRWrite, verbs.WCWrite}, {verbs.WRSend, verbs.WCSend}} {
		t.Run(c.op.String(), func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			data := make([]byte, 200)
			fill(data, 11)
			want := bytes.Clone(data)
			postRecv(t, b, &verbs.RecvWR{ID: 5, SGL: sgl(b.sge(4096, 4096))})
			post(t, a, &verbs.SendWR{ID: 1, Opcode: c.op, Flags: verbs.Signaled | verbs.Inline, Inline: data, RemoteAddr: b.va(4096), RKey: b.region.RKey()})
			fill(data, 99)
			expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: c.wc, ByteLen: 200, QPN: a.qp.Num()})
			if !bytes.Equal(b.buf[4096:4296], want) {
				t.Error("the target got the overwritten buffer, not the data at post time")
			}
		})
	}
	t.Run("too-large", func(t *testing.T) {
		_, a, b := pair(t, defaultAttr()) // max_inline_data 256
		err := a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Inline, Inline: make([]byte, 257), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		if !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("257 bytes inline = %v, want ErrInvalid", err)
		}
		if err := a.qp.PostSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRead, Flags: verbs.Inline, Inline: make([]byte, 8), RemoteAddr: b.va(0), RKey: b.region.RKey()}); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("inline READ = %v, want ErrInvalid", err)
		}
	})
}

// TestScatterGather: the SGEs of a WR are one message, gathered in order
// for WRITE and SEND and scattered in order for READ and into a receive WR,
// across packet boundaries.
func TestScatterGather(t *testing.T) {
	// Three SGEs of 700, 1500 and 900 bytes: 3100 bytes, four packets at
	// MTU 1024, with SGE boundaries inside packets.
	lens := []uint32{700, 1500, 900}
	offs := []uint64{0, 10000, 20000}
	const total = 3100
	three := func(h *host) []verbs.SGE {
		var l []verbs.SGE
		for i := range lens {
			l = append(l, h.sge(offs[i], lens[i]))
		}
		return l
	}
	joined := func(h *host) []byte {
		var out []byte
		for i := range lens {
			out = append(out, h.buf[offs[i]:offs[i]+uint64(lens[i])]...)
		}
		return out
	}
	t.Run("write-gathers", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		fill(a.buf[:30000], 1)
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: three(a), RemoteAddr: b.va(50000), RKey: b.region.RKey()})
		expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: total, QPN: a.qp.Num()})
		if !bytes.Equal(b.buf[50000:50000+total], joined(a)) {
			t.Error("the target does not hold the three SGEs in order")
		}
	})
	t.Run("read-scatters", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		fill(b.buf[50000:50000+total], 2)
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: three(a), RemoteAddr: b.va(50000), RKey: b.region.RKey()})
		expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCRead, ByteLen: total, QPN: a.qp.Num()})
		if !bytes.Equal(joined(a), b.buf[50000:50000+total]) {
			t.Error("the READ was not scattered over the three SGEs in order")
		}
	})
	t.Run("send-into-three", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		fill(a.buf[50000:50000+total], 3)
		postRecv(t, b, &verbs.RecvWR{ID: 7, SGL: three(b)})
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(50000, total))})
		expectWC(t, s.waitWC(b, 1, time.Second)[0], verbs.WC{ID: 7, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: total, QPN: b.qp.Num()})
		if !bytes.Equal(joined(b), a.buf[50000:50000+total]) {
			t.Error("the SEND was not scattered over the receive WR's three SGEs in order")
		}
	})
	t.Run("too-many-sges", func(t *testing.T) {
		_, a, b := pair(t, defaultAttr()) // max_send_sge 4
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, SGL: make([]verbs.SGE, 5), RemoteAddr: b.va(0), RKey: b.region.RKey()}); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("5 SGEs = %v, want ErrInvalid", err)
		}
		if err := b.qp.PostRecv(&verbs.RecvWR{SGL: make([]verbs.SGE, 5)}); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("receive WR with 5 SGEs = %v, want ErrInvalid", err)
		}
	})
}

// TestLocalErrors: errors of the local WRs and of the responder's receive
// WRs, with the statuses rxe and the IBTA give them.
func TestLocalErrors(t *testing.T) {
	t.Run("bad-lkey-at-requester", func(t *testing.T) {
		// A WR whose SGE does not resolve completes with LOC_PROT_ERR
		// without sending anything, after the WRs before it; the QP goes
		// to ERR and the WRs behind are flushed.
		s, a, b := pair(t, defaultAttr())
		var fromA int
		s.drop = countFrom(a, &fromA)
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey(), Flags: verbs.Signaled})
		bad := a.sge(0, 8)
		bad.LKey ^= 0x100
		post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, SGL: sgl(bad), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		post(t, a, &verbs.SendWR{ID: 3, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 8))})
		s.settle(time.Second)
		wcs := a.poll()
		want := []verbs.WC{
			{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()},
			{ID: 2, Status: verbs.LocProtErr, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()},
			{ID: 3, Status: verbs.WRFlushErr, Opcode: verbs.WCSend, ByteLen: 8, QPN: a.qp.Num()},
		}
		if len(wcs) != len(want) {
			t.Fatalf("completions %v, want %d", wcs, len(want))
		}
		for i := range want {
			expectWC(t, wcs[i], want[i])
		}
		if fromA != 1 {
			t.Errorf("a sent %d packets, want only the first WRITE's", fromA)
		}
		if st := a.qp.Status(); st.State != verbs.Err || st.Cause != verbs.LocProtErr {
			t.Errorf("a is %s (cause %s), want ERR (LOC_PROT_ERR)", st.State, st.Cause)
		}
	})
	t.Run("read-into-read-only-buffer", func(t *testing.T) {
		// A READ writes into its SGEs, which needs a region with
		// LOCAL_WRITE (ibv_reg_mr(3)); rxe checks the lkey for it.
		s, a, b := pair(t, defaultAttr())
		ro, err := a.mem.Register(a.pd, make([]byte, 64), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := a.mem.Deregister(ro); err != nil {
				t.Error(err)
			}
		}()
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRRead, SGL: sgl(verbs.SGE{Addr: ro.Addr(), Length: 8, LKey: ro.LKey()}), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.LocProtErr, Opcode: verbs.WCRead, ByteLen: 8, QPN: a.qp.Num()})
	})
	t.Run("bad-lkey-in-receive-WR", func(t *testing.T) {
		// The responder cannot place a SEND in its receive WR: the WR
		// completes with LOC_PROT_ERR, the requester gets NAK remote
		// operational error (REM_OP_ERR), both QPs go to ERR. (rxe gives
		// the receive WR LOC_QP_OP_ERR; mlx5 and the IBTA L_Key rule
		// LOC_PROT_ERR.)
		s, a, b := pair(t, defaultAttr())
		bad := b.sge(0, 64)
		bad.LKey ^= 0x100
		postRecv(t, b, &verbs.RecvWR{ID: 5, SGL: sgl(bad)})
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 64))})
		s.settle(time.Second)
		expectWC(t, a.onlyWC(t), verbs.WC{ID: 1, Status: verbs.RemOpErr, Opcode: verbs.WCSend, ByteLen: 64, QPN: a.qp.Num()})
		expectWC(t, b.onlyWC(t), verbs.WC{ID: 5, Status: verbs.LocProtErr, Opcode: verbs.WCRecv, QPN: b.qp.Num()})
		if a.qp.State() != verbs.Err || b.qp.State() != verbs.Err {
			t.Errorf("states %s and %s, want ERR and ERR", a.qp.State(), b.qp.State())
		}
	})
	t.Run("send-larger-than-receive-WR", func(t *testing.T) {
		// The receive WR is too small: LOC_LEN_ERR at the responder, NAK
		// invalid request, REM_INV_REQ_ERR at the requester.
		s, a, b := pair(t, defaultAttr())
		postRecv(t, b, &verbs.RecvWR{ID: 5, SGL: sgl(b.sge(0, 1000))})
		post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 1001))})
		var naks []wire.Syndrome
		s.drop = func(h *host, p *wire.Packet) bool {
			if h == b && p.AETH != nil && p.AETH.Syndrome().Type() == wire.AckTypeNak {
				naks = append(naks, p.AETH.Syndrome())
			}
			return false
		}
		s.settle(time.Second)
		expectWC(t, a.onlyWC(t), verbs.WC{ID: 1, Status: verbs.RemInvReqErr, Opcode: verbs.WCSend, ByteLen: 1001, QPN: a.qp.Num()})
		expectWC(t, b.onlyWC(t), verbs.WC{ID: 5, Status: verbs.LocLenErr, Opcode: verbs.WCRecv, QPN: b.qp.Num()})
		if len(naks) != 1 || naks[0] != wire.NakSyndrome(wire.NakInvalidRequest) {
			t.Errorf("NAKs %v, want one NAK invalid request", naks)
		}
	})
}
