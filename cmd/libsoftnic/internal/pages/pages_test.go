//go:build linux

package pages

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func mapAnon(t *testing.T, pages int, flags int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, pages*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, flags|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// shadowed reports whether every page of b is mapped from the shadow.
func shadowed(t *testing.T, s *Shadow, b []byte) bool {
	t.Helper()
	vmas, err := readMaps(addr(b), addr(b)+uintptr(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmas {
		if !v.shadow(s.fd) {
			return false
		}
	}
	return true
}

func openShadow(t *testing.T) *Shadow {
	t.Helper()
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

// TestShareInPlace moves a buffer that starts and ends inside pages: its
// bytes and those around it stay, the memfd holds them at their address,
// writes through the program's pointer reach the memfd, and the last
// Unshare brings back private memory with the latest bytes and frees the
// memfd's pages.
func TestShareInPlace(t *testing.T) {
	s := openShadow(t)
	mem := mapAnon(t, 4, unix.MAP_PRIVATE)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	want := bytes.Clone(mem)
	buf := mem[pageSize+100 : 2*pageSize+50]
	if err := s.Share(addr(buf), uintptr(len(buf))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("moving the pages changed the memory")
	}
	if !shadowed(t, s, mem[pageSize:3*pageSize]) || shadowed(t, s, mem[:pageSize]) || shadowed(t, s, mem[3*pageSize:]) {
		t.Fatal("the two pages holding the buffer, and only they, should be mapped from the shadow")
	}
	buf[0] = 0xAB
	got := make([]byte, 1)
	if _, err := unix.Pread(s.fd, got, int64(addr(buf))); err != nil || got[0] != 0xAB {
		t.Fatalf("the memfd at the buffer's address holds %#x (%v), want the program's write", got, err)
	}
	// A second, overlapping registration keeps the pages shared after the
	// first goes.
	if err := s.Share(addr(mem[2*pageSize:]), 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Unshare(addr(buf), uintptr(len(buf))); err != nil {
		t.Fatal(err)
	}
	if !shadowed(t, s, mem[2*pageSize:3*pageSize]) || shadowed(t, s, mem[pageSize:2*pageSize]) {
		t.Fatal("after one of two registrations went, its other page should be back, the shared one still shadowed")
	}
	if err := s.Unshare(addr(mem[2*pageSize:]), 10); err != nil {
		t.Fatal(err)
	}
	if shadowed(t, s, mem) {
		t.Fatal("pages still shadowed after the last Unshare")
	}
	want[pageSize+100] = 0xAB
	if !bytes.Equal(mem, want) {
		t.Fatal("moving the pages back changed the memory")
	}
	if _, err := unix.Pread(s.fd, got, int64(addr(buf))); err != nil || got[0] != 0 {
		t.Errorf("the memfd still holds %#x (%v) after the last Unshare: its pages were not freed", got, err)
	}
	if len(s.refs) != 0 {
		t.Errorf("references left: %+v", s.refs)
	}
}

// TestShareRefuses: memory that cannot move is refused, and a refused
// range leaves every page where it was.
func TestShareRefuses(t *testing.T) {
	s := openShadow(t)
	shared := mapAnon(t, 1, unix.MAP_SHARED)
	holed, holedStart, holedEnd := holedRange(t)
	none := mapAnon(t, 2, unix.MAP_PRIVATE)
	mprotect(addr(none[pageSize:]), pageSize, unix.PROT_NONE)
	for _, tc := range []struct {
		name string
		addr uintptr
		n    uintptr
		want error
	}{
		{"MAP_SHARED anonymous memory", addr(shared), 8, ErrShared},
		{"a range with an unmapped page", holedStart, holedEnd - holedStart, ErrFault},
		{"a range ending in a PROT_NONE page", addr(none), 2 * pageSize, ErrFault},
		{"zero bytes", addr(none), 0, ErrFault},
		{"a range that wraps", ^uintptr(0) - 10, 100, ErrFault},
	} {
		if err := s.Share(tc.addr, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("%s: Share = %v, want %v", tc.name, err, tc.want)
		}
	}
	if shadowed(t, s, holed) || shadowed(t, s, none[:pageSize]) {
		t.Error("a refused range moved some of its pages")
	}
}

// TestCount checks the reference count per page range.
func TestCount(t *testing.T) {
	p := pageSize
	type op struct {
		start, end uintptr
		d          int
	}
	for _, tc := range []struct {
		name      string
		ops       []op
		wantRefs  []span
		wantFreed []span // by the last op
	}{
		{"one range", []op{{p, 3 * p, 1}}, []span{{p, 3 * p, 1}}, nil},
		{"overlap", []op{{p, 3 * p, 1}, {2 * p, 4 * p, 1}}, []span{{p, 2 * p, 1}, {2 * p, 3 * p, 2}, {3 * p, 4 * p, 1}}, nil},
		{"release one of two", []op{{p, 3 * p, 1}, {2 * p, 4 * p, 1}, {p, 3 * p, -1}},
			[]span{{2 * p, 4 * p, 1}}, []span{{p, 2 * p, 0}}},
		{"disjoint, later one first", []op{{5 * p, 6 * p, 1}, {p, 2 * p, 1}}, []span{{p, 2 * p, 1}, {5 * p, 6 * p, 1}}, nil},
		{"release all", []op{{p, 2 * p, 1}, {p, 2 * p, -1}}, nil, []span{{p, 2 * p, 0}}},
		{"same range twice", []op{{p, 2 * p, 1}, {p, 2 * p, 1}, {p, 2 * p, -1}}, []span{{p, 2 * p, 1}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Shadow
			var freed []span
			for _, o := range tc.ops {
				freed = s.count(o.start, o.end, o.d)
			}
			if !reflect.DeepEqual(s.refs, tc.wantRefs) || !reflect.DeepEqual(freed, tc.wantFreed) {
				t.Errorf("refs %v, freed %v; want %v and %v", s.refs, freed, tc.wantRefs, tc.wantFreed)
			}
		})
	}
}
