package mr

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Keys are 32 bits. lkey == rkey for every region, as in rxe (rxe_mr_init
// sets both from the same value); the access flags, not the key, say what a
// remote peer may do. Each table keeps its objects in slots found by a
// 23-bit index, and every slot has an 8-bit variant that changes when the
// slot is reused, so that a key left over from a freed object does not
// name the next one. Indices are handed out in order (keeping the slot
// arrays dense), but a key does not show them: rxe's keys are
// index<<8 | random byte, so that about 256 guesses next to a key one has
// seen find a neighbour's; softnic's are built so that a peer cannot tell
// how, from the bits the IBTA leaves to the device:
//
//   - a region's key is bit 31 clear and, in the other 31 bits, its index
//     and variant together passed through a keyed permutation (a Feistel
//     network whose round keys each table draws at random), so that neither
//     the index, nor the order of registration, nor a reused slot's next
//     key can be read off keys one has seen;
//   - a window's key is bit 31 set, its index through another keyed
//     permutation in bits 30..8, and its variant in the low byte, which the
//     IBTA gives to the consumer: ibv_inc_rkey(3) and a bind's new rkey
//     change only that byte;
//   - a key an application requests (fi_mr requested_key) is what it asked
//     for: index<<8 | variant in the clear, in a table of its own.
//
// Bit 31 tells the tables apart, as rxe's MR and MW pools have index
// ranges of their own.
const (
	variantBits = 8
	variantMask = 1<<variantBits - 1
	windowBit   = 1 << 31 // set in every window key, clear in every region key
	indexBits   = 23
	indexSpace  = 1 << indexBits // indices per table

	chunkShift = 10
	chunkSlots = 1 << chunkShift
	numChunks  = indexSpace >> chunkShift

	// reuseDelay is how many freed indices wait before one is handed out
	// again: like rxe's cyclic index allocation (xa_alloc_cyclic) it keeps a
	// just-freed index out of use for a while. A region's variant is then
	// bumped, so that a stale region key matches nothing for 256 reuses of
	// its slot; a window's, which everyone who held the window saw, is drawn
	// at random (other than the last), as rxe draws every key byte.
	reuseDelay = 1024
)

// MaxKeys bounds the regions, and the windows, a table holds at once: the
// index space of their keys (ibv_query_device's max_mr and max_mw).
const MaxKeys = indexSpace

// IncRKey returns key with its 8-bit variant incremented, as ibv_inc_rkey(3)
// computes the new rkey of a memory window bind.
func IncRKey(key uint32) uint32 {
	return key&^variantMask | (key+1)&variantMask
}

// keyLayout is how a table builds its keys from its slots (see the top of
// this file).
type keyLayout uint8

const (
	layoutRequested keyLayout = iota // index<<8 | variant, as the application chose it
	layoutRegion                     // index<<8 | variant, permuted as a whole
	layoutWindow                     // windowBit | permuted index<<8 | variant
)

// feistelRounds is the number of rounds of a feistel permutation: each
// half is mixed four times.
const feistelRounds = 8

// feistel is a keyed permutation of the integers below 2^(hi+lo): an
// alternating Feistel network that splits its input into a high part of
// hi bits and a low part of lo bits and, round after round, XORs one part
// with a keyed hash of the other, so that every round, and the whole, can
// be undone. Its hash (a 64-bit mixer over the round key and the other
// part) is no vetted cipher: it hides how a key was built from peers that
// see keys; it is not meant to withstand cryptanalysis. It does not
// allocate.
type feistel struct {
	hi, lo uint8
	keys   [feistelRounds]uint64
}

func newFeistel(bits uint8, rng *rand.Rand) feistel {
	f := feistel{hi: (bits + 1) / 2, lo: bits / 2}
	for i := range f.keys {
		f.keys[i] = rng.Uint64()
	}
	return f
}

// round is the keyed hash of round i: murmur3's 64-bit finalizer of the
// round key mixed with v.
func (f *feistel) round(i int, v uint32) uint32 {
	h := f.keys[i] ^ uint64(v)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return uint32(h)
}

// encrypt maps x (below 2^(hi+lo)) to its image.
func (f *feistel) encrypt(x uint32) uint32 {
	hiMask, loMask := uint32(1)<<f.hi-1, uint32(1)<<f.lo-1
	h, l := x>>f.lo&hiMask, x&loMask
	for i := range feistelRounds {
		if i%2 == 0 {
			h = (h ^ f.round(i, l)) & hiMask
		} else {
			l = (l ^ f.round(i, h)) & loMask
		}
	}
	return h<<f.lo | l
}

// decrypt undoes encrypt.
func (f *feistel) decrypt(x uint32) uint32 {
	hiMask, loMask := uint32(1)<<f.hi-1, uint32(1)<<f.lo-1
	h, l := x>>f.lo&hiMask, x&loMask
	for i := feistelRounds - 1; i >= 0; i-- {
		if i%2 == 0 {
			h = (h ^ f.round(i, l)) & hiMask
		} else {
			l = (l ^ f.round(i, h)) & loMask
		}
	}
	return h<<f.lo | l
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

// keyTable maps keys to objects: a two-level array indexed by the key's
// index, the whole key compared on lookup. Lookups are lock-free; every
// other method needs the owning Table's mutex.
type keyTable[T any] struct {
	layout  keyLayout
	perm    feistel // layoutRegion: of 31 bits; layoutWindow: of indexBits
	limit   uint32  // indices usable
	chunks  [numChunks]atomic.Pointer[keyChunk[T]]
	storeMu sync.Mutex // held across a slot store

	next uint32   // indices below next have been handed out before
	free []uint32 // freed indices, oldest first from head
	head int
	live int
	rng  *rand.Rand

	// Requested keys (fi_mr requested_key) are chosen by applications, and
	// several may share an index: keys 1 and 2 are both index 0. The slot
	// holds one; the others hang off it in a chain, walked only when the
	// slot's key differs. nil but in the table of requested keys.
	chain func(*T) *atomic.Pointer[T]
	keyOf func(*T) uint32
}

func (kt *keyTable[T]) init(layout keyLayout, limit uint32, rng *rand.Rand) {
	kt.layout, kt.limit, kt.rng = layout, min(limit, indexSpace), rng
	switch layout {
	case layoutRegion:
		kt.perm = newFeistel(31, rng)
	case layoutWindow:
		kt.perm = newFeistel(indexBits, rng)
	}
	// Index 0 is never handed out, so that the table has a key nobody
	// holds (requested keys may use it).
	kt.next = 1
}

// index returns the index of the slot key would be in, and false for a key
// of another table.
func (kt *keyTable[T]) index(key uint32) (uint32, bool) {
	switch kt.layout {
	case layoutRegion:
		return kt.perm.decrypt(key) >> variantBits, key&windowBit == 0
	case layoutWindow:
		return kt.perm.decrypt(key >> variantBits & (indexSpace - 1)), key&windowBit != 0
	}
	return key >> variantBits, key&windowBit == 0
}

// keyFor returns the key of index i with variant v.
func (kt *keyTable[T]) keyFor(i uint32, v uint8) uint32 {
	switch kt.layout {
	case layoutRegion:
		return kt.perm.encrypt(i<<variantBits | uint32(v))
	case layoutWindow:
		return windowBit | kt.perm.encrypt(i)<<variantBits | uint32(v)
	}
	return i<<variantBits | uint32(v)
}

// lookup returns the object named by key, or why there is none.
func (kt *keyTable[T]) lookup(key uint32) (*T, Reason) {
	i, ok := kt.index(key)
	if !ok {
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

// slot returns index i's slot and its variant byte, creating the
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

// alloc takes a free index for a table-chosen key.
func (kt *keyTable[T]) alloc() (uint32, error) {
	queued := len(kt.free) - kt.head
	switch {
	case queued > reuseDelay || (queued > 0 && kt.next >= kt.limit):
		i := kt.free[kt.head]
		kt.head++
		if kt.head >= reuseDelay && kt.head*2 >= len(kt.free) {
			kt.free = append(kt.free[:0], kt.free[kt.head:]...)
			kt.head = 0
		}
		return i, nil
	case kt.next < kt.limit:
		kt.next++
		return kt.next - 1, nil
	}
	return 0, ErrNoMem
}

// keyAt returns the key the free index i is handed out with: its slot's
// next variant.
func (kt *keyTable[T]) keyAt(i uint32) uint32 {
	_, v := kt.slot(i)
	return kt.keyFor(i, *v)
}

// skip moves the free index i on to its next variant, for a key that must
// not be handed out (see Table.register).
func (kt *keyTable[T]) skip(i uint32) {
	_, v := kt.slot(i)
	kt.nextVariant(v)
}

// nextVariant changes a slot's variant for its next key: one up for a
// region, whose keys hide it; at random but never the same for a window,
// whose keys show it.
func (kt *keyTable[T]) nextVariant(v *uint8) {
	if kt.layout == layoutWindow {
		*v += 1 + uint8(kt.rng.UintN(variantMask))
		return
	}
	*v++
}

// install publishes p at the free index i under key (from keyAt).
func (kt *keyTable[T]) install(i, key uint32, p *T) {
	s, _ := kt.slot(i)
	kt.store(s, key, p)
	kt.live++
}

// installKey publishes p under a requested key, chained behind the slot's
// object if the index is in use. The key must not be in use, and must
// belong to the table (index).
func (kt *keyTable[T]) installKey(key uint32, p *T) {
	i, _ := kt.index(key)
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

// rekey publishes a new key for the object at index i (a window bind),
// keeping only the variant of newKey.
func (kt *keyTable[T]) rekey(i uint32, newKey uint32) uint32 {
	s, v := kt.slot(i)
	*v = uint8(newKey)
	key := kt.keyFor(i, *v)
	kt.store(s, key, s.ptr.Load())
	return key
}

// remove unpublishes p, at index i. When no key uses the index any more
// it is queued for reuse with its next variant (a table of requested keys
// hands out no index of its own).
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
	if kt.layout != layoutRequested {
		kt.nextVariant(v)
		kt.free = append(kt.free, i)
	}
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
