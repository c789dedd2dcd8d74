package qp_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/mr/keyspace"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Memory windows through the QP: type 2 windows are bound by a BIND_MW
// work request on the QP that will serve them and invalidated by LOCAL_INV
// or by a received SEND WITH INVALIDATE (IBTA type 2B windows, as rxe
// implements them; the checks themselves are mr's and tested there).

const (
	winOff = 64 * 1024 // the window covers [winOff, winOff+winLen) of b's region
	winLen = 4096
)

// newWindow allocates a type 2 window in h's protection domain.
func newWindow(t *testing.T, h *host) *mr.Window {
	t.Helper()
	w, err := h.mem.AllocWindow(h.pd, mr.WindowType2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.mem.DeallocWindow(w); err != nil {
			t.Error(err)
		}
	})
	return w
}

// bindWR returns a BIND_MW WR binding w to winLen bytes at off of h's
// region with access acc and the next rkey variant.
func bindWR(h *host, w *mr.Window, off uint64, acc mr.Access) *verbs.SendWR {
	return &verbs.SendWR{ID: 100, Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &mr.BindRequest{
		WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: h.region.LKey(),
		Addr: h.va(off), Length: winLen, Access: acc}}
}

// boundWindow returns a pair and a window of b bound by b's QP to
// [winOff, winOff+winLen) with remote read and write.
func boundWindow(t *testing.T) (*sim, *host, *host, *mr.Window) {
	t.Helper()
	s, a, b := pair(t, defaultAttr())
	w := newWindow(t, b)
	old := w.RKey()
	post(t, b, bindWR(b, w, winOff, mr.RemoteWrite|mr.RemoteRead))
	expectWC(t, s.waitWC(b, 1, time.Second)[0], verbs.WC{ID: 100, Status: verbs.Success, Opcode: verbs.WCBindMW, QPN: b.qp.Num()})
	if w.RKey() != keyspace.IncRKey(old) {
		t.Fatalf("after the bind the window's rkey is %#x, want %#x", w.RKey(), keyspace.IncRKey(old))
	}
	return s, a, b, w
}

// windowBound reports whether w is bound.
func windowBound(h *host, w *mr.Window) bool {
	for wi := range h.mem.Windows() {
		if wi.RKey == w.RKey() {
			return wi.Bound
		}
	}
	return false
}

// TestMemoryWindowAccess: after BIND_MW completes, remote operations
// through the window's rkey reach its range of the region and nothing
// else: outside it, or beyond its access, the responder NAKs remote access
// error (REM_ACCESS_ERR).
func TestMemoryWindowAccess(t *testing.T) {
	cases := []struct {
		name   string
		op     verbs.WROpcode
		off    uint64 // in b's region
		n      uint32
		status verbs.WCStatus
	}{
		{"write-inside", verbs.WRWrite, winOff + 100, 200, verbs.Success},
		{"read-inside", verbs.WRRead, winOff + winLen - 64, 64, verbs.Success},
		{"write-whole", verbs.WRWrite, winOff, winLen, verbs.Success},
		{"write-past-end", verbs.WRWrite, winOff + winLen - 8, 16, verbs.RemAccessErr},
		{"write-before-start", verbs.WRWrite, winOff - 8, 16, verbs.RemAccessErr},
		{"atomic-not-granted", verbs.WRFetchAdd, winOff, 8, verbs.RemAccessErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, a, b, w := boundWindow(t)
			fill(a.buf[:c.n], 5)
			fill(b.buf[c.off:c.off+uint64(c.n)], 6)
			before := bytes.Clone(b.buf[c.off : c.off+uint64(c.n)])
			post(t, a, &verbs.SendWR{ID: 1, Opcode: c.op, Flags: verbs.Signaled, SGL: sgl(a.sge(0, c.n)), RemoteAddr: b.va(c.off), RKey: w.RKey(), CompareAdd: 1})
			wc := s.waitWC(a, 1, time.Second)[0]
			if wc.Status != c.status {
				t.Fatalf("completion %v, want %s", &wc, c.status)
			}
			switch {
			case c.status != verbs.Success:
				if !bytes.Equal(b.buf[c.off:c.off+uint64(c.n)], before) {
					t.Error("a refused access changed the target")
				}
			case c.op == verbs.WRWrite && !bytes.Equal(b.buf[c.off:c.off+uint64(c.n)], a.buf[:c.n]),
				c.op == verbs.WRRead && !bytes.Equal(a.buf[:c.n], before):
				t.Error("data did not move through the window")
			}
		})
	}
}

