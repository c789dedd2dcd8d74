package mr

import (
	"fmt"
	"iter"
	"sync/atomic"

	"github.com/softnic/softnic/mr/keyspace"
)

// WindowType is the memory window type of ibv_alloc_mw.
type WindowType uint8

// Memory window types. softnic's type 2 windows are type 2B (associated with
// the QP that binds them), as rxe implements them.
const (
	WindowType1 WindowType = 1 // IBV_MW_TYPE_1: bound with ibv_bind_mw, invalidated by rebinding
	WindowType2 WindowType = 2 // IBV_MW_TYPE_2: bound by a BIND_MW work request, invalidated by LOCAL_INV or SEND_WITH_INV
)

// Window is a memory window (struct ibv_mw): a remotely accessible range
// of a region with its own rkey and access, bound and unbound without
// re-registering the region.
type Window struct {
	t     *Table
	typ   WindowType
	pd    PDHandle
	index uint32 // index in t.windows
	key   atomic.Uint32
	bind  atomic.Pointer[windowBinding] // nil while unbound
	dead  bool                          // guarded by t.mu
}

// windowBinding is one binding of a window; it is replaced, never changed,
// so a reader holds a consistent view of it. key is the rkey valid for this
// binding.
type windowBinding struct {
	key    uint32
	mr     *Region
	base   uint64 // remote address of the window's first byte: 0 if zero-based
	mrAddr uint64 // the region address the window starts at
	length uint64
	access Access
	qpn    uint32 // type 2: the QP the window is bound to
}

// AllocWindow allocates a memory window of pd (ibv_alloc_mw). A type 1
// window starts valid but unbound; a type 2 window starts free.
func (t *Table) AllocWindow(pd PDHandle, typ WindowType) (*Window, error) {
	if typ != WindowType1 && typ != WindowType2 {
		return nil, fmt.Errorf("window type %d: %w", typ, ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableLocked(pd); err != nil {
		return nil, err
	}
	i, ok := t.windows.Alloc()
	if !ok {
		return nil, fmt.Errorf("%d windows: %w", t.windows.Live(), ErrNoMem)
	}
	w := &Window{t: t, typ: typ, pd: pd, index: i}
	w.key.Store(t.windows.KeyAt(i))
	t.windows.Install(i, w.key.Load(), w)
	t.pds[pd].windows++
	return w, nil
}

// RKey returns the window's current rkey; it changes with every bind.
func (w *Window) RKey() uint32 { return w.key.Load() }

// Type returns the window's type.
func (w *Window) Type() WindowType { return w.typ }

// PD returns the window's protection domain.
func (w *Window) PD() PDHandle { return w.pd }

// DeallocWindow frees w (ibv_dealloc_mw); a binding it has is dropped.
func (t *Table) DeallocWindow(w *Window) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.t != t || w.dead {
		return fmt.Errorf("window not allocated: %w", ErrInvalid)
	}
	t.deallocWindowLocked(w)
	return nil
}

func (t *Table) deallocWindowLocked(w *Window) {
	t.unbindLocked(w)
	t.windows.Remove(w.index, w)
	w.dead = true
	t.pds[w.pd].windows--
}

// unbindLocked drops w's binding, if any.
func (t *Table) unbindLocked(w *Window) {
	if b := w.bind.Swap(nil); b != nil {
		b.mr.windows.Add(-1)
	}
}

// BindRequest is a memory window bind: the BIND_MW work request
// (ibv_send_wr.bind_mw) a QP executes, which ibv_bind_mw also posts for a
// type 1 window.
type BindRequest struct {
	// WindowKey is the window's current rkey (bind_mw.mw->rkey).
	WindowKey uint32
	// NewKey is the rkey after the bind; only its 8-bit variant is used, the
	// index stays the window's (rxe_do_bind_mw). ibv_bind_mw passes
	// keyspace.IncRKey(WindowKey).
	NewKey uint32
	// RegionKey is the lkey of the region to bind to (bind_info.mr); unused
	// when Length is 0.
	RegionKey uint32
	// Addr and Length are the window's range in the region's address space;
	// a type 1 window with Length 0 is unbound.
	Addr, Length uint64
	// Access is the window's access: RemoteRead, RemoteWrite, RemoteAtomic
	// and ZeroBased (type 2 only).
	Access Access
}

// BindWindow executes a bind on behalf of who, the QP that posts it. The
// checks are rxe's (rxe_check_bind_mw), with the IBTA rule numbers it cites:
//
//   - the window key must be the window's current key;
//   - type 1: ZeroBased is refused (o10-36.2.2);
//   - type 2: the window must be free (o10-37.2.30), Length must not be 0
//     (o10-37.2.40);
//   - the QP, the window and the region share one PD (C10-72);
//   - the region must not be zero-based (rxe), must grant MW_BIND (C10-73)
//     and, for a window with REMOTE_WRITE or REMOTE_ATOMIC, LOCAL_WRITE
//     (C10-74);
//   - the window's range lies inside the region (C10-75).
//
// Failures return ErrInvalid; the work request completes with MW_BIND_ERR.
// On success the window's rkey is the window index with NewKey's variant,
// and a type 2 window is tied to who.QPN.
func (t *Table) BindWindow(req *BindRequest, who Requester) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, err := t.windowLocked(req.WindowKey)
	if err != nil {
		return err
	}
	switch {
	case req.Access&^windowAccess != 0:
		return fmt.Errorf("window access %v: %w", req.Access, ErrInvalid)
	case w.typ == WindowType1 && req.Access&ZeroBased != 0:
		return fmt.Errorf("zero-based type 1 window (o10-36.2.2): %w", ErrInvalid)
	case w.typ == WindowType2 && w.bind.Load() != nil:
		return fmt.Errorf("type 2 window not free (o10-37.2.30): %w", ErrInvalid)
	case w.typ == WindowType2 && req.Length == 0:
		return fmt.Errorf("type 2 window bound with zero length (o10-37.2.40): %w", ErrInvalid)
	case w.pd != who.PD:
		return fmt.Errorf("window PD %d, QP PD %d (C10-72): %w", w.pd, who.PD, ErrInvalid)
	}
	var b *windowBinding
	if req.Length != 0 {
		if b, err = t.checkBindRegionLocked(req, who); err != nil {
			return err
		}
		b.key = t.windows.KeyFor(w.index, uint8(req.NewKey))
		if w.typ == WindowType2 {
			b.qpn = who.QPN
		}
		b.mr.windows.Add(1)
	}
	t.unbindLocked(w)
	w.bind.Store(b)
	w.key.Store(t.windows.Rekey(w.index, req.NewKey))
	return nil
}

