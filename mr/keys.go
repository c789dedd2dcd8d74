package mr

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Keys are 32 bits: a 24-bit index and an 8-bit variant, index<<8 | variant,
// as rxe builds them (pool index << 8 | random key byte). lkey == rkey for
// every region, as in rxe (rxe_mr_init sets both from the same value); the
// access flags, not the key, say what a remote peer may do.
//
// The index space is split like rxe's MR and MW pools: regions take indices
// below windowIndex, memory windows take indices from windowIndex up, so a
// key alone says which table to search.
const (
	variantBits = 8
	variantMask = 1<<variantBits - 1
	windowIndex = 1 << 23 // first index of a memory window key
	indexSpace  = 1 << 23 // indices per table (regions, windows)

	chunkShift = 10
	chunkSlots = 1 << chunkShift
	numChunks  = indexSpace >> chunkShift

	// reuseDelay is how many freed indices wait before one is handed out
	// again: like rxe's cyclic index allocation (xa_alloc_cyclic) it keeps a
	// just-freed index out of use for a while, and with the variant bumped
	// on every reuse a stale key matches nothing for 256 reuses of its
	// index after that.
	reuseDelay = 1024
)

// IncRKey returns key with its 8-bit variant incremented, as ibv_inc_rkey(3)
// computes the new rkey of a memory window bind.
func IncRKey(key uint32) uint32 {
	return key&^variantMask | (key+1)&variantMask
}

// slot is one entry of a key table. Readers take a consistent (key, ptr)
// pair without a lock: writers make seq odd while they store, and a reader
// whose two loads of seq differ (or are odd) re-reads under storeMu.
type slot[T any] struct {
	seq atomic.Uint32
	key atomic.Uint32
	ptr atomic.Pointer[T]
}

// keyChunk is a fixed block of slots; chunks are never moved or freed, so a
// reader can use one without a lock.
type keyChunk[T any] struct {
	slots [chunkSlots]slot[T]
	// variant is the variant of the slot's next key. Writers only.
	variant [chunkSlots]uint8
}

// keyTable maps key indices to objects: a two-level array indexed by the
// key's index, the variant compared on lookup. Lookups are lock-free; every
// other method needs the owning Table's mutex.
type keyTable[T any] struct {
	base    uint32 // first index of this table
	limit   uint32 // indices usable (relative to base)
	chunks  [numChunks]atomic.Pointer[keyChunk[T]]
	storeMu sync.Mutex // held across a slot store

	next uint32   // relative indices below next have been handed out before
	free []uint32 // freed relative indices, oldest first from head
	head int
	live int
	rng  *rand.Rand

	// Requested keys (fi_mr requested_key) are chosen by applications, and
	// several may share an index: keys 1 and 2 are both index 0. The slot
	// holds one; the others hang off it in a chain, walked only when the
	// slot's key differs. nil for a table without requested keys.
	chain func(*T) *atomic.Pointer[T]
	keyOf func(*T) uint32
}

func (kt *keyTable[T]) init(base, limit uint32, rng *rand.Rand) {
	kt.base, kt.limit, kt.rng = base, min(limit, indexSpace), rng
	// Relative index 0 is never handed out, so the zero key names nothing
	// that the table chose.
	kt.next = 1
}

// lookup returns the object named by key, or why there is none.
func (kt *keyTable[T]) lookup(key uint32) (*T, Reason) {
	i := key>>variantBits - kt.base
	if i >= indexSpace {
		return nil, ReasonUnknownKey
	}
	c := kt.chunks[i>>chunkShift].Load()
	if c == nil {
		return nil, ReasonUnknownKey
	}
	s := &c.slots[i&(chunkSlots-1)]
	seq := s.seq.Load()
	k, p := s.key.Load(), s.ptr.Load()
	if seq&1 != 0 || s.seq.Load() != seq {
		k, p = kt.loadLocked(s)
	}
	switch {
	case p == nil:
		return nil, ReasonUnknownKey
	case k != key:
		return kt.lookupChain(p, key)
	}
	return p, 0
}

// lookupChain looks for key among the requested keys sharing head's index.
func (kt *keyTable[T]) lookupChain(head *T, key uint32) (*T, Reason) {
	if kt.chain != nil {
		for c := kt.chain(head).Load(); c != nil; c = kt.chain(c).Load() {
			if kt.keyOf(c) == key {
				return c, 0
			}
		}
	}
	return nil, ReasonStaleKey
}

// loadLocked reads a slot a writer is storing, once the store is done.
func (kt *keyTable[T]) loadLocked(s *slot[T]) (uint32, *T) {
	kt.storeMu.Lock()
	defer kt.storeMu.Unlock()
	return s.key.Load(), s.ptr.Load()
}

