package mr

import (
	"errors"
	"testing"
	"unsafe"
)

// newTable returns a table closed when the test ends.
func newTable(t testing.TB) *Table {
	t.Helper()
	tb := NewTable(Config{})
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tb
}

func allocPD(t testing.TB, tb *Table) PDHandle {
	t.Helper()
	pd, err := tb.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	return pd
}

func register(t testing.TB, tb *Table, pd PDHandle, buf []byte, access Access) *Region {
	t.Helper()
	r, err := tb.Register(pd, buf, access)
	if err != nil {
		t.Fatalf("Register(%v): %v", access, err)
	}
	return r
}

// staleKey returns a key of r's slot with another variant: the key a
// region that had r's slot before (or will have it after) was or will be
// known by.
func staleKey(tb *Table, r *Region) uint32 {
	return tb.regions.KeyFor(r.index, tb.regions.Variant(r.RKey())+1)
}

// aligned returns n bytes starting on an 8-byte boundary (Go allocates
// larger byte slices aligned; this makes it explicit).
func aligned(n int) []byte {
	b := make([]uint64, (n+7)/8)
	return sliceOf(b)[:n]
}

func sliceOf(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}

// wantErr checks err against want (nil: no error), with errors.Is.
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// wantReason checks that err is the Reason want (0: no error).
func wantReason(t testing.TB, what string, err error, want Reason) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
		return
	}
	var got Reason
	if !errors.As(err, &got) || got != want {
		t.Fatalf("%s: error %v, want reason %q", what, err, want)
	}
}

const rw = LocalWrite | RemoteRead | RemoteWrite | RemoteAtomic

// holds reports whether b lies inside one of r's buffers.
func holds(r *Region, b []byte) bool {
	start, end := addrOf(b), addrOf(b)+uint64(len(b))
	for _, e := range r.exts {
		if len(b) > 0 && start >= e.start && end <= e.end {
			return true
		}
	}
	return false
}
