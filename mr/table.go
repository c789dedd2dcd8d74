package mr

import (
	crand "crypto/rand"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/mr/keyspace"
)

// PDHandle is the number of a protection domain in a Table (ibv_pd's
// handle), allocated by AllocPD (ibv_alloc_pd); nic.PD is the protection
// domain itself, and nic.PD.Handle returns its PDHandle.
type PDHandle uint32

// Config configures a Table.
type Config struct {
	// Logger receives control-path events (never per-packet ones); nil
	// discards them.
	Logger *slog.Logger
	// MaxRegions and MaxWindows bound the key indices handed out; zero or
	// anything above the index space (2^23 each) means the whole space.
	MaxRegions, MaxWindows int
}

// MaxKeys bounds the regions, and the windows, a table holds at once: the
// index space of their keys (ibv_query_device's max_mr and max_mw).
const MaxKeys = keyspace.Indices

// Table is a NIC's memory-region table: protection domains, regions,
// memory windows and arenas, found by key for the data path and by address
// for local buffers, on-demand paging and the registration cache.
//
// All methods are safe for concurrent use. Remote, Local, RegionAt and the
// Span methods take no lock that registration holds for long: they run
// concurrently with registration and deregistration.
type Table struct {
	mu        sync.Mutex // registration, deregistration, PDs, windows, arenas
	closed    bool
	regions   keyspace.Table[Region] // keys the table chose
	requested keyspace.Table[Region] // keys applications chose (fi_mr requested_key)
	windows   keyspace.Table[Window]
	pds       map[PDHandle]*pdState
	nextPD    PDHandle
	arenas    int

	// The address indices: one of region memory per PD (searches are
	// always within a PD, and need not look at other PDs' regions) and
	// one of arenas. Writers change them under addrMu and bump addrGen;
	// readers use an immutable snapshot, and the first reader after a
	// change publishes a new one (see addrView).
	addrMu      sync.Mutex
	addrRegions map[PDHandle]*addrIndex
	addrArenas  addrIndex
	addrSeq     uint64
	addrGen     atomic.Uint64
	addrSnap    atomic.Pointer[addrSnapshot]

	// draining holds deregistered regions whose memory Spans still use, so
	// that a pinned region stays reachable (an unreachable runtime.Pinner
	// that still pins is a fatal error) even if a Span is never released.
	drainMu  sync.Mutex
	draining map[*Region]struct{}

	log   *slog.Logger
	stats tableCounters
}

type pdState struct{ regions, windows, arenas int }

type addrSnapshot struct {
	gen     uint64
	regions map[PDHandle]*addrIndex
	arenas  *addrIndex
}

// region returns an extent of a region of pd holding all of [addr, addr+n).
func (s *addrSnapshot) region(addr, n uint64, pd PDHandle) *extent {
	if ix := s.regions[pd]; ix != nil {
		return ix.find(addr, n, findAny, pd)
	}
	return nil
}

// memory returns an extent of region or arena memory of pd holding all of
// [addr, addr+n).
func (s *addrSnapshot) memory(addr, n uint64, pd PDHandle) *extent {
	if e := s.region(addr, n, pd); e != nil {
		return e
	}
	return s.arenas.find(addr, n, findPDArena, pd)
}

type tableCounters struct {
	registered, deregistered atomic.Uint64
	rejects                  [numReasons]atomic.Uint64
}

// NewTable returns an empty table.
func NewTable(cfg Config) *Table {
	// The key permutations and the first key variants come from a
	// generator seeded per table, so that keys are not guessable from a
	// registration count or from another table's keys.
	var seed [32]byte
	crand.Read(seed[:]) // never fails (Go 1.24+)
	rng := rand.New(rand.NewChaCha8(seed))
	t := &Table{pds: make(map[PDHandle]*pdState), draining: make(map[*Region]struct{}), addrRegions: make(map[PDHandle]*addrIndex), log: cfg.Logger}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.regions.Init(keyspace.RegionKeys, limit(cfg.MaxRegions), rng)
	t.requested.Init(keyspace.RequestedKeys, limit(cfg.MaxRegions), rng)
	t.requested.Chain = func(r *Region) *atomic.Pointer[Region] { return &r.sameIndex }
	t.requested.KeyOf = func(r *Region) uint32 { return r.key }
	t.windows.Init(keyspace.WindowKeys, limit(cfg.MaxWindows), rng)
	t.addrSnap.Store(&addrSnapshot{arenas: new(addrIndex)})
	return t
}