// checkBindRegionLocked checks the region side of a bind and returns the
// binding it makes.
func (t *Table) checkBindRegionLocked(req *BindRequest, who Requester) (*windowBinding, error) {
	mr, why := t.region(req.RegionKey)
	if why != 0 {
		return nil, fmt.Errorf("bind to region %#x: %v: %w", req.RegionKey, why, ErrInvalid)
	}
	acc := mr.access()
	switch {
	case !mr.live():
		return nil, fmt.Errorf("bind to a deregistered region: %w", ErrInvalid)
	case mr.pd() != who.PD:
		return nil, fmt.Errorf("region PD %d, QP PD %d (C10-72): %w", mr.pd(), who.PD, ErrInvalid)
	case mr.implicit:
		return nil, fmt.Errorf("bind to an implicit ODP region, which has no memory of its own: %w", ErrInvalid)
	case acc&ZeroBased != 0:
		return nil, fmt.Errorf("bind to a zero-based region: %w", ErrInvalid)
	case acc&MWBind == 0:
		return nil, fmt.Errorf("region without MW_BIND (C10-73): %w", ErrInvalid)
	case req.Access&(RemoteWrite|RemoteAtomic) != 0 && acc&LocalWrite == 0:
		return nil, fmt.Errorf("writable window on a region without LOCAL_WRITE (C10-74): %w", ErrInvalid)
	}
	if _, ok := mr.offset(req.Addr, req.Length); !ok {
		return nil, fmt.Errorf("window [%#x, +%d) outside the region (C10-75): %w", req.Addr, req.Length, ErrInvalid)
	}
	b := &windowBinding{mr: mr, base: req.Addr, mrAddr: req.Addr, length: req.Length, access: req.Access}
	if req.Access&ZeroBased != 0 {
		b.base = 0
	}
	return b, nil
}

// windowLocked returns the window whose current key is key.
func (t *Table) windowLocked(key uint32) (*Window, error) {
	w, why := lookup(&t.windows, key)
	if why != 0 {
		return nil, fmt.Errorf("window key %#x: %v: %w", key, why, ErrInvalid)
	}
	return w, nil
}

// Invalidate executes LOCAL_INV on who's send queue, or a received
// SEND_WITH_INVALIDATE addressed to who, for rkey. Only a bound type 2
// window can be invalidated: rxe refuses type 1 windows (o10-37.2.26) and
// regions registered by ibv_reg_mr (rxe_invalidate_mr accepts only
// fast-registration MRs, which softnic does not have). A type 2B window is
// invalidated only through the QP it is bound to. Failures return
// ErrInvalid. Afterwards the window is free and rkey no longer works.
func (t *Table) Invalidate(rkey uint32, who Requester) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !keyspace.IsWindow(rkey) {
		return fmt.Errorf("invalidate region key %#x: %w", rkey, ErrInvalid)
	}
	w, err := t.windowLocked(rkey)
	if err != nil {
		return err
	}
	b := w.bind.Load()
	switch {
	case w.typ == WindowType1:
		return fmt.Errorf("invalidate a type 1 window (o10-37.2.26): %w", ErrInvalid)
	case b == nil:
		return fmt.Errorf("invalidate a free window: %w", ErrInvalid)
	case w.pd != who.PD:
		return fmt.Errorf("window PD %d, QP PD %d: %w", w.pd, who.PD, ErrInvalid)
	case b.qpn != who.QPN:
		return fmt.Errorf("window bound to QP %#x, not %#x: %w", b.qpn, who.QPN, ErrInvalid)
	}
	t.unbindLocked(w)
	return nil
}

// WindowInfo describes a window for listings.
type WindowInfo struct {
	RKey      uint32
	Type      WindowType
	PD        PDHandle
	Bound     bool
	RegionKey uint32 // the region it is bound to
	Addr, Len uint64 // its remote range
	Access    Access
	QPN       uint32 // type 2: the QP it is bound to
}

// Windows iterates over the allocated windows without blocking the data path
// or registration.
func (t *Table) Windows() iter.Seq[WindowInfo] {
	return func(yield func(WindowInfo) bool) {
		t.windows.Each(func(w *Window) bool {
			wi := WindowInfo{RKey: w.key.Load(), Type: w.typ, PD: w.pd}
			if b := w.bind.Load(); b != nil {
				wi.Bound, wi.RegionKey, wi.Addr, wi.Len, wi.Access, wi.QPN = true, b.mr.key, b.base, b.length, b.access, b.qpn
			}
			return yield(wi)
		})
	}
}
