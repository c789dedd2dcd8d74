package mr

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
)

// pageSet tracks which 4 KiB pages of an on-demand paging (ODP) region are
// resident. Pages are numbered by machine address (addr >> 12). An explicit
// ODP region has a dense bitmap over its pages; an implicit ODP region
// covers the whole address space, so its bitmap is kept in 16 MiB chunks
// created on first touch.
//
// Nothing is really paged: softnic's memory is always there. What is
// modelled is what an ODP NIC does: the first access to a page takes a page
// fault (counted), later ones find it resident, and ibv_advise_mr-style
// prefetching makes pages resident without a fault.
type pageSet struct {
	// dense
	first uint64
	words []atomic.Uint64

	// sparse (implicit ODP)
	mu     sync.RWMutex
	chunks map[uint64]*pageChunk

	faults     atomic.Uint64
	resident   atomic.Uint64
	prefetched atomic.Uint64
}

const chunkPagesShift = 12 // 4096 pages (16 MiB) per sparse chunk

type pageChunk [1 << chunkPagesShift / 64]atomic.Uint64

func newDensePages(addr, length uint64) *pageSet {
	first := addr >> pageShift
	last := (addr + length - 1) >> pageShift
	return &pageSet{first: first, words: make([]atomic.Uint64, (last-first)/64+1)}
}

func newSparsePages() *pageSet {
	return &pageSet{chunks: make(map[uint64]*pageChunk)}
}

// touch makes the pages of [addr, addr+n) resident, n > 0. The pages that
// were not resident are counted as faults, or as prefetched when prefetch is
// set.
func (ps *pageSet) touch(addr, n uint64, prefetch bool) {
	first := addr >> pageShift
	last := (addr + n - 1) >> pageShift
	var added uint64
	for p := first; p <= last; {
		w := ps.word(p)
		bit := p % 64
		span := min(64-bit, last-p+1)
		mask := ^uint64(0) >> (64 - span) << bit
		if w.Load()&mask != mask {
			old := w.Or(mask)
			added += uint64(bits.OnesCount64(mask &^ old))
		}
		p += span
	}
	if added == 0 {
		return
	}
	ps.resident.Add(added)
	if prefetch {
		ps.prefetched.Add(added)
	} else {
		ps.faults.Add(added)
	}
}

// word returns the bitmap word holding page p.
func (ps *pageSet) word(p uint64) *atomic.Uint64 {
	if ps.chunks == nil {
		return &ps.words[(p-ps.first)/64]
	}
	key := p >> chunkPagesShift
	ps.mu.RLock()
	c := ps.chunks[key]
	ps.mu.RUnlock()
	if c == nil {
		ps.mu.Lock()
		if c = ps.chunks[key]; c == nil {
			c = new(pageChunk)
			ps.chunks[key] = c
		}
		ps.mu.Unlock()
	}
	return &c[p%(1<<chunkPagesShift)/64]
}

// ODPStats are the on-demand paging counters of a region.
type ODPStats struct {
	Faults        uint64 // pages made resident by a first access
	Prefetched    uint64 // pages made resident by Prefetch
	ResidentPages uint64 // pages resident now
}

func (ps *pageSet) stats() ODPStats {
	if ps == nil {
		return ODPStats{}
	}
	return ODPStats{Faults: ps.faults.Load(), Prefetched: ps.prefetched.Load(), ResidentPages: ps.resident.Load()}
}

// Prefetch makes the pages behind [addr, addr+length) of ODP region r
// resident ahead of use, like ibv_advise_mr(3) with
// IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE on an SGE of r. addr is in the
// region's address space (an offset for zero-based regions). It fails with
// ErrInvalid if r is not an ODP region, has no LocalWrite (rxe looks up an
// advice's region as a local write would) or the range is outside it, and
// with ErrFault if an implicit ODP range resolves to no memory of r's PD.
func (t *Table) Prefetch(r *Region, addr, length uint64) error {
	if r.odp == nil {
		return fmt.Errorf("prefetch on a region without ON_DEMAND: %w", ErrInvalid)
	}
	if r.access()&LocalWrite == 0 {
		return fmt.Errorf("prefetch on a region without LOCAL_WRITE: %w", ErrInvalid)
	}
	if !r.live() {
		return fmt.Errorf("prefetch on a deregistered region: %w", ErrInvalid)
	}
	if length == 0 {
		return nil
	}
	off, ok := r.offset(addr, length)
	if !ok {
		return fmt.Errorf("prefetch [%#x, +%d) outside the region: %w", addr, length, ErrInvalid)
	}
	if r.implicit {
		if t.addrView().memory(addr, length, r.pd()) == nil {
			return fmt.Errorf("prefetch [%#x, +%d): %w", addr, length, ErrFault)
		}
		r.odp.touch(addr, length, true)
		return nil
	}
	r.odp.touch(r.mem.addrOf(off), length, true)
	return nil
}