func limit(n int) uint32 {
	if n <= 0 || n >= keyspace.Indices {
		return keyspace.Indices
	}
	return uint32(n) + 1 // index 0 is never handed out
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (t *Table) AllocPD() (PDHandle, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, fmt.Errorf("table closed: %w", ErrInvalid)
	}
	if t.nextPD == math.MaxUint32 {
		return 0, fmt.Errorf("protection domains exhausted: %w", ErrNoMem)
	}
	t.nextPD++
	t.pds[t.nextPD] = new(pdState)
	return t.nextPD, nil
}

// DeallocPD frees a protection domain (ibv_dealloc_pd). It fails with
// ErrBusy while regions, windows or arenas remain in it.
func (t *Table) DeallocPD(pd PDHandle) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.pds[pd]
	if !ok {
		return fmt.Errorf("PD %d: %w", pd, ErrInvalid)
	}
	if s.regions+s.windows+s.arenas != 0 {
		return fmt.Errorf("PD %d has %d regions, %d windows, %d arenas: %w", pd, s.regions, s.windows, s.arenas, ErrBusy)
	}
	delete(t.pds, pd)
	return nil
}

// usableLocked checks that the table is open and pd exists.
func (t *Table) usableLocked(pd PDHandle) error {
	if t.closed {
		return fmt.Errorf("table closed: %w", ErrInvalid)
	}
	if _, ok := t.pds[pd]; !ok {
		return fmt.Errorf("PD %d: %w", pd, ErrInvalid)
	}
	return nil
}

// Register registers buf as a memory region of pd (ibv_reg_mr). Unless
// access has ZeroBased the region's remote address is buf's address. buf
// is pinned (runtime.Pinner) until the region is deregistered and its last
// Span released; memory of an Arena is kept mapped instead.
//
// Errors: ErrInvalid for an unknown PD, an empty buf, unknown access bits,
// or REMOTE_WRITE / REMOTE_ATOMIC without LOCAL_WRITE; ErrNoMem when the
// key space is full.
func (t *Table) Register(pd PDHandle, buf []byte, access Access) (*Region, error) {
	return t.register(regSpec{pd: pd, segs: [][]byte{buf}, access: access})
}

// RegisterIOVA registers buf as a memory region of pd whose remote address
// is iova rather than buf's address (ibv_reg_mr_iova2): local SGEs and
// remote requests address the region from iova, unless access has
// ZeroBased. It is for memory mapped at another address in the process
// that uses the region, such as an attached process's pages the daemon
// maps too. Its errors are Register's, and ErrInvalid for an address space
// that wraps.
func (t *Table) RegisterIOVA(pd PDHandle, buf []byte, iova uint64, access Access) (*Region, error) {
	return t.register(regSpec{pd: pd, segs: [][]byte{buf}, access: access, iova: iova, hasIOVA: true})
}

// RegisterImplicit registers an implicit on-demand paging region of pd:
// ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...). Its address
// space is every address; an access resolves to memory of pd the table
// knows (other regions' buffers and arenas) or fails with ReasonNotMapped.
// access must include OnDemand.
func (t *Table) RegisterImplicit(pd PDHandle, access Access) (*Region, error) {
	// "To create an implicit ODP MR, IBV_ACCESS_ON_DEMAND should be set,
	// addr should be 0 and length should be SIZE_MAX."
	if access&OnDemand == 0 {
		return nil, fmt.Errorf("implicit region without ON_DEMAND: %w", ErrInvalid)
	}
	return t.register(regSpec{pd: pd, access: access, implicit: true})
}

// regSpec is everything a registration can ask for; the verbs and fi_mr
// faces fill in what they need.
type regSpec struct {
	pd       PDHandle
	segs     [][]byte
	access   Access
	implicit bool
	// hasIOVA sets the region's remote address to iova instead of the
	// first buffer's address (RegisterIOVA).
	iova    uint64
	hasIOVA bool
	// requested is set for an application-chosen key (fi_mr requested_key).
	requested    bool
	requestedKey uint32
	pkey         uint16 // partition the region is reachable from; 0: any
	disabled     bool   // created disabled (fi_mr RMA_EVENT / ENDPOINT)
}

