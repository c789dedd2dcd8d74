package mr

import (
	"math"
	"runtime"
	"sync/atomic"
)

// Region is a registered memory region (struct ibv_mr): memory of a
// protection domain that local work requests reach through its lkey and
// remote peers through its rkey, with the access its registration grants.
//
// A Region's methods are safe for concurrent use. Its memory stays valid
// until it is deregistered and every Span over it released.
type Region struct {
	// Read on every access check; kept together at the front.
	pdAcc  atomic.Uint64 // PD<<32 | Access: re-registration changes both at once
	flags  atomic.Uint32 // regionDead | regionDisabled | regionRefreshing
	pkey   uint16        // P_Key a requester must match; 0 accepts any
	key    uint32        // lkey == rkey; re-registration keeps it
	base   uint64        // remote address of the first byte: 0 if zero-based, else a VA
	length uint64
	bound  atomic.Pointer[Binding] // counters and endpoint of an fi_mr region
	odp    *pageSet                // nil unless ON_DEMAND
	mem    memory

	t         *Table
	index     uint32                 // index in t.regions, or in t.requested
	requested bool                   // its key is an application's (t.requested)
	sameIndex atomic.Pointer[Region] // next region whose requested key shares the index
	implicit  bool
	kind      MemoryKind
	exts      []*extent // one per segment, the first is ext0
	ext0      extent
	arenas    []*Arena // per segment: the arena it lies in, or nil (pinned caller memory)
	pinner    *runtime.Pinner
	windows   atomic.Int32 // windows bound to the region; written under t.mu
}

const (
	regionDead       = 1 << 0
	regionDisabled   = 1 << 1
	regionRefreshing = 1 << 2
)

// MemoryKind says what memory is behind a region.
type MemoryKind uint8

// The kinds of region memory.
const (
	CallerMemory MemoryKind = iota + 1 // caller slices, pinned for the registration's life
	ArenaMemory                        // NIC-owned mmap'd arenas
	ImplicitODP                        // no memory of its own: implicit ODP resolves each access
)

// String returns the kind's name as listings show it.
func (k MemoryKind) String() string {
	switch k {
	case CallerMemory:
		return "caller"
	case ArenaMemory:
		return "arena"
	case ImplicitODP:
		return "implicit-odp"
	}
	return "unknown"
}

func (r *Region) pd() PDHandle   { return PDHandle(r.pdAcc.Load() >> 32) }
func (r *Region) access() Access { return Access(uint32(r.pdAcc.Load())) }
func (r *Region) live() bool     { return r.flags.Load()&regionDead == 0 }

// LKey returns the local key (L_Key) for SGEs of local work requests.
func (r *Region) LKey() uint32 { return r.key }

// RKey returns the remote key (R_Key) remote peers put in RDMA and atomic
// requests. It equals the lkey, as in rxe.
func (r *Region) RKey() uint32 { return r.key }

// PD returns the region's protection domain.
func (r *Region) PD() PDHandle { return r.pd() }

// Access returns the region's access flags.
func (r *Region) Access() Access { return r.access() }

// Addr returns the remote address of the region's first byte: 0 for
// zero-based and implicit ODP regions, otherwise the virtual address it was
// registered at: the address of the first buffer, as ibv_reg_mr's iova,
// or RegisterIOVA's iova.
func (r *Region) Addr() uint64 { return r.base }

// Len returns the region's length in bytes (math.MaxUint64 for implicit
// ODP).
func (r *Region) Len() uint64 { return r.length }

// Kind says what memory is behind the region.
func (r *Region) Kind() MemoryKind { return r.kind }

// Segments returns the buffers behind the region, in remote address order;
// nil for implicit ODP.
func (r *Region) Segments() [][]byte {
	return append([][]byte(nil), r.mem.segs...)
}

// ODP returns the region's on-demand paging counters (zero unless
// ON_DEMAND).
func (r *Region) ODP() ODPStats { return r.odp.stats() }

// offset returns the memory offset of [addr, addr+length) in r's address
// space, or false if the range is not inside the region. It cannot
// overflow: length is compared before it is added.
func (r *Region) offset(addr, length uint64) (uint64, bool) {
	if addr < r.base {
		return 0, false
	}
	off := addr - r.base
	if length > r.length || off > r.length-length {
		return 0, false
	}
	return off, true
}

// releaseMemory runs when the last reference to a deregistered region's
// memory is dropped.
func (r *Region) releaseMemory() {
	r.t.drainMu.Lock()
	delete(r.t.draining, r)
	r.t.drainMu.Unlock()
	if r.pinner != nil {
		r.pinner.Unpin()
	}
	for _, a := range r.arenas {
		if a != nil {
			a.mem.unref()
		}
	}
}

// RegionInfo describes a region for listings (the softnic mr command).
type RegionInfo struct {
	LKey, RKey uint32
	PD         PDHandle
	Access     Access
	Addr, Len  uint64
	Kind       MemoryKind
	Segments   int
	PKey       uint16 // 0: reachable from any partition
	Windows    int    // windows bound to it
	Disabled   bool   // fi_mr region not enabled yet
	ODP        ODPStats
}

// Info returns a description of the region. It takes no lock.
func (r *Region) Info() RegionInfo {
	return RegionInfo{
		LKey: r.key, RKey: r.key,
		PD: r.pd(), Access: r.access(),
		Addr: r.base, Len: r.length,
		Kind: r.kind, Segments: len(r.mem.segs),
		PKey: r.pkey, Windows: int(r.windows.Load()),
		Disabled: r.flags.Load()&regionDisabled != 0,
		ODP:      r.odp.stats(),
	}
}

// implicitLen is the length of an implicit ODP region, SIZE_MAX.
const implicitLen = math.MaxUint64