// TestMemoryWindowLocalInvalidate: LOCAL_INV on the QP the window is bound
// to frees it (completion LOCAL_INV); its rkey no longer works.
func TestMemoryWindowLocalInvalidate(t *testing.T) {
	s, a, b, w := boundWindow(t)
	post(t, b, &verbs.SendWR{ID: 101, Opcode: verbs.WRLocalInv, Flags: verbs.Signaled, InvalidateRKey: w.RKey()})
	expectWC(t, s.waitWC(b, 2, time.Second)[1], verbs.WC{ID: 101, Status: verbs.Success, Opcode: verbs.WCLocalInv, QPN: b.qp.Num()})
	if windowBound(b, w) {
		t.Error("the window is still bound")
	}
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(winOff), RKey: w.RKey()})
	if wc := s.waitWC(a, 1, time.Second)[0]; wc.Status != verbs.RemAccessErr {
		t.Errorf("WRITE through the invalidated window completed %v, want REM_ACCESS_ERR", &wc)
	}
}

// TestMemoryWindowSendInvalidate: a SEND WITH INVALIDATE invalidates the
// window its IETH names at the responder, whose receive completion says so
// (IBV_WC_WITH_INV, invalidated_rkey); an IETH rkey that names no window
// bound to the QP is NAKed invalid request.
func TestMemoryWindowSendInvalidate(t *testing.T) {
	for _, n := range []uint32{32, 2*testMTU + 1} { // SEND ONLY or LAST with invalidate
		t.Run("valid/"+itoa(n), func(t *testing.T) {
			s, a, b, w := boundWindow(t)
			rkey := w.RKey()
			fill(a.buf[:n], 7)
			postRecv(t, b, &verbs.RecvWR{ID: 8, SGL: sgl(b.sge(0, 4*testMTU))})
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSendInv, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)), InvalidateRKey: rkey})
			expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: n, QPN: a.qp.Num()})
			expectWC(t, s.waitWC(b, 2, time.Second)[1], verbs.WC{ID: 8, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: n, QPN: b.qp.Num(),
				Flags: verbs.WCWithInv, InvalidatedRKey: rkey})
			if !bytes.Equal(b.buf[:n], a.buf[:n]) {
				t.Error("received data differs")
			}
			if windowBound(b, w) {
				t.Error("the window is still bound")
			}
			post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(winOff), RKey: rkey})
			if wc := s.waitWC(a, 2, time.Second)[1]; wc.Status != verbs.RemAccessErr {
				t.Errorf("WRITE through the invalidated window completed %v, want REM_ACCESS_ERR", &wc)
			}
		})
	}
	badKeys := []struct {
		name string
		key  func(b *host, w *mr.Window) uint32
	}{
		{"stale-window-key", func(_ *host, w *mr.Window) uint32 { return w.RKey() ^ 1 }},
		{"region-key", func(b *host, _ *mr.Window) uint32 { return b.region.RKey() }},
	}
	for _, c := range badKeys {
		t.Run(c.name, func(t *testing.T) {
			s, a, b, w := boundWindow(t)
			var naks []wire.Syndrome
			s.drop = func(h *host, p *wire.Packet) bool {
				if h == b && p.AETH != nil && p.AETH.Syndrome().Type() == wire.AckTypeNak {
					naks = append(naks, p.AETH.Syndrome())
				}
				return false
			}
			postRecv(t, b, &verbs.RecvWR{ID: 8, SGL: sgl(b.sge(0, 64))})
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSendInv, SGL: sgl(a.sge(0, 32)), InvalidateRKey: c.key(b, w)})
			expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.RemInvReqErr, Opcode: verbs.WCSend, ByteLen: 32, QPN: a.qp.Num()})
			if len(naks) != 1 || naks[0] != wire.NakSyndrome(wire.NakInvalidRequest) {
				t.Errorf("NAKs %v, want one NAK invalid request", naks)
			}
			if wc := b.onlyWC(t); wc.ID != 8 || wc.Status != verbs.RemInvReqErr {
				t.Errorf("b's receive completed %v, want REM_INV_REQ_ERR", &wc)
			}
			if !windowBound(b, w) {
				t.Error("a failed invalidation unbound the window")
			}
		})
	}
}

