package mr

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestSpanCopies(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	buf := aligned(64)
	r := register(t, tb, pd, buf, rw)
	who := Requester{PD: pd}
	s, err := tb.Remote(r.RKey(), r.Addr()+16, 32, RemoteWrite, who)
	wantReason(t, "write", err, 0)
	defer s.Release()
	tests := []struct {
		name   string
		data   string
		off    uint64
		wantN  int
		wantAt int // where the bytes land in buf
	}{
		{"write at the start", "abcd", 0, 4, 16},
		{"write in the middle", "xyz", 10, 3, 26},
		{"write clipped at the span's end", "0123456789", 28, 4, 44},
		{"write at the end copies nothing", "q", 32, 0, 0},
		{"write past the end copies nothing", "q", 1 << 40, 0, 0},
	}
	for _, tc := range tests {
		before := bytes.Clone(buf)
		if n := s.WriteAt([]byte(tc.data), tc.off); n != tc.wantN {
			t.Errorf("%s: WriteAt = %d, want %d", tc.name, n, tc.wantN)
		}
		want := before
		copy(want[tc.wantAt:tc.wantAt+tc.wantN], tc.data)
		if !bytes.Equal(buf, want) {
			t.Errorf("%s: buffer %q, want %q", tc.name, buf, want)
		}
		got := make([]byte, len(tc.data))
		if n := s.ReadAt(got, tc.off); n != tc.wantN || !bytes.Equal(got[:n], []byte(tc.data)[:n]) {
			t.Errorf("%s: ReadAt = %d %q", tc.name, n, got[:n])
		}
	}
	// Nothing outside [16, 48) was touched.
	for i, b := range buf {
		if (i < 16 || i >= 48) && b != 0 {
			t.Fatalf("byte %d outside the span written: %q", i, buf)
		}
	}
}

// TestSpanWritesOnlyWhenGranted: a span writes only as its access allows,
// whatever the caller tries. ATOMIC WRITE (Store) needs remote write access
// and an aligned word; FETCH_ADD and CMP_SWAP need remote atomic access.
func TestSpanWritesOnlyWhenGranted(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	buf := aligned(64)
	r := register(t, tb, pd, buf, rw)
	who := Requester{PD: pd}
	tests := []struct {
		name                      string
		get                       func() (Span, error)
		write, word, store, fetch bool
	}{
		{"remote read", func() (Span, error) { return tb.Remote(r.RKey(), r.Addr(), 8, RemoteRead, who) }, false, true, false, false},
		{"local read", func() (Span, error) { return tb.Local(r.LKey(), r.Addr(), 8, 0, pd) }, false, true, false, false},
		{"local write", func() (Span, error) { return tb.Local(r.LKey(), r.Addr(), 8, LocalWrite, pd) }, true, true, true, false},
		{"remote write of a word: ATOMIC WRITE", func() (Span, error) { return tb.Remote(r.RKey(), r.Addr(), 8, RemoteWrite, who) }, true, true, true, false},
		{"remote write of 16 bytes is no word", func() (Span, error) { return tb.Remote(r.RKey(), r.Addr(), 16, RemoteWrite, who) }, true, false, false, false},
		{"remote write of a misaligned word", func() (Span, error) { return tb.Remote(r.RKey(), r.Addr()+1, 8, RemoteWrite, who) }, true, false, false, false},
		{"remote atomic", func() (Span, error) { return tb.Remote(r.RKey(), r.Addr(), 8, RemoteAtomic, who) }, true, true, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.get()
			wantReason(t, tc.name, err, 0)
			defer s.Release()
			clear(buf)
			if n := s.WriteAt([]byte("12345678"), 0); (n == 8) != tc.write {
				t.Errorf("WriteAt = %d", n)
			}
			if s.IsWord() != tc.word {
				t.Errorf("IsWord = %v", !tc.word)
			}
			at := s.off
			word := func() uint64 { return binary.NativeEndian.Uint64(buf[at:]) }
			clear(buf)
			s.Store(7)
			if (word() == 7) != tc.store {
				t.Errorf("Store: word %#x", word())
			}
			clear(buf)
			s.FetchAdd(1)
			s.CompareSwap(1, 9)
			if (word() == 9) != tc.fetch {
				t.Errorf("FetchAdd, CompareSwap: word %#x", word())
			}
		})
	}
	var zero Span
	zero.Release()
	if zero.Len() != 0 || zero.ReadAt(make([]byte, 4), 0) != 0 || zero.WriteAt([]byte("x"), 0) != 0 || zero.FetchAdd(1) != 0 || zero.IsWord() {
		t.Error("the zero Span is not empty")
	}
}

