// Package keyspace hands out the 32-bit keys of memory regions and windows
// and finds the object a key names: the lkey/rkey space of package mr's
// table, as rxe's MR and MW pools are. It owns how keys are built (so that
// a peer cannot read an index, an order of registration or a next key off
// the keys it sees), when a freed index may be used again, and lock-free
// lookup; what a key's object may be used for is package mr's.
package keyspace

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

	// ReuseDelay is how many freed indices wait before one is handed out
	// again: like rxe's cyclic index allocation (xa_alloc_cyclic) it keeps a
	// just-freed index out of use for a while. A region's variant is then
	// bumped, so that a stale region key matches nothing for 256 reuses of
	// its slot; a window's, which everyone who held the window saw, is drawn
	// at random (other than the last), as rxe draws every key byte.
	ReuseDelay = 1024
)

// Indices is the size of a table's index space: the most objects it
// holds at once.
const Indices = indexSpace

// IsWindow reports whether key is a window's: bit 31 tells window keys
// from region keys.
func IsWindow(key uint32) bool { return key&windowBit != 0 }

// IncRKey returns key with its 8-bit variant incremented, as ibv_inc_rkey(3)
// computes the new rkey of a memory window bind.
func IncRKey(key uint32) uint32 {
	return key&^variantMask | (key+1)&variantMask
}

// Layout is how a table builds its keys from its slots (see the top of
// this file).
type Layout uint8

