package mr

import (
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync/atomic"
	"unsafe"
)

// memory is the bytes behind a region or an arena: one or more segments
// seen as one contiguous range of offsets, and a reference count that keeps
// them valid. The registration (or the arena's owner) holds one reference
// and every Span in flight holds one; when the count reaches zero the
// memory is released: caller slices are unpinned, arenas unmapped.
type memory struct {
	refs atomic.Int64
	segs [][]byte
	one  [1][]byte // segs of single-buffer memory, kept inline
	ends []uint64  // ends[i] is the offset just past segment i (several buffers only)
	size uint64

	// Exactly one owner: the region or the arena this memory belongs to.
	region *Region
	arena  *Arena
}

func (m *memory) init(segs [][]byte) {
	m.refs.Store(1)
	if len(segs) == 1 {
		m.one[0] = segs[0]
		m.segs, m.size = m.one[:], uint64(len(segs[0]))
		return
	}
	m.segs = segs
	m.ends = make([]uint64, len(segs))
	for i, s := range segs {
		m.size += uint64(len(s))
		m.ends[i] = m.size
	}
}

// segStart returns the offset of segment i's first byte.
func (m *memory) segStart(i int) uint64 {
	if m.ends == nil {
		return 0
	}
	return m.ends[i] - uint64(len(m.segs[i]))
}

