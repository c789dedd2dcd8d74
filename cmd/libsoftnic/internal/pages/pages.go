//go:build linux

// Package pages moves a process's own memory onto shared memory in place,
// so that a softnic daemon can map the very pages a C program registered
// (ibv_reg_mr) while the program's pointers stay valid.
//
// A Shadow is one memfd per process in which the file offset of a page is
// its virtual address: moving [start, end) writes the pages' contents into
// the memfd at offset start (pwrite, which copies in the kernel) and maps
// the memfd over the same addresses (mmap MAP_SHARED|MAP_FIXED, one atomic
// replacement). Any range of moved pages is then one contiguous range of
// the file, which the daemon maps too (nic.PD.RegShared): overlapping
// registrations and pages shared by several buffers need no bookkeeping
// beyond a reference count per page range. The memfd is sealed against
// shrinking, so neither side can truncate memory under the other.
//
// When the last registration of a page range goes, the pages move back to
// private anonymous memory (read from the memfd into a fresh mapping,
// mremap'd over the addresses) and their memfd pages are freed (a hole is
// punched): the process ends as it began, and fork copies them again.
//
// What a moved page means:
//   - fork: moved pages are MADV_DONTFORK, as rdma-core's ibv_fork_init
//     makes registered memory: a child does not see them at all (it would
//     otherwise share them, writes included, with its parent). Other data
//     on those pages is missing in the child too.
//   - threads: a write another thread makes to a page while it moves (in
//     ibv_reg_mr or ibv_dereg_mr) can be lost; register memory before
//     other threads write it, as the verbs ask for anyway.
//   - kinds of memory: private mappings (heap, stack, anonymous mmap, a
//     file mapped MAP_PRIVATE, the program's data) move. MAP_SHARED
//     mappings cannot (ErrShared): their writes must reach the file or
//     the other processes sharing them, and the daemon maps only sealed
//     memfds, never a file its owner could truncate under it. Huge-page
//     (hugetlbfs) mappings are refused too (ErrHuge). Unmapped pages or
//     pages the process cannot read fail with ErrFault, as ibv_reg_mr
//     fails with EFAULT.
package pages

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Errors of Share; each says why the memory cannot be registered.
var (
	ErrFault  = errors.New("memory not mapped, or not readable")
	ErrShared = errors.New("a MAP_SHARED mapping: its writes must reach its file, so its pages cannot move onto softnic's shared memory")
	ErrHuge   = errors.New("huge pages (hugetlbfs) are not supported yet")
)

// shadowName is the memfd's name, as /proc/PID/maps shows it.
const shadowName = "softnic-shadow"

// shadowSize is the memfd's size: every address a process can map is an
// offset in it (the file is sparse: only moved pages take memory).
const shadowSize = 1 << 57

var pageSize = uintptr(os.Getpagesize())

// Shadow is the memfd the pages of a process move onto.
type Shadow struct {
	fd int

	mu   sync.Mutex
	refs []span // sorted, disjoint page ranges with their registrations
}

// span is a page range [start, end) registered n times.
type span struct {
	start, end uintptr
	n          int
}

// Open makes the process's shadow memfd.
func Open() (*Shadow, error) {
	fd, err := unix.MemfdCreate(shadowName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, shadowSize); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sizing the shadow memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing the shadow memfd: %w", err)
	}
	return &Shadow{fd: fd}, nil
}

// FD is the memfd: the pages of [addr, addr+n) are its bytes at offset
// addr once Share has moved them.
func (s *Shadow) FD() int { return s.fd }

// pageRange returns the pages holding [addr, addr+n).
func pageRange(addr, n uintptr) (start, end uintptr, err error) {
	if n == 0 || addr+n < addr {
		return 0, 0, fmt.Errorf("%d bytes at %#x: %w", n, addr, ErrFault)
	}
	return addr &^ (pageSize - 1), (addr + n + pageSize - 1) &^ (pageSize - 1), nil
}

// Share moves the pages holding [addr, addr+n) onto the memfd, unless they
// are there already, and counts one more registration of them.
func (s *Shadow) Share(addr, n uintptr) error {
	start, end, err := pageRange(addr, n)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vmas, err := readMaps(start, end)
	if err != nil {
		return err
	}
	// Check every piece before moving any, so that a refused range
	// leaves the process as it was.
	for _, v := range vmas {
		if err := v.movable(start, end, s.fd); err != nil {
			return err
		}
	}
	for _, v := range vmas {
		if v.shadow(s.fd) {
			continue
		}
		if err := s.moveIn(max(v.start, start), min(v.end, end), v.prot()); err != nil {
			return err
		}
	}
	s.count(start, end, 1)
	return nil
}

