package qp_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/softnic/softnic/verbs"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestRCOperations runs every RC operation over a perfect link and checks
// the completions on both sides and the memory they changed.
func TestRCOperations(t *testing.T) {
	sizes := []uint32{0, 1, 7, testMTU, testMTU + 1, 5*testMTU + 3}
	for _, n := range sizes {
		t.Run("write/"+itoa(n), func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			fill(a.buf[:n], 1)
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)), RemoteAddr: b.va(64), RKey: b.region.RKey()})
			wc := s.waitWC(a, 1, time.Second)[0]
			expectWC(t, wc, verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: n, QPN: a.qp.Num()})
			if !bytes.Equal(b.buf[64:64+n], a.buf[:n]) {
				t.Fatal("target memory differs from the source")
			}
		})
		t.Run("read/"+itoa(n), func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			fill(b.buf[128:128+n], 3)
			post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: sgl(a.sge(8, n)), RemoteAddr: b.va(128), RKey: b.region.RKey()})
			wc := s.waitWC(a, 1, time.Second)[0]
			expectWC(t, wc, verbs.WC{ID: 2, Status: verbs.Success, Opcode: verbs.WCRead, ByteLen: n, QPN: a.qp.Num()})
			if !bytes.Equal(a.buf[8:8+n], b.buf[128:128+n]) {
				t.Fatal("read data differs from the remote memory")
			}
		})
		t.Run("send/"+itoa(n), func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			fill(a.buf[:n], 5)
			postRecv(t, b, &verbs.RecvWR{ID: 9, SGL: sgl(b.sge(4096, 8192))})
			post(t, a, &verbs.SendWR{ID: 3, Opcode: verbs.WRSendImm, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)), Imm: 0xCAFE})
			s.waitWC(a, 1, time.Second)
			s.waitWC(b, 1, time.Second)
			expectWC(t, a.wcs[0], verbs.WC{ID: 3, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: n, QPN: a.qp.Num(), Flags: verbs.WCWithImm})
			expectWC(t, b.wcs[0], verbs.WC{ID: 9, Status: verbs.Success, Opcode: verbs.WCRecv, ByteLen: n, QPN: b.qp.Num(), Flags: verbs.WCWithImm, Imm: 0xCAFE})
			if !bytes.Equal(b.buf[4096:4096+n], a.buf[:n]) {
				t.Fatal("received data differs from the sent data")
			}
		})
		t.Run("write-imm/"+itoa(n), func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			fill(a.buf[:n], 9)
			postRecv(t, b, &verbs.RecvWR{ID: 7})
			post(t, a, &verbs.SendWR{ID: 4, Opcode: verbs.WRWriteImm, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)), Imm: 42, RemoteAddr: b.va(1000), RKey: b.region.RKey()})
			s.waitWC(a, 1, time.Second)
			s.waitWC(b, 1, time.Second)
			expectWC(t, a.wcs[0], verbs.WC{ID: 4, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: n, QPN: a.qp.Num(), Flags: verbs.WCWithImm})
			expectWC(t, b.wcs[0], verbs.WC{ID: 7, Status: verbs.Success, Opcode: verbs.WCRecvWriteImm, ByteLen: n, QPN: b.qp.Num(), Flags: verbs.WCWithImm, Imm: 42})
			if !bytes.Equal(b.buf[1000:1000+n], a.buf[:n]) {
				t.Fatal("target memory differs from the source")
			}
		})
	}
	t.Run("compare-swap", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		binary.NativeEndian.PutUint64(b.buf[256:], 100)
		post(t, a, &verbs.SendWR{ID: 5, Opcode: verbs.WRCompareSwap, Flags: verbs.Signaled, SGL: sgl(a.sge(16, 8)), RemoteAddr: b.va(256), RKey: b.region.RKey(), CompareAdd: 100, Swap: 7})
		post(t, a, &verbs.SendWR{ID: 6, Opcode: verbs.WRCompareSwap, Flags: verbs.Signaled, SGL: sgl(a.sge(24, 8)), RemoteAddr: b.va(256), RKey: b.region.RKey(), CompareAdd: 100, Swap: 9})
		s.waitWC(a, 2, time.Second)
		expectWC(t, a.wcs[0], verbs.WC{ID: 5, Status: verbs.Success, Opcode: verbs.WCCompareSwap, ByteLen: 8, QPN: a.qp.Num()})
		if got := binary.NativeEndian.Uint64(a.buf[16:]); got != 100 {
			t.Errorf("first compare-swap returned %d, want the original 100", got)
		}
		if got := binary.NativeEndian.Uint64(a.buf[24:]); got != 7 {
			t.Errorf("second compare-swap returned %d, want 7 (it must not swap)", got)
		}
		if got := binary.NativeEndian.Uint64(b.buf[256:]); got != 7 {
			t.Errorf("target holds %d, want 7", got)
		}
	})
	t.Run("fetch-add", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		binary.NativeEndian.PutUint64(b.buf[512:], 1000)
		for i := range 5 {
			post(t, a, &verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.WRFetchAdd, Flags: verbs.Signaled, SGL: sgl(a.sge(uint64(32+8*i), 8)), RemoteAddr: b.va(512), RKey: b.region.RKey(), CompareAdd: 3})
		}
		s.waitWC(a, 5, time.Second)
		for i := range 5 {
			expectWC(t, a.wcs[i], verbs.WC{ID: uint64(10 + i), Status: verbs.Success, Opcode: verbs.WCFetchAdd, ByteLen: 8, QPN: a.qp.Num()})
			if got := binary.NativeEndian.Uint64(a.buf[32+8*i:]); got != uint64(1000+3*i) {
				t.Errorf("fetch-add %d returned %d, want %d", i, got, 1000+3*i)
			}
		}
		if got := binary.NativeEndian.Uint64(b.buf[512:]); got != 1015 {
			t.Errorf("target holds %d, want 1015", got)
		}
	})
	t.Run("atomic-write", func(t *testing.T) {
		s, a, b := pair(t, defaultAttr())
		post(t, a, &verbs.SendWR{ID: 20, Opcode: verbs.WRAtomicWrite, Flags: verbs.Signaled, RemoteAddr: b.va(640), RKey: b.region.RKey(), Swap: 0x0102030405060708})
		s.waitWC(a, 1, time.Second)
		expectWC(t, a.wcs[0], verbs.WC{ID: 20, Status: verbs.Success, Opcode: verbs.WCAtomicWrite, QPN: a.qp.Num()})
		if got := binary.NativeEndian.Uint64(b.buf[640:]); got != 0x0102030405060708 {
			t.Errorf("target holds %#x", got)
		}
	})
}

func itoa(n uint32) string { return string(appendUint(nil, n)) }

func appendUint(b []byte, n uint32) []byte {
	if n >= 10 {
		b = appendUint(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func sgl(s ...verbs.SGE) []verbs.SGE { return s }

func post(t testing.TB, h *host, wr *verbs.SendWR) {
	t.Helper()
	if err := h.qp.PostSend(wr); err != nil {
		t.Fatalf("%s: post %s: %v", h.name, wr.Opcode, err)
	}
}

func postRecv(t testing.TB, h *host, wr *verbs.RecvWR) {
	t.Helper()
	if err := h.qp.PostRecv(wr); err != nil {
		t.Fatalf("%s: post recv: %v", h.name, err)
	}
}

func expectWC(t testing.TB, got, want verbs.WC) {
	t.Helper()
	if got != want {
		t.Fatalf("completion\n got %+v\nwant %+v", got, want)
	}
}