const (
	RequestedKeys Layout = iota // index<<8 | variant, as the application chose it
	RegionKeys                  // index<<8 | variant, permuted as a whole
	WindowKeys                  // windowBit | permuted index<<8 | variant
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

// Table maps keys to objects: a two-level array indexed by the key's
// index, the whole key compared on lookup. Lookups are lock-free; every
// other method needs its owner's lock.
type Table[T any] struct {
	layout  Layout
	perm    feistel // RegionKeys: of 31 bits; WindowKeys: of indexBits
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
	// slot's key differs. Chain returns an object's link in the chain and
	// KeyOf its key; both nil but in the table of requested keys, whose
	// owner sets them before any other call.
	Chain func(*T) *atomic.Pointer[T]
	KeyOf func(*T) uint32
}

func (kt *Table[T]) Init(layout Layout, limit uint32, rng *rand.Rand) {
	kt.layout, kt.limit, kt.rng = layout, min(limit, indexSpace), rng
	switch layout {
	case RegionKeys:
		kt.perm = newFeistel(31, rng)
	case WindowKeys:
		kt.perm = newFeistel(indexBits, rng)
	}
	// Index 0 is never handed out, so that the table has a key nobody
	// holds (requested keys may use it).
	kt.next = 1
}

// Index returns the index of the slot key would be in, and false for a key
// of another table.
func (kt *Table[T]) Index(key uint32) (uint32, bool) {
	switch kt.layout {
	case RegionKeys:
		return kt.perm.decrypt(key) >> variantBits, key&windowBit == 0
	case WindowKeys:
		return kt.perm.decrypt(key >> variantBits & (indexSpace - 1)), key&windowBit != 0
	}
	return key >> variantBits, key&windowBit == 0
}

// Variant returns the variant key carries: the part that changes when its
// slot is reused.
func (kt *Table[T]) Variant(key uint32) uint8 {
	if kt.layout == RegionKeys {
		return uint8(kt.perm.decrypt(key))
	}
	return uint8(key)
}

// KeyFor returns the key of index i with variant v.
func (kt *Table[T]) KeyFor(i uint32, v uint8) uint32 {
	switch kt.layout {
	case RegionKeys:
		return kt.perm.encrypt(i<<variantBits | uint32(v))
	case WindowKeys:
		return windowBit | kt.perm.encrypt(i)<<variantBits | uint32(v)
	}
	return i<<variantBits | uint32(v)
}

// Lookup returns the object named by key; when there is none, stale
// reports a key whose slot holds another key (freed, reused or re-keyed)
// rather than an empty or foreign slot.
func (kt *Table[T]) Lookup(key uint32) (p *T, stale bool) {
	i, ok := kt.Index(key)
	if !ok {
		return nil, false
	}
	c := kt.chunks[i>>chunkShift].Load()
	if c == nil {
		return nil, false
	}
	s := &c.slots[i&(chunkSlots-1)]
	seq := s.seq.Load()
	k, p := s.key.Load(), s.ptr.Load()
	if seq&1 != 0 || s.seq.Load() != seq {
		k, p = kt.loadLocked(s)
	}
	switch {
	case p == nil:
		return nil, false
	case k != key:
		return kt.lookupChain(p, key)
	}
	return p, false
}

// lookupChain looks for key among the requested keys sharing head's index.
func (kt *Table[T]) lookupChain(head *T, key uint32) (p *T, stale bool) {
	if kt.Chain != nil {
		for c := kt.Chain(head).Load(); c != nil; c = kt.Chain(c).Load() {
			if kt.KeyOf(c) == key {
				return c, false
			}
		}
	}
	return nil, true
}

// loadLocked reads a slot a writer is storing, once the store is done.
func (kt *Table[T]) loadLocked(s *slot[T]) (uint32, *T) {
	kt.storeMu.Lock()
	defer kt.storeMu.Unlock()
	return s.key.Load(), s.ptr.Load()
}

// slot returns index i's slot and its variant byte, creating the
// chunk (with random first variants) if needed.
func (kt *Table[T]) slot(i uint32) (*slot[T], *uint8) {
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

// Alloc takes a free index for a table-chosen key; false when every
// index below the table's limit is in use or waiting for reuse.
func (kt *Table[T]) Alloc() (uint32, bool) {
	queued := len(kt.free) - kt.head
	switch {
	case queued > ReuseDelay || (queued > 0 && kt.next >= kt.limit):
		i := kt.free[kt.head]
		kt.head++
		if kt.head >= ReuseDelay && kt.head*2 >= len(kt.free) {
			kt.free = append(kt.free[:0], kt.free[kt.head:]...)
			kt.head = 0
		}
		return i, true
	case kt.next < kt.limit:
		kt.next++
		return kt.next - 1, true
	}
	return 0, false
}

// KeyAt returns the key the free index i is handed out with: its slot's
// next variant.
func (kt *Table[T]) KeyAt(i uint32) uint32 {
	_, v := kt.slot(i)
	return kt.KeyFor(i, *v)
}

// Skip moves the free index i on to its next variant, for a key that must
// not be handed out (package mr's Table.register).
func (kt *Table[T]) Skip(i uint32) {
	_, v := kt.slot(i)
	kt.nextVariant(v)
}

// nextVariant changes a slot's variant for its next key: one up for a
// region, whose keys hide it; at random but never the same for a window,
// whose keys show it.
func (kt *Table[T]) nextVariant(v *uint8) {
	if kt.layout == WindowKeys {
		*v += 1 + uint8(kt.rng.UintN(variantMask))
		return
	}
	*v++
}

// Install publishes p at the free index i under key (from KeyAt).
func (kt *Table[T]) Install(i, key uint32, p *T) {
	s, _ := kt.slot(i)
	kt.store(s, key, p)
	kt.live++
}

// InstallKey publishes p under a requested key, chained behind the slot's
// object if the index is in use. The key must not be in use, and must
// belong to the table (index).
func (kt *Table[T]) InstallKey(key uint32, p *T) {
	i, _ := kt.Index(key)
	s, v := kt.slot(i)
	kt.live++
	head := s.ptr.Load()
	if head == nil {
		*v = uint8(key)
		kt.store(s, key, p)
		return
	}
	kt.Chain(p).Store(kt.Chain(head).Load())
	kt.Chain(head).Store(p)
}

// Has reports whether key names an object.
func (kt *Table[T]) Has(key uint32) bool {
	p, _ := kt.Lookup(key)
	return p != nil
}

// Live returns the number of objects in the table.
func (kt *Table[T]) Live() int { return kt.live }

// Limit returns the number of indices the table may hand out.
func (kt *Table[T]) Limit() uint32 { return kt.limit }

// Rekey publishes a new key for the object at index i (a window bind),
// keeping only the variant of newKey.
func (kt *Table[T]) Rekey(i uint32, newKey uint32) uint32 {
	s, v := kt.slot(i)
	*v = uint8(newKey)
	key := kt.KeyFor(i, *v)
	kt.store(s, key, s.ptr.Load())
	return key
}

// Remove unpublishes p, at index i. When no key uses the index any more
// it is queued for reuse with its next variant (a table of requested keys
// hands out no index of its own).
func (kt *Table[T]) Remove(i uint32, p *T) {
	s, v := kt.slot(i)
	kt.live--
	head := s.ptr.Load()
	if head != p {
		// p is chained: unlink it. A reader standing on p still finds the
		// rest of the chain through it.
		prev := head
		for kt.Chain(prev).Load() != p {
			prev = kt.Chain(prev).Load()
		}
		kt.Chain(prev).Store(kt.Chain(p).Load())
		return
	}
	if kt.Chain != nil {
		if next := kt.Chain(p).Load(); next != nil {
			kt.store(s, kt.KeyOf(next), next)
			return
		}
	}
	kt.store(s, s.key.Load(), nil)
	if kt.layout != RequestedKeys {
		kt.nextVariant(v)
		kt.free = append(kt.free, i)
	}
}

func (kt *Table[T]) store(s *slot[T], key uint32, p *T) {
	kt.storeMu.Lock()
	seq := s.seq.Load()
	s.seq.Store(seq + 1)
	s.key.Store(key)
	s.ptr.Store(p)
	s.seq.Store(seq + 2)
	kt.storeMu.Unlock()
}

// Each calls fn for every object in the table, chained ones included,
// without locking; it sees each slot as it is at the moment it is read.
func (kt *Table[T]) Each(fn func(*T) bool) {
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
func (kt *Table[T]) chained(p *T) *T {
	if kt.Chain == nil {
		return nil
	}
	return kt.Chain(p).Load()
}
