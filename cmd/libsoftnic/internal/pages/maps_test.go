//go:build linux

package pages

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQueryMapsAgreesWithScan: where the kernel answers PROCMAP_QUERY,
// what it gives for a range is what the lines of /proc/self/maps say of
// it, for memory of each kind Share looks at: private, read-only, a page
// moved onto the shadow memfd, MAP_SHARED memory, a file mapped privately;
// and a range with a hole, or below every mapping, fails with ErrFault
// either way.
func TestQueryMapsAgreesWithScan(t *testing.T) {
	if _, ok, _ := queryMaps(0, 1); !ok {
		t.Skip("the kernel does not answer PROCMAP_QUERY (Linux 6.11): readMaps reads /proc/self/maps, which the other tests cover")
	}
	s := openShadow(t)
	mem := mapAnon(t, 4, unix.MAP_PRIVATE)
	mem[0] = 1
	if err := s.Share(addr(mem[pageSize:]), pageSize); err != nil {
		t.Fatal(err)
	}
	mprotect(addr(mem[3*pageSize:]), pageSize, unix.PROT_READ)
	shared := mapAnon(t, 2, unix.MAP_SHARED)
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	file, err := unix.Mmap(int(exe.Fd()), 0, int(pageSize), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(file)
	for _, tc := range []struct {
		name       string
		start, end uintptr
		vmas       int // how many mappings the range has; 0: a hole
	}{
		{"private, moved and read-only pages", addr(mem), addr(mem) + 4*pageSize, 4},
		{"the moved page", addr(mem[pageSize:]), addr(mem[pageSize:]) + pageSize, 1},
		{"MAP_SHARED memory", addr(shared), addr(shared) + 2*pageSize, 1},
		{"a file mapped privately", addr(file), addr(file) + pageSize, 1},
		{"below every mapping", 0x1000, 0x3000, 0}, // under vm.mmap_min_addr
		{"a range with a hole", 0, 0, 0},
	} {
		if tc.start == 0 {
			_, tc.start, tc.end = holedRange(t)
		}
		queried, _, qerr := queryMaps(tc.start, tc.end)
		scanned, serr := scanMaps(tc.start, tc.end)
		if tc.vmas == 0 {
			if !errors.Is(qerr, ErrFault) || !errors.Is(serr, ErrFault) {
				t.Errorf("%s: PROCMAP_QUERY %v, /proc/self/maps %v; want ErrFault from both", tc.name, qerr, serr)
			}
			continue
		}
		if qerr != nil || serr != nil || len(queried) != tc.vmas || !reflect.DeepEqual(queried, scanned) {
			t.Errorf("%s: PROCMAP_QUERY %+v (%v), /proc/self/maps %+v (%v); want the same %d mappings", tc.name, queried, qerr, scanned, serr, tc.vmas)
		}
	}
}

// holedRange maps three pages and unmaps the middle one: it returns the
// first page and the range of the three. The runtime may map something of
// its own in the hole as soon as it is made: then it tries again. Only the
// pages it mapped are unmapped when the test ends, never the hole.
func holedRange(t *testing.T) (first []byte, start, end uintptr) {
	t.Helper()
	for range 10 {
		b, err := unix.Mmap(-1, 0, 3*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		a := addr(b)
		munmap(a+pageSize, pageSize)
		t.Cleanup(func() {
			munmap(a, pageSize)
			munmap(a+2*pageSize, pageSize)
		})
		if _, err := scanMaps(a+pageSize, a+2*pageSize); errors.Is(err, ErrFault) {
			return b[:pageSize], a, a + 3*pageSize
		}
	}
	t.Fatal("the hole made in a mapping was mapped again at once, ten times")
	return nil, 0, 0
}