// tryRef takes a reference unless the memory is already released.
func (m *memory) tryRef() bool {
	for {
		n := m.refs.Load()
		if n <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// unref drops a reference and releases the memory with the last one.
func (m *memory) unref() {
	if m.refs.Add(-1) != 0 {
		return
	}
	if m.region != nil {
		m.region.releaseMemory()
	} else {
		m.arena.unmap()
	}
}

// locate returns the segment holding offset off and the offset within it.
func (m *memory) locate(off uint64) (int, uint64) {
	if len(m.segs) == 1 {
		return 0, off
	}
	i := sort.Search(len(m.ends), func(i int) bool { return m.ends[i] > off })
	return i, off - m.segStart(i)
}

// addrOf returns the machine address of offset off.
func (m *memory) addrOf(off uint64) uint64 {
	i, o := m.locate(off)
	return addrOf(m.segs[i]) + o
}

// copyOut copies [off, off+len(p)) into p; the range is inside the memory.
func (m *memory) copyOut(p []byte, off uint64) {
	i, o := m.locate(off)
	for len(p) > 0 {
		n := copy(p, m.segs[i][o:])
		p = p[n:]
		i, o = i+1, 0
	}
}

// copyIn copies p into [off, off+len(p)); the range is inside the memory.
func (m *memory) copyIn(p []byte, off uint64) {
	i, o := m.locate(off)
	for len(p) > 0 {
		n := copy(m.segs[i][o:], p)
		p = p[n:]
		i, o = i+1, 0
	}
}

// word returns the 8-byte word at offset off if it lies inside one segment
// and is naturally aligned in memory, or nil.
func (m *memory) word(off uint64) *uint64 {
	i, o := m.locate(off)
	seg := m.segs[i]
	if o > uint64(len(seg)) || uint64(len(seg))-o < 8 {
		return nil
	}
	p := unsafe.Pointer(&seg[o])
	if uintptr(p)&7 != 0 {
		return nil
	}
	return (*uint64)(p)
}

// addrOf returns the machine address of b's first byte.
func addrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// PageSize is the page granularity of on-demand paging and arenas.
const PageSize = 4096

const pageShift = 12

// Arena is NIC-owned memory: an anonymous private mapping outside the Go
// heap (mmap; page-aligned Go memory on systems without mmap, see
// mapArena), for regions a remote peer fills or reads. Regions registered
// over an arena's bytes keep it mapped, as does every transfer still using
// it; FreeArena only drops the owner's reference, and the mapping is
// removed (munmap) when the last reference goes.
//
// An arena belongs to a protection domain: implicit ODP regions of that PD
// resolve addresses inside it.
type Arena struct {
	t     *Table
	pd    atomic.Uint32 // PDHandle; MoveArena changes it, address searches read it
	mem   memory
	ext   extent
	freed atomic.Bool // FreeArena was called
}

// NewArena maps size bytes of NIC-owned memory (rounded up to whole pages)
// in protection domain pd.
func (t *Table) NewArena(pd PDHandle, size uint64) (*Arena, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableLocked(pd); err != nil {
		return nil, err
	}
	if size == 0 || size > maxArena {
		return nil, fmt.Errorf("arena of %d bytes: %w", size, ErrInvalid)
	}
	mapped := (size + PageSize - 1) &^ (PageSize - 1)
	b, err := mapArena(int(mapped))
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %v: %w", mapped, err, ErrNoMem)
	}
	return t.newArenaLocked(pd, b[:size:size]), nil
}

// AdoptArena makes an arena of protection domain pd out of mapping, the
// whole of a mapping made with unix.Mmap elsewhere, such as a file another
// process shares (the softnic daemon maps an attached process's memfd).
// The table owns the mapping from then on, as it owns NewArena's: it is
// unmapped once the arena is freed and the last region and transfer over
// it are gone, so that memory a transfer still uses is never unmapped
// under it. On error the caller keeps the mapping.
func (t *Table) AdoptArena(pd PDHandle, mapping []byte) (*Arena, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableLocked(pd); err != nil {
		return nil, err
	}
	if len(mapping) == 0 || len(mapping) > maxArena {
		return nil, fmt.Errorf("arena of %d bytes: %w", len(mapping), ErrInvalid)
	}
	return t.newArenaLocked(pd, mapping[:len(mapping):len(mapping)]), nil
}

// newArenaLocked makes an arena of pd over b, a mapping the arena owns.
func (t *Table) newArenaLocked(pd PDHandle, b []byte) *Arena {
	a := &Arena{t: t}
	a.pd.Store(uint32(pd))
	a.mem.arena = a
	a.mem.init([][]byte{b})
	a.ext = extent{start: addrOf(b), end: addrOf(b) + uint64(len(b)), arena: a}
	t.addrInsert(&a.ext)
	t.pds[pd].arenas++
	t.arenas++
	return a
}

// maxArena bounds one mapping so that size arithmetic cannot overflow an int.
const maxArena = 1 << 46

// MaxRegionSize is the largest memory a table allocates or maps for a
// region (PD.AllocMR, shared memory): ibv_query_device's max_mr_size.
const MaxRegionSize = maxArena

// Bytes returns the arena's memory. It stays valid until the arena is freed
// and no region or transfer uses it any more.
func (a *Arena) Bytes() []byte { return a.mem.segs[0] }

// Addr returns the arena's address, which is also the remote address of a
// region registered over its start without ZeroBased.
func (a *Arena) Addr() uint64 { return a.ext.start }

// PD returns the arena's protection domain.
func (a *Arena) PD() PDHandle { return PDHandle(a.pd.Load()) }

// MoveArena moves a to protection domain pd: implicit regions of pd
// resolve addresses inside it from then on, and pd, not the old PD,
// cannot be deallocated while a lives. A region re-registered into
// another PD (Rereg) takes the arena it owns along, so that its old PD can
// go as it can in rxe, where re-registration moves the MR's reference to
// the new PD. ErrInvalid for an arena freed or of another table, or a PD
// not allocated.
func (t *Table) MoveArena(a *Arena, pd PDHandle) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.t != t || a.freed.Load() {
		return fmt.Errorf("arena already freed or of another table: %w", ErrInvalid)
	}
	if err := t.usableLocked(pd); err != nil {
		return err
	}
	t.pds[a.PD()].arenas--
	t.pds[pd].arenas++
	a.pd.Store(uint32(pd))
	return nil
}

// FreeArena drops the owner's reference to a. The mapping stays until the
// regions registered over it are deregistered and their transfers released.
func (t *Table) FreeArena(a *Arena) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.t != t || a.freed.Load() {
		return fmt.Errorf("arena already freed or of another table: %w", ErrInvalid)
	}
	a.freed.Store(true)
	t.pds[a.PD()].arenas--
	t.arenas--
	a.mem.unref()
	return nil
}

// unmap removes the mapping once nothing references the arena.
func (a *Arena) unmap() {
	t := a.t
	t.addrRemove(&a.ext)
	if err := unmapArena(a.mem.segs[0][:cap(a.mem.segs[0])]); err != nil {
		t.log.Error("munmap arena", slog.Uint64("addr", a.ext.start), slog.Any("error", err))
	}
}

// pin pins the segments that are caller memory (not in an arena) for the
// life of a registration.
func pin(segs [][]byte, arenas []*Arena) *runtime.Pinner {
	var p runtime.Pinner
	for i, s := range segs {
		if arenas[i] == nil {
			p.Pin(unsafe.SliceData(s))
		}
	}
	return &p
}
