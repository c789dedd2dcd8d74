package mr

import (
	"math"
	"math/bits"
	"sync"

	"github.com/google/btree"
)

// extent is one contiguous piece of memory the device knows: a segment of a
// region, an arena, or a registration cache entry. Extents are ordered by
// start address in B-trees; seq breaks ties between extents that start at
// the same address (the same buffer registered twice).
type extent struct {
	start, end uint64 // [start, end) machine addresses, end > start
	seq        uint64

	// Exactly one owner.
	region *Region
	seg    int // the region's segment
	arena  *Arena
	entry  *CacheEntry
}

// extentItem is what the B-trees hold: the start address inline, so that a
// search compares without chasing a pointer per step (16 bytes, four to a
// cache line), and the extent. Extents starting at the same address are
// ordered by their seq, read only for such ties.
type extentItem struct {
	start uint64
	e     *extent
}

func (e *extent) item() extentItem { return extentItem{e.start, e} }

func itemLess(a, b extentItem) bool {
	if a.start != b.start {
		return a.start < b.start
	}
	return a.e.seq < b.e.seq
}

// lastAt is the pivot's extent: it sorts after every extent starting at the
// same address.
var lastAt = &extent{seq: math.MaxUint64}

// btreeDegree trades lookup depth against copy-on-write cost per write.
const btreeDegree = 32

// addrIndex finds the extents containing an address range. Extents may
// overlap, so one ordered tree is not enough to stop a search early: the
// extents are kept in one google/btree BTreeG per length class (class c
// holds lengths in [2^(c-1), 2^c)), and a search descends each non-empty
// class from the address (DescendLessOrEqual) only as far as an extent of
// that class could still reach. A lookup costs one descent per class in
// use, O(log n), plus one step per extent of that class overlapping the
// address (more only when the same memory is registered many times).
type addrIndex struct {
	trees [65]*btree.BTreeG[extentItem]
	mask  uint64 // bit c-1 set when trees[c] is not empty
	dirty uint64 // classes changed since the last snapshot (master only)
}

func lengthClass(n uint64) int { return bits.Len64(n) }

// bitIndex returns the class of the lowest bit set in a class mask.
func bitIndex(m uint64) int { return bits.TrailingZeros64(m) + 1 }

func (ix *addrIndex) insert(e *extent) {
	c := lengthClass(e.end - e.start)
	if ix.trees[c] == nil {
		ix.trees[c] = btree.NewG(btreeDegree, itemLess)
	}
	ix.trees[c].ReplaceOrInsert(e.item())
	ix.mask |= 1 << (c - 1)
	ix.dirty |= 1 << (c - 1)
}

func (ix *addrIndex) remove(e *extent) {
	c := lengthClass(e.end - e.start)
	t := ix.trees[c]
	if t == nil {
		return
	}
	t.Delete(e.item())
	if t.Len() == 0 {
		ix.mask &^= 1 << (c - 1)
	}
	ix.dirty |= 1 << (c - 1)
}

// snapshot returns a read-only copy of ix: the changed classes are cloned
// (BTreeG.Clone is O(1), copy-on-write), the others shared with prev. ix
// keeps being written; the copy never is.
func (ix *addrIndex) snapshot(prev *addrIndex) *addrIndex {
	s := &addrIndex{mask: ix.mask}
	if prev != nil {
		s.trees = prev.trees
	}
	for d := ix.dirty; d != 0; d &= d - 1 {
		c := bitIndex(d)
		if ix.trees[c] == nil || ix.trees[c].Len() == 0 {
			s.trees[c] = nil
		} else {
			s.trees[c] = ix.trees[c].Clone()
		}
	}
	ix.dirty = 0
	return s
}

// addrFilter says which extents a search accepts.
type addrFilter uint8

const (
	findAny     addrFilter = iota // any extent
	findPDArena                   // an arena of the query's PD that is not freed
)

// addrQuery is the state of one search. Queries are pooled so that a search
// allocates nothing: its iterator (a method value bound once) would escape
// to the heap if it were made per call.
type addrQuery struct {
	pivot  extentItem
	end    uint64 // the range searched is [pivot.start, end)
	lo     uint64 // smallest start that can reach end in the current class
	filter addrFilter
	pd     PDHandle
	found  *extent
	iter   btree.ItemIteratorG[extentItem]
}

var queryPool = sync.Pool{New: func() any {
	q := new(addrQuery)
	q.iter = q.visit
	return q
}}

// find returns an extent containing [addr, addr+n) that the filter accepts,
// or nil. n must be at least 1 and addr+n must not overflow.
func (ix *addrIndex) find(addr, n uint64, filter addrFilter, pd PDHandle) *extent {
	q := queryPool.Get().(*addrQuery)
	q.pivot = extentItem{addr, lastAt}
	q.end, q.filter, q.pd, q.found = addr+n, filter, pd, nil
	for m := ix.mask; m != 0 && q.found == nil; m &= m - 1 {
		c := bitIndex(m)
		maxLen := uint64(math.MaxUint64)
		if c < 64 {
			maxLen = 1<<c - 1
		}
		q.lo = 0
		if q.end > maxLen {
			q.lo = q.end - maxLen
		}
		ix.trees[c].DescendLessOrEqual(q.pivot, q.iter)
	}
	e := q.found
	q.found = nil
	queryPool.Put(q)
	return e
}

// visit is the iterator of find: extents arrive in descending start order,
// all starting at or below the searched address.
func (q *addrQuery) visit(it extentItem) bool {
	if it.start < q.lo {
		return false
	}
	if it.e.end < q.end || !q.accepts(it.e) {
		return true
	}
	q.found = it.e
	return false
}

func (q *addrQuery) accepts(e *extent) bool {
	return q.filter == findAny || (e.arena.PD() == q.pd && !e.arena.freed.Load())
}

// overlapping calls fn for every extent that overlaps or touches
// [start, end), in no particular order, until fn returns false.
func (ix *addrIndex) overlapping(start, end uint64, fn func(*extent) bool) {
	pivot := extentItem{end, lastAt}
	for m := ix.mask; m != 0; m &= m - 1 {
		c := bitIndex(m)
		maxLen := uint64(math.MaxUint64)
		if c < 64 {
			maxLen = 1<<c - 1
		}
		lo := uint64(0)
		if start > maxLen {
			lo = start - maxLen
		}
		more := true
		ix.trees[c].DescendLessOrEqual(pivot, func(it extentItem) bool {
			if it.start < lo {
				return false
			}
			if it.e.end >= start {
				more = fn(it.e)
			}
			return more
		})
		if !more {
			return
		}
	}
}

// len returns the number of extents.
func (ix *addrIndex) len() int {
	n := 0
	for m := ix.mask; m != 0; m &= m - 1 {
		n += ix.trees[bitIndex(m)].Len()
	}
	return n
}