// TestMemoryWindowBindErrors: a bind the region table refuses completes
// with MW_BIND_ERR (ibv_post_send(3), as rxe reports it); the QP goes to
// ERR and the WRs behind it are flushed.
func TestMemoryWindowBindErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(t *testing.T, b *host, w *mr.Window) *verbs.SendWR
	}{
		{"zero-length", func(_ *testing.T, b *host, w *mr.Window) *verbs.SendWR {
			wr := bindWR(b, w, winOff, mr.RemoteWrite)
			wr.Bind.Length = 0
			return wr
		}},
		{"outside-region", func(_ *testing.T, b *host, w *mr.Window) *verbs.SendWR {
			return bindWR(b, w, regionSize-winLen/2, mr.RemoteWrite)
		}},
		{"stale-window-key", func(_ *testing.T, b *host, w *mr.Window) *verbs.SendWR {
			wr := bindWR(b, w, winOff, mr.RemoteWrite)
			wr.Bind.WindowKey ^= 1
			return wr
		}},
		{"window-of-another-PD", func(t *testing.T, b *host, _ *mr.Window) *verbs.SendWR {
			pd, err := b.mem.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			other, err := b.mem.AllocWindow(pd, mr.WindowType2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.mem.DeallocWindow(other); b.mem.DeallocPD(pd) })
			return bindWR(b, other, winOff, mr.RemoteWrite)
		}},
		{"region-without-MW_BIND", func(t *testing.T, b *host, w *mr.Window) *verbs.SendWR {
			r, err := b.mem.Register(b.pd, make([]byte, 2*winLen), mr.LocalWrite|mr.RemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.mem.Deregister(r) })
			wr := bindWR(b, w, 0, mr.RemoteWrite)
			wr.Bind.RegionKey, wr.Bind.Addr = r.LKey(), r.Addr()
			return wr
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, b := pair(t, defaultAttr())
			w := newWindow(t, b)
			post(t, b, c.wr(t, b, w))
			post(t, b, &verbs.SendWR{ID: 101, Opcode: verbs.WRLocalInv, InvalidateRKey: w.RKey()})
			wcs := s.waitWC(b, 2, time.Second)
			expectWC(t, wcs[0], verbs.WC{ID: 100, Status: verbs.MWBindErr, Opcode: verbs.WCBindMW, QPN: b.qp.Num()})
			expectWC(t, wcs[1], verbs.WC{ID: 101, Status: verbs.WRFlushErr, Opcode: verbs.WCLocalInv, QPN: b.qp.Num()})
			if st := b.qp.Status(); st.State != verbs.Err || st.Cause != verbs.MWBindErr {
				t.Errorf("b is %s (cause %s), want ERR (MW_BIND_ERR)", st.State, st.Cause)
			}
		})
	}
	t.Run("local-invalidate-of-a-free-window", func(t *testing.T) {
		// rxe completes a LOCAL_INV it cannot execute with LOC_QP_OP_ERR.
		s, _, b := pair(t, defaultAttr())
		w := newWindow(t, b)
		post(t, b, &verbs.SendWR{ID: 101, Opcode: verbs.WRLocalInv, InvalidateRKey: w.RKey()})
		expectWC(t, s.waitWC(b, 1, time.Second)[0], verbs.WC{ID: 101, Status: verbs.LocQPOpErr, Opcode: verbs.WCLocalInv, QPN: b.qp.Num()})
		if b.qp.State() != verbs.Err {
			t.Errorf("b is %s, want ERR", b.qp.State())
		}
	})
	t.Run("already-bound", func(t *testing.T) {
		// A type 2 window must be free to be bound (rxe; mr tests the rule).
		s, _, b, w := boundWindow(t)
		post(t, b, bindWR(b, w, winOff, mr.RemoteWrite))
		if wc := s.waitWC(b, 2, time.Second)[1]; wc.Status != verbs.MWBindErr {
			t.Errorf("second bind completed %v, want MW_BIND_ERR", &wc)
		}
	})
}

// TestBindRequestCopiedAtPost: PostSend copies the WR, bind description
// included (ibv_post_send(3): the WR may be reused once the call returns),
// so one BindRequest variable can describe several binds in a row.
func TestBindRequestCopiedAtPost(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	w1, w2 := newWindow(t, b), newWindow(t, b)
	var req mr.BindRequest
	for i, w := range []*mr.Window{w1, w2} {
		req = mr.BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: b.region.LKey(),
			Addr: b.va(uint64(winOff + i*winLen)), Length: winLen, Access: mr.RemoteWrite}
		post(t, b, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &req})
	}
	for i, wc := range s.waitWC(b, 2, time.Second) {
		expectWC(t, wc, verbs.WC{ID: uint64(i), Status: verbs.Success, Opcode: verbs.WCBindMW, QPN: b.qp.Num()})
	}
	for i, w := range []*mr.Window{w1, w2} {
		off := uint64(winOff + i*winLen)
		fill(a.buf[:8], byte(i+1))
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(off), RKey: w.RKey()})
		if wc := s.waitWC(a, i+1, time.Second)[i]; wc.Status != verbs.Success || !bytes.Equal(b.buf[off:off+8], a.buf[:8]) {
			t.Errorf("WRITE through window %d completed %v", i+1, &wc)
		}
	}
}