// Unshare counts one registration fewer of the pages holding [addr,
// addr+n) and moves those no registration holds any more back to private
// memory.
func (s *Shadow) Unshare(addr, n uintptr) error {
	start, end, err := pageRange(addr, n)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, r := range s.count(start, end, -1) {
		if err := s.moveOut(r.start, r.end); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// moveIn copies [start, end) into the memfd and maps the memfd over it.
func (s *Shadow) moveIn(start, end uintptr, prot int) error {
	if err := pwriteAll(s.fd, start, end-start); err != nil {
		s.punch(start, end)
		return err
	}
	if _, err := mmapFixed(start, end-start, prot, unix.MAP_SHARED, s.fd, int64(start)); err != nil {
		s.punch(start, end)
		return fmt.Errorf("mapping shared memory over %#x-%#x: %w", start, end, err)
	}
	madvise(start, end-start, unix.MADV_DONTFORK)
	return nil
}

// moveOut moves the pages of [start, end) that are still the memfd's back
// to private anonymous memory, and frees the memfd's copy. Pages the
// program has unmapped or mapped anew meanwhile are left alone.
func (s *Shadow) moveOut(start, end uintptr) error {
	vmas, _ := readMaps(start, end)
	var first error
	for _, v := range vmas {
		if !v.shadow(s.fd) {
			continue
		}
		a, b := max(v.start, start), min(v.end, end)
		if err := s.copyOut(a, b, v.prot()); err != nil && first == nil {
			first = err
		}
	}
	s.punch(start, end)
	return first
}

// copyOut replaces the memfd's mapping of [start, end) with private
// memory holding the same bytes.
func (s *Shadow) copyOut(start, end uintptr, prot int) error {
	n := end - start
	tmp, err := mmapFixed(0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1, 0)
	if err != nil {
		return fmt.Errorf("private memory for %#x-%#x: %w", start, end, err)
	}
	if err := preadAll(s.fd, tmp, n, int64(start)); err != nil {
		munmap(tmp, n)
		return err
	}
	if err := mremapFixed(tmp, n, start); err != nil {
		munmap(tmp, n)
		return fmt.Errorf("moving %#x-%#x back to private memory: %w", start, end, err)
	}
	if prot != unix.PROT_READ|unix.PROT_WRITE {
		mprotect(start, n, prot)
	}
	return nil
}

// punch frees the memfd's pages of [start, end).
func (s *Shadow) punch(start, end uintptr) {
	unix.Fallocate(s.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(start), int64(end-start))
}

// count adds d registrations to the pages of [start, end) and returns the
// ranges that no registration holds any more.
func (s *Shadow) count(start, end uintptr, d int) []span {
	var out, freed []span
	add := func(sp span) {
		if sp.start >= sp.end {
			return
		}
		if sp.n <= 0 {
			freed = append(freed, sp)
			return
		}
		if k := len(out); k > 0 && out[k-1].end == sp.start && out[k-1].n == sp.n {
			out[k-1].end = sp.end
			return
		}
		out = append(out, sp)
	}
	at := start
	for _, r := range s.refs {
		if r.end <= start || r.start >= end {
			add(r)
			continue
		}
		if at < r.start && d > 0 {
			add(span{at, r.start, d})
		}
		add(span{r.start, max(r.start, start), r.n})
		add(span{max(r.start, start), min(r.end, end), r.n + d})
		add(span{min(r.end, end), r.end, r.n})
		at = r.end
	}
	if at < end && d > 0 {
		add(span{at, end, d})
	}
	// Keep the list sorted: a new range may come after the last one kept.
	sortSpans(out)
	s.refs = out
	return freed
}

func sortSpans(sp []span) {
	for i := 1; i < len(sp); i++ {
		for j := i; j > 0 && sp[j].start < sp[j-1].start; j-- {
			sp[j], sp[j-1] = sp[j-1], sp[j]
		}
	}
}

// shadow reports whether v maps the shadow memfd fd at offsets equal to
// its addresses: its pages have moved already.
func (v *vma) shadow(fd int) bool {
	if v.perms[3] != 's' || v.off != int64(v.start) || !strings.HasPrefix(v.path, "/memfd:"+shadowName) {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Ino == v.ino
}

// movable says why v's pages cannot be shared, if they cannot.
func (v *vma) movable(start, end uintptr, fd int) error {
	a, b := max(v.start, start), min(v.end, end)
	switch {
	case v.perms[0] != 'r':
		return fmt.Errorf("%#x-%#x is not readable (%s): %w", a, b, v.perms, ErrFault)
	case v.shadow(fd):
		return nil
	case strings.HasPrefix(v.path, "/anon_hugepage") || strings.Contains(v.path, "hugepages"):
		return fmt.Errorf("%#x-%#x (%s): %w", a, b, v.path, ErrHuge)
	case v.perms[3] == 's':
		return fmt.Errorf("%#x-%#x (%s): %w", a, b, v.path, ErrShared)
	}
	return nil
}

// prot is v's protection as mmap's flags.
func (v *vma) prot() int {
	p := 0
	if v.perms[0] == 'r' {
		p |= unix.PROT_READ
	}
	if v.perms[1] == 'w' {
		p |= unix.PROT_WRITE
	}
	if v.perms[2] == 'x' {
		p |= unix.PROT_EXEC
	}
	return p
}