func TestSpanAtomics(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	buf := aligned(64)
	r := register(t, tb, pd, buf, rw)
	word := func() uint64 { return binary.NativeEndian.Uint64(buf[24:]) }
	s, err := tb.Remote(r.RKey(), r.Addr()+24, 8, RemoteAtomic, Requester{PD: pd})
	wantReason(t, "atomic", err, 0)
	defer s.Release()
	steps := []struct {
		name    string
		do      func() uint64
		wantOld uint64
		want    uint64
	}{
		{"FETCH_AND_ADD returns the old value", func() uint64 { return s.FetchAdd(5) }, 0, 5},
		{"FETCH_AND_ADD wraps", func() uint64 { return s.FetchAdd(^uint64(0)) }, 5, 4},
		{"CMP_AND_SWP with a matching compare swaps", func() uint64 { return s.CompareSwap(4, 0x1122334455667788) }, 4, 0x1122334455667788},
		{"CMP_AND_SWP with another compare does not", func() uint64 { return s.CompareSwap(4, 1) }, 0x1122334455667788, 0x1122334455667788},
		{"ATOMIC_WRITE stores", func() uint64 { s.Store(42); return 0x1122334455667788 }, 0x1122334455667788, 42},
	}
	for _, st := range steps {
		if old := st.do(); old != st.wantOld || word() != st.want {
			t.Errorf("%s: old %#x, word %#x; want %#x, %#x", st.name, old, word(), st.wantOld, st.want)
		}
	}
	// Atomics work on memory in native byte order; the responder converts
	// to and from the wire's big endian.
	if binary.NativeEndian.Uint64(buf[24:32]) != 42 {
		t.Errorf("word in memory %x", buf[24:32])
	}
}

// TestIOVSpans checks that an iov region is one contiguous address space,
// range-checked across every buffer, and that no atomic straddles two
// buffers.
func TestIOVSpans(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	backing := aligned(128)
	iov := [][]byte{backing[0:12], backing[40:60], backing[80:128]} // 12 + 20 + 48 = 80 bytes
	// As package nic/fabric registers fi_mr_regv in scalable mode.
	r, err := tb.RegisterWith(pd, RegOptions{Segments: iov, Access: rw | ZeroBased, Key: 0x4200, HasKey: true})
	wantErr(t, "RegisterWith", err, nil)
	defer tb.Deregister(r)
	who := Requester{PD: pd}
	if r.Len() != 80 || r.Addr() != 0 {
		t.Fatalf("iov region [%#x, +%d), want [0, +80)", r.Addr(), r.Len())
	}
	tests := []struct {
		name string
		addr uint64
		n    uint64
		need Access
		want Reason
	}{
		{"whole region across all buffers", 0, 80, RemoteWrite, 0},
		{"range in the last buffer", 70, 10, RemoteRead, 0},
		{"range ending past the last buffer", 75, 6, RemoteRead, ReasonRange},
		{"range starting past the first buffer's end only", 12, 68, RemoteRead, 0},
		{"atomic inside the second buffer, aligned in memory", 20, 8, RemoteAtomic, 0},
		{"atomic across the first and second buffers", 8, 8, RemoteAtomic, ReasonMisaligned},
		{"atomic aligned as an offset, misaligned in memory", 16, 8, RemoteAtomic, ReasonMisaligned},
	}
	for _, tc := range tests {
		s, err := tb.Remote(r.RKey(), tc.addr, tc.n, tc.need, who)
		wantReason(t, tc.name, err, tc.want)
		s.Release()
	}

	s, _ := tb.Remote(r.RKey(), 0, 80, RemoteWrite, who)
	data := make([]byte, 80)
	for i := range data {
		data[i] = byte(i + 1)
	}
	if n := s.WriteAt(data, 0); n != 80 {
		t.Fatalf("WriteAt = %d", n)
	}
	if !bytes.Equal(iov[0], data[:12]) || !bytes.Equal(iov[1], data[12:32]) || !bytes.Equal(iov[2], data[32:]) {
		t.Errorf("buffers after the write: %v %v %v", iov[0], iov[1], iov[2])
	}
	for _, gap := range [][]byte{backing[12:40], backing[60:80]} {
		if !bytes.Equal(gap, make([]byte, len(gap))) {
			t.Errorf("a write reached memory between the buffers: %v", gap)
		}
	}
	got := make([]byte, 30)
	if n := s.ReadAt(got, 5); n != 30 || !bytes.Equal(got, data[5:35]) {
		t.Errorf("ReadAt across buffers = %d %v", n, got)
	}
	s.Release()
}