// slot returns relative index i's slot and its variant byte, creating the
// chunk (with random first variants) if needed.
func (kt *keyTable[T]) slot(i uint32) (*slot[T], *uint8) {
	cp := &kt.chunks[i>>chunkShift]
	c := cp.Load()
	if c == nil {
		c = new(keyChunk[T])
		for j := range c.variant {
			c.variant[j] = uint8(kt.rng.Uint32())
		}
		cp.Store(c)
	}
	j := i & (chunkSlots - 1)
	return &c.slots[j], &c.variant[j]
}

func (kt *keyTable[T]) used(i uint32) bool {
	s, _ := kt.slot(i)
	return s.ptr.Load() != nil
}

// alloc takes a free relative index for a table-chosen key.
func (kt *keyTable[T]) alloc() (uint32, error) {
	for {
		var i uint32
		queued := len(kt.free) - kt.head
		switch {
		case queued > reuseDelay || (queued > 0 && kt.next >= kt.limit):
			i = kt.free[kt.head]
			kt.head++
			if kt.head >= reuseDelay && kt.head*2 >= len(kt.free) {
				kt.free = append(kt.free[:0], kt.free[kt.head:]...)
				kt.head = 0
			}
		case kt.next < kt.limit:
			i = kt.next
			kt.next++
		default:
			return 0, ErrNoMem
		}
		// An index taken by a requested key may still be queued or ahead
		// of next: skip it.
		if !kt.used(i) {
			return i, nil
		}
	}
}

// keyAt returns the key the free relative index i is handed out with: its
// slot's next variant.
func (kt *keyTable[T]) keyAt(i uint32) uint32 {
	_, v := kt.slot(i)
	return (kt.base+i)<<variantBits | uint32(*v)
}

// install publishes p at the free relative index i under key (from keyAt).
func (kt *keyTable[T]) install(i, key uint32, p *T) {
	s, _ := kt.slot(i)
	kt.store(s, key, p)
	kt.live++
}

// installKey publishes p under a requested key, chained behind the slot's
// object if the index is in use. The key must not be in use.
func (kt *keyTable[T]) installKey(key uint32, p *T) {
	i := key>>variantBits - kt.base
	s, v := kt.slot(i)
	kt.live++
	head := s.ptr.Load()
	if head == nil {
		*v = uint8(key)
		kt.store(s, key, p)
		return
	}
	kt.chain(p).Store(kt.chain(head).Load())
	kt.chain(head).Store(p)
}

// has reports whether key names an object.
func (kt *keyTable[T]) has(key uint32) bool {
	_, why := kt.lookup(key)
	return why == 0
}

// rekey publishes a new key for the object at relative index i (a window
// bind), keeping only the variant of newKey.
func (kt *keyTable[T]) rekey(i uint32, newKey uint32) uint32 {
	s, v := kt.slot(i)
	*v = uint8(newKey)
	key := (kt.base+i)<<variantBits | uint32(*v)
	kt.store(s, key, s.ptr.Load())
	return key
}

// remove unpublishes p, at relative index i. When no key uses the index
// any more it is queued for reuse with the next variant.
func (kt *keyTable[T]) remove(i uint32, p *T) {
	s, v := kt.slot(i)
	kt.live--
	head := s.ptr.Load()
	if head != p {
		// p is chained: unlink it. A reader standing on p still finds the
		// rest of the chain through it.
		prev := head
		for kt.chain(prev).Load() != p {
			prev = kt.chain(prev).Load()
		}
		kt.chain(prev).Store(kt.chain(p).Load())
		return
	}
	if kt.chain != nil {
		if next := kt.chain(p).Load(); next != nil {
			kt.store(s, kt.keyOf(next), next)
			return
		}
	}
	kt.store(s, s.key.Load(), nil)
	*v++
	kt.free = append(kt.free, i)
}

func (kt *keyTable[T]) store(s *slot[T], key uint32, p *T) {
	kt.storeMu.Lock()
	seq := s.seq.Load()
	s.seq.Store(seq + 1)
	s.key.Store(key)
	s.ptr.Store(p)
	s.seq.Store(seq + 2)
	kt.storeMu.Unlock()
}

// each calls fn for every object in the table, chained ones included,
// without locking; it sees each slot as it is at the moment it is read.
func (kt *keyTable[T]) each(fn func(*T) bool) {
	for ci := range kt.chunks {
		c := kt.chunks[ci].Load()
		if c == nil {
			continue
		}
		for j := range c.slots {
			for p := c.slots[j].ptr.Load(); p != nil; p = kt.chained(p) {
				if !fn(p) {
					return
				}
			}
		}
	}
}

// chained returns the object chained after p, if the table chains.
func (kt *keyTable[T]) chained(p *T) *T {
	if kt.chain == nil {
		return nil
	}
	return kt.chain(p).Load()
}

// relIndex returns key's index relative to the table, and whether it lies in
// the table.
func (kt *keyTable[T]) relIndex(key uint32) (uint32, bool) {
	i := key>>variantBits - kt.base
	return i, i < indexSpace
}