func (t *Table) register(spec regSpec) (*Region, error) {
	if err := spec.access.validate(); err != nil {
		return nil, err
	}
	if !spec.implicit {
		if len(spec.segs) == 0 {
			return nil, fmt.Errorf("no buffers: %w", ErrInvalid)
		}
		for i, s := range spec.segs {
			// ib_umem_get() rejects a registration of zero pages.
			if len(s) == 0 {
				return nil, fmt.Errorf("buffer %d is empty: %w", i, ErrInvalid)
			}
		}
		// ODP tracks the pages of one buffer; several buffers only come
		// from fi_mr_regv, which has no on-demand access bit.
		if spec.access&OnDemand != 0 && len(spec.segs) > 1 {
			return nil, fmt.Errorf("ON_DEMAND over %d buffers: %w", len(spec.segs), ErrInvalid)
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableLocked(spec.pd); err != nil {
		return nil, err
	}
	r := &Region{t: t, implicit: spec.implicit, pkey: spec.pkey}
	r.pdAcc.Store(uint64(spec.pd)<<32 | uint64(spec.access))
	if spec.disabled {
		r.flags.Store(regionDisabled)
	}
	if spec.implicit {
		r.kind, r.length = ImplicitODP, implicitLen
		r.odp = newSparsePages()
	} else if err := t.attachMemoryLocked(r, spec); err != nil {
		return nil, err
	}

	i, err := t.keyIndexLocked(spec)
	if err != nil {
		if !spec.implicit {
			r.mem.unref()
		}
		return nil, err
	}
	r.index, r.requested = i, spec.requested
	r.key = spec.requestedKey
	if !spec.requested {
		r.key = t.regions.KeyAt(i)
		// Key 0 is left out (software takes it for no key at all), and so is
		// a requested key.
		for r.key == 0 || t.requested.Has(r.key) {
			t.regions.Skip(i)
			r.key = t.regions.KeyAt(i)
		}
	}
	// r is complete: publish it, by address, then by key.
	for _, e := range r.exts {
		t.addrInsert(e)
	}
	if spec.requested {
		t.requested.InstallKey(r.key, r)
	} else {
		t.regions.Install(i, r.key, r)
	}
	t.pds[spec.pd].regions++
	t.stats.registered.Add(1)
	return r, nil
}

// attachMemoryLocked sets up r's memory from spec's buffers: the address
// space, the arenas the buffers lie in (referenced) and the pinned caller
// memory.
func (t *Table) attachMemoryLocked(r *Region, spec regSpec) error {
	r.mem.region = r
	r.mem.init(spec.segs)
	r.length = r.mem.size
	if spec.access&ZeroBased == 0 {
		r.base = addrOf(spec.segs[0])
		if spec.hasIOVA {
			r.base = spec.iova
		}
		// The remote address space of an iov region runs on from the first
		// buffer's address; it must not wrap.
		if r.length > math.MaxUint64-r.base {
			return fmt.Errorf("address space [%#x, +%d) wraps: %w", r.base, r.length, ErrInvalid)
		}
	}
	r.arenas = make([]*Arena, len(spec.segs))
	r.exts = make([]*extent, len(spec.segs))
	pinned := false
	for i, s := range spec.segs {
		r.arenas[i] = t.arenaOf(s)
		pinned = pinned || r.arenas[i] == nil
		e := &r.ext0
		if i > 0 {
			e = new(extent)
		}
		*e = extent{start: addrOf(s), end: addrOf(s) + uint64(len(s)), region: r, seg: i}
		r.exts[i] = e
	}
	r.kind = ArenaMemory
	if pinned {
		r.kind = CallerMemory
		r.pinner = pin(spec.segs, r.arenas)
	}
	if spec.access&OnDemand != 0 {
		r.odp = newDensePages(r.ext0.start, r.length)
	}
	return nil
}

// arenaOf returns the arena holding all of b, with a reference taken, or
// nil if b is not arena memory.
func (t *Table) arenaOf(b []byte) *Arena {
	t.addrMu.Lock()
	defer t.addrMu.Unlock()
	e := t.addrArenas.find(addrOf(b), uint64(len(b)), findAny, 0)
	if e == nil || !e.arena.mem.tryRef() {
		return nil
	}
	return e.arena
}

// keyIndexLocked takes the key index of a new region: the requested key's,
// or a free one.
func (t *Table) keyIndexLocked(spec regSpec) (uint32, error) {
	if !spec.requested {
		i, ok := t.regions.Alloc()
		if !ok {
			return 0, fmt.Errorf("%d regions: %w", t.regions.Live(), ErrNoMem)
		}
		return i, nil
	}
	i, ok := t.requested.Index(spec.requestedKey)
	if !ok || i >= t.requested.Limit() {
		return 0, fmt.Errorf("key %#x out of range: %w", spec.requestedKey, ErrKeyRejected)
	}
	if _, why := t.region(spec.requestedKey); why == 0 {
		return 0, fmt.Errorf("key %#x: %w", spec.requestedKey, ErrNoKey)
	}
	return i, nil
}

// Deregister deregisters r (ibv_dereg_mr). Its keys stop working at once;
// its memory stays valid for transfers already holding a Span, and is
// unpinned (or its arena unmapped) when the last one is released. It fails
// with ErrBusy while a memory window is bound to r ("ibv_dereg_mr() fails if
// any memory window is still bound to this MR"), and with ErrInvalid if r
// is already deregistered.
func (t *Table) Deregister(r *Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deregisterLocked(r)
}

func (t *Table) deregisterLocked(r *Region) error {
	if r.t != t || !r.live() {
		return fmt.Errorf("region not registered: %w", ErrInvalid)
	}
	if n := r.windows.Load(); n > 0 {
		return fmt.Errorf("region %#x has %d windows bound: %w", r.key, n, ErrBusy)
	}
	t.keysOf(r).Remove(r.index, r)
	for _, e := range r.exts {
		t.addrRemove(e)
	}
	r.flags.Or(regionDead)
	t.pds[r.pd()].regions--
	t.stats.deregistered.Add(1)
	if !r.implicit {
		t.drainMu.Lock()
		t.draining[r] = struct{}{}
		t.drainMu.Unlock()
		r.mem.unref()
	}
	return nil
}

// ReregFlags says what ibv_rereg_mr changes.
type ReregFlags uint32

// The ibv_rereg_mr flags, with libibverbs' values.
const (
	ReregTranslation ReregFlags = 1 << 0 // IBV_REREG_MR_CHANGE_TRANSLATION
	ReregPD          ReregFlags = 1 << 1 // IBV_REREG_MR_CHANGE_PD
	ReregAccess      ReregFlags = 1 << 2 // IBV_REREG_MR_CHANGE_ACCESS
)

// Rereg changes the protection domain and/or the access flags of r in place
// (ibv_rereg_mr). As in rxe (rxe_rereg_user_mr) the region object stays the
// same, so its lkey and rkey stay valid and unchanged: peers need no new key.
// The arenas r's memory lies in stay in their PD; the owner of one that
// only r uses moves it along with MoveArena. A check that starts after
// Rereg returns sees the new PD and access together; a Span taken before
// keeps the access it was granted, as a transfer rxe has started goes on.
// Like rxe, only ReregPD and ReregAccess are supported:
//
//   - flags 0: ErrInvalid (ib_uverbs_rereg_mr);
//   - ReregTranslation or unknown flags: ErrNotSupported (EOPNOTSUPP); so is
//     an access change that flips ZeroBased or OnDemand, which changes the
//     translation rather than the permissions;
//   - new access breaking ibv_reg_mr's rules, or an unknown PD: ErrInvalid.
//
// Windows bound to r stay bound and keep working: as in rxe, whose
// rxe_rereg_user_mr does not look at them and whose rxe_lookup_mw checks
// an access through a window against the window's own PD and rights, an
// access through a window does not depend on r's PD or access.
func (t *Table) Rereg(r *Region, flags ReregFlags, pd PDHandle, access Access) error {
	if flags == 0 {
		return fmt.Errorf("rereg without flags: %w", ErrInvalid)
	}
	if flags&^(ReregPD|ReregAccess) != 0 {
		return fmt.Errorf("rereg flags %#x: %w", uint32(flags&^(ReregPD|ReregAccess)), ErrNotSupported)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.t != t || !r.live() {
		return fmt.Errorf("region not registered: %w", ErrInvalid)
	}
	oldPD, oldAccess := r.pd(), r.access()
	if flags&ReregAccess == 0 {
		access = oldAccess
	}
	if flags&ReregPD == 0 {
		pd = oldPD
	}
	if err := access.validate(); err != nil {
		return err
	}
	if (access^oldAccess)&translation != 0 {
		return fmt.Errorf("rereg changing %v: %w", (access^oldAccess)&translation, ErrNotSupported)
	}
	if err := t.usableLocked(pd); err != nil {
		return err
	}
	pdAcc := uint64(pd)<<32 | uint64(access)
	if pd != oldPD && !r.implicit {
		t.addrMove(r, oldPD, pdAcc)
	} else {
		r.pdAcc.Store(pdAcc)
	}
	t.pds[oldPD].regions--
	t.pds[pd].regions++
	return nil
}

// Region returns the region whose key is key. Like Remote it is lock-free:
// the key's index selects a slot and the whole key is compared.
func (t *Table) Region(key uint32) (*Region, bool) {
	r, why := t.region(key)
	return r, why == 0
}

// region finds the region whose key is key: one the table chose or one an
// application requested. It is lock-free.
func (t *Table) region(key uint32) (*Region, Reason) {
	r, why := lookup(&t.regions, key)
	if why == 0 {
		return r, 0
	}
	r, whyRequested := lookup(&t.requested, key)
	if whyRequested == 0 || whyRequested == ReasonStaleKey {
		return r, whyRequested
	}
	return nil, why
}

// lookup returns the object key names in kt, or why there is none.
func lookup[T any](kt *keyspace.Table[T], key uint32) (*T, Reason) {
	switch p, stale := kt.Lookup(key); {
	case p != nil:
		return p, 0
	case stale:
		return nil, ReasonStaleKey
	}
	return nil, ReasonUnknownKey
}

// keysOf returns the key table r is in.
func (t *Table) keysOf(r *Region) *keyspace.Table[Region] {
	if r.requested {
		return &t.requested
	}
	return &t.regions
}

// RegionAt returns a region of pd whose memory holds all of
// [addr, addr+length), searching the address index (B-trees keyed by start
// address). Addresses are machine addresses of the memory, whatever the
// region's remote addressing. A zero length is looked up as one byte. It is
// lock-free and does not allocate.
func (t *Table) RegionAt(pd PDHandle, addr, length uint64) (*Region, bool) {
	length = max(length, 1)
	if addr > math.MaxUint64-length {
		return nil, false
	}
	e := t.addrView().region(addr, length, pd)
	if e == nil {
		return nil, false
	}
	return e.region, true
}

// addrView returns the current read-only address indices.
func (t *Table) addrView() *addrSnapshot {
	s := t.addrSnap.Load()
	if s.gen == t.addrGen.Load() {
		return s
	}
	return t.publishAddr()
}

// publishAddr snapshots the indices for readers. Only the first reader after
// a change pays for it; a burst of registrations with no lookups in between
// clones nothing.
func (t *Table) publishAddr() *addrSnapshot {
	t.addrMu.Lock()
	defer t.addrMu.Unlock()
	s := t.addrSnap.Load()
	gen := t.addrGen.Load()
	if s.gen == gen {
		return s
	}
	ns := &addrSnapshot{gen: gen, regions: make(map[PDHandle]*addrIndex, len(t.addrRegions)), arenas: s.arenas}
	for pd, ix := range t.addrRegions {
		if prev := s.regions[pd]; prev != nil && ix.dirty == 0 {
			ns.regions[pd] = prev
		} else {
			ns.regions[pd] = ix.snapshot(prev)
		}
	}
	if t.addrArenas.dirty != 0 {
		ns.arenas = t.addrArenas.snapshot(s.arenas)
	}
	t.addrSnap.Store(ns)
	return ns
}

// addrInsert adds e to the index of its region's PD, or of arenas.
func (t *Table) addrInsert(e *extent) {
	t.addrMu.Lock()
	t.addrInsertLocked(e, e.regionPD())
	t.addrGen.Add(1)
	t.addrMu.Unlock()
}

func (t *Table) addrInsertLocked(e *extent, pd PDHandle) {
	// An extent keeps its seq for life: snapshots still holding it compare
	// it.
	if e.seq == 0 {
		t.addrSeq++
		e.seq = t.addrSeq
	}
	if e.arena != nil {
		t.addrArenas.insert(e)
		return
	}
	ix := t.addrRegions[pd]
	if ix == nil {
		ix = new(addrIndex)
		t.addrRegions[pd] = ix
	}
	ix.insert(e)
}

// addrRemove takes e out of the index it is in.
func (t *Table) addrRemove(e *extent) {
	t.addrMu.Lock()
	t.addrRemoveLocked(e, e.regionPD())
	t.addrGen.Add(1)
	t.addrMu.Unlock()
}

func (t *Table) addrRemoveLocked(e *extent, pd PDHandle) {
	if e.arena != nil {
		t.addrArenas.remove(e)
		return
	}
	ix := t.addrRegions[pd]
	ix.remove(e)
	if ix.mask == 0 {
		delete(t.addrRegions, pd)
	}
}

// addrMove gives r a new PD and access (pdAcc) and moves its extents from
// the index of PD from to the new PD's, at once for address readers.
func (t *Table) addrMove(r *Region, from PDHandle, pdAcc uint64) {
	t.addrMu.Lock()
	for _, e := range r.exts {
		t.addrRemoveLocked(e, from)
		t.addrInsertLocked(e, PDHandle(pdAcc>>32))
	}
	r.pdAcc.Store(pdAcc)
	t.addrGen.Add(1)
	t.addrMu.Unlock()
}

// regionPD returns the PD of the region an extent belongs to (0 for
// arenas, which are indexed apart).
func (e *extent) regionPD() PDHandle {
	if e.region == nil {
		return 0
	}
	return e.region.pd()
}

// Regions iterates over the registered regions without blocking the data
// path or registration: each region is seen as it is when reached.
func (t *Table) Regions() iter.Seq[RegionInfo] {
	return func(yield func(RegionInfo) bool) {
		for _, kt := range []*keyspace.Table[Region]{&t.regions, &t.requested} {
			stopped := false
			kt.Each(func(r *Region) bool {
				stopped = !yield(r.Info())
				return !stopped
			})
			if stopped {
				return
			}
		}
	}
}

// Stats are table-wide counters.
type Stats struct {
	PDs, Regions, Windows, Arenas int
	// Draining counts deregistered regions whose memory Spans in flight
	// still hold.
	Draining                 int
	Registered, Deregistered uint64 // regions registered and deregistered, ever
	// Rejects counts refused accesses (Remote and Local) by reason.
	Rejects map[Reason]uint64
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	s := Stats{PDs: len(t.pds), Regions: t.regions.Live() + t.requested.Live(), Windows: t.windows.Live(), Arenas: t.arenas}
	t.mu.Unlock()
	t.drainMu.Lock()
	s.Draining = len(t.draining)
	t.drainMu.Unlock()
	s.Registered = t.stats.registered.Load()
	s.Deregistered = t.stats.deregistered.Load()
	s.Rejects = make(map[Reason]uint64)
	for r := Reason(1); r < numReasons; r++ {
		if n := t.stats.rejects[r].Load(); n != 0 {
			s.Rejects[r] = n
		}
	}
	return s
}

// Close deallocates every window, deregisters every region and frees every
// arena, then refuses new objects. Memory still used by a Span stays valid
// until released. A Table holding pinned memory must be closed (or its
// regions deregistered) before it is dropped.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	var ws []*Window
	t.windows.Each(func(w *Window) bool { ws = append(ws, w); return true })
	for _, w := range ws {
		t.deallocWindowLocked(w)
	}
	var rs []*Region
	for _, kt := range []*keyspace.Table[Region]{&t.regions, &t.requested} {
		kt.Each(func(r *Region) bool { rs = append(rs, r); return true })
	}
	for _, r := range rs {
		if err := t.deregisterLocked(r); err != nil {
			return err
		}
	}
	var as []*Arena
	t.addrMu.Lock()
	for m := t.addrArenas.mask; m != 0; m &= m - 1 {
		t.addrArenas.trees[bitIndex(m)].Ascend(func(it extentItem) bool {
			if a := it.e.arena; !a.freed.Load() {
				as = append(as, a)
			}
			return true
		})
	}
	t.addrMu.Unlock()
	for _, a := range as {
		a.freed.Store(true)
		t.pds[a.PD()].arenas--
		t.arenas--
		a.mem.unref()
	}
	t.closed = true
	t.log.Debug("mr table closed", slog.Int("regions", len(rs)), slog.Int("windows", len(ws)), slog.Int("arenas", len(as)))
	return nil
}
