package mr

import (
	"testing"

	"github.com/softnic/softnic/mr/keyspace"
)

type windowFixture struct {
	tb                                *Table
	pd, pd2                           PDHandle
	mr, noBind, noLocalWrite, zb, mr2 *Region
	implicit                          *Region
	buf                               []byte
}

func newWindowFixture(t *testing.T) *windowFixture {
	f := &windowFixture{tb: newTable(t)}
	f.pd, f.pd2 = allocPD(t, f.tb), allocPD(t, f.tb)
	f.buf = aligned(4096)
	for i := range f.buf {
		f.buf[i] = byte(i)
	}
	f.mr = register(t, f.tb, f.pd, f.buf, rw|MWBind)
	f.noBind = register(t, f.tb, f.pd, make([]byte, 4096), rw)
	f.noLocalWrite = register(t, f.tb, f.pd, make([]byte, 4096), RemoteRead|MWBind)
	f.zb = register(t, f.tb, f.pd, make([]byte, 4096), rw|MWBind|ZeroBased)
	f.mr2 = register(t, f.tb, f.pd2, make([]byte, 4096), rw|MWBind)
	var err error
	f.implicit, err = f.tb.RegisterImplicit(f.pd, OnDemand|rw|MWBind)
	wantErr(t, "RegisterImplicit", err, nil)
	return f
}

func (f *windowFixture) window(t *testing.T, typ WindowType) *Window {
	w, err := f.tb.AllocWindow(f.pd, typ)
	wantErr(t, "AllocWindow", err, nil)
	return w
}

// TestBindWindowRules checks each rule of rxe_check_bind_mw, named after
// the IBTA rule it cites.
func TestBindWindowRules(t *testing.T) {
	f := newWindowFixture(t)
	qp := Requester{PD: f.pd, QPN: 5}
	base := f.mr.Addr()
	tests := []struct {
		name     string
		typ      WindowType
		prebound bool
		req      func(w *Window) BindRequest
		who      Requester
		want     error
	}{
		{"type 1 bind", WindowType1, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base, Length: 100, Access: RemoteRead}
		}, qp, nil},
		{"type 1 rebind while bound", WindowType1, true, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base + 8, Length: 8, Access: RemoteWrite}
		}, qp, nil},
		{"type 1 with length 0 unbinds", WindowType1, true, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey())}
		}, qp, nil},
		{"type 2 bind", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey() + 7, RegionKey: f.mr.LKey(), Addr: base, Length: 4096, Access: RemoteRead | RemoteWrite | RemoteAtomic}
		}, qp, nil},
		{"type 2 zero-based", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base + 64, Length: 64, Access: RemoteRead | ZeroBased}
		}, qp, nil},
		{"C10-74 allows a read-only window on a region without LOCAL_WRITE", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.noLocalWrite.LKey(), Addr: f.noLocalWrite.Addr(), Length: 8, Access: RemoteRead}
		}, qp, nil},

		{"o10-36.2.2: a type 1 window is never zero-based", WindowType1, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead | ZeroBased}
		}, qp, ErrInvalid},
		{"o10-37.2.30: a type 2 window must be free", WindowType2, true, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"o10-37.2.40: a type 2 bind has a length", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base}
		}, qp, ErrInvalid},
		{"C10-72: the QP's PD is the window's", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
		}, Requester{PD: f.pd2, QPN: 5}, ErrInvalid},
		{"C10-72: the region's PD is the QP's", WindowType1, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr2.LKey(), Addr: f.mr2.Addr(), Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"C10-73: the region grants MW_BIND", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.noBind.LKey(), Addr: f.noBind.Addr(), Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"C10-74: a writable window needs LOCAL_WRITE on the region", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.noLocalWrite.LKey(), Addr: f.noLocalWrite.Addr(), Length: 8, Access: RemoteWrite}
		}, qp, ErrInvalid},
		{"C10-74: an atomic window needs LOCAL_WRITE on the region", WindowType1, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.noLocalWrite.LKey(), Addr: f.noLocalWrite.Addr(), Length: 8, Access: RemoteAtomic}
		}, qp, ErrInvalid},
		{"C10-75: the window ends inside the region", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base + 4000, Length: 97, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"C10-75: the window starts inside the region", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base - 1, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"C10-75: a zero-based window lies inside the region too", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base + 4000, Length: 200, Access: RemoteRead | ZeroBased}
		}, qp, ErrInvalid},
		{"C10-75: addr+length wraps", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base + 8, Length: 1<<64 - 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"rxe: no window on a zero-based region", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.zb.LKey(), Addr: 0, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"no window on an implicit ODP region", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.implicit.LKey(), Addr: base, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"window access is remote access only", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead | LocalWrite}
		}, qp, ErrInvalid},
		{"the window key must be the current one", WindowType2, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: keyspace.IncRKey(w.RKey()), NewKey: w.RKey(), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
		{"the region key must name a region", WindowType1, false, func(w *Window) BindRequest {
			return BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: keyspace.IncRKey(f.mr.LKey()), Addr: base, Length: 8, Access: RemoteRead}
		}, qp, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := f.window(t, tc.typ)
			defer f.tb.DeallocWindow(w)
			if tc.prebound {
				wantErr(t, "first bind", f.tb.BindWindow(&BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: base, Length: 8, Access: RemoteRead}, qp), nil)
			}
			before := w.RKey()
			req := tc.req(w)
			err := f.tb.BindWindow(&req, tc.who)
			wantErr(t, "BindWindow", err, tc.want)
			if err != nil {
				if w.RKey() != before {
					t.Errorf("failed bind changed the key %#x to %#x", before, w.RKey())
				}
				return
			}
			// The new rkey keeps the window's index and takes NewKey's
			// variant (rxe_do_bind_mw).
			if want := before&^0xff | req.NewKey&0xff; w.RKey() != want {
				t.Errorf("rkey %#x, want %#x", w.RKey(), want)
			}
			var info WindowInfo
			for wi := range f.tb.Windows() {
				if wi.RKey == w.RKey() {
					info = wi
				}
			}
			bound := req.Length != 0
			if info.Bound != bound || (bound && (info.Len != req.Length || info.Access != req.Access || info.RegionKey != req.RegionKey)) {
				t.Errorf("window %+v after bind %+v", info, req)
			}
			if wantQPN := map[WindowType]uint32{WindowType1: 0, WindowType2: 5}[tc.typ]; bound && info.QPN != wantQPN {
				t.Errorf("window bound to QP %d, want %d", info.QPN, wantQPN)
			}
		})
	}
}

// TestWindowAccess checks remote access through windows, as rxe_lookup_mw
// and the window's range decide it.
func TestWindowAccess(t *testing.T) {
	f := newWindowFixture(t)
	qp5 := Requester{PD: f.pd, QPN: 5}
	w2 := f.window(t, WindowType2)
	wantErr(t, "bind type 2", f.tb.BindWindow(&BindRequest{WindowKey: w2.RKey(), NewKey: keyspace.IncRKey(w2.RKey()), RegionKey: f.mr.LKey(), Addr: f.mr.Addr() + 100, Length: 200, Access: RemoteRead | RemoteWrite}, qp5), nil)
	zb := f.window(t, WindowType2)
	wantErr(t, "bind zero-based", f.tb.BindWindow(&BindRequest{WindowKey: zb.RKey(), NewKey: zb.RKey(), RegionKey: f.mr.LKey(), Addr: f.mr.Addr() + 1000, Length: 16, Access: RemoteRead | ZeroBased}, qp5), nil)
	w1 := f.window(t, WindowType1)
	wantErr(t, "bind type 1", f.tb.BindWindow(&BindRequest{WindowKey: w1.RKey(), NewKey: keyspace.IncRKey(w1.RKey()), RegionKey: f.mr.LKey(), Addr: f.mr.Addr(), Length: 64, Access: RemoteAtomic}, qp5), nil)
	if n := f.mr.Info().Windows; n != 3 {
		t.Errorf("region has %d windows bound, want 3", n)
	}
	va := f.mr.Addr() + 100
	tests := []struct {
		name    string
		key     uint32
		addr, n uint64
		need    Access
		who     Requester
		want    Reason
		at      uint64 // offset in the region where the span starts
	}{
		{"read at the window's start", w2.RKey(), va, 8, RemoteRead, qp5, 0, 100},
		{"write at the window's end", w2.RKey(), va + 192, 8, RemoteWrite, qp5, 0, 292},
		{"type 2B: only the QP it is bound to", w2.RKey(), va, 8, RemoteRead, Requester{PD: f.pd, QPN: 6}, ReasonWindowQP, 0},
		{"window of another PD", w2.RKey(), va, 8, RemoteRead, Requester{PD: f.pd2, QPN: 5}, ReasonWrongPD, 0},
		{"before the window, inside the region", w2.RKey(), va - 1, 8, RemoteRead, qp5, ReasonRange, 0},
		{"past the window, inside the region", w2.RKey(), va + 193, 8, RemoteRead, qp5, ReasonRange, 0},
		{"access the window does not grant", w2.RKey(), va, 8, RemoteAtomic, qp5, ReasonAccess, 0},
		{"zero-based window: offset 0 is the bound address", zb.RKey(), 0, 16, RemoteRead, qp5, 0, 1000},
		{"zero-based window: offset past its length", zb.RKey(), 8, 9, RemoteRead, qp5, ReasonRange, 0},
		{"type 1 window: any QP of the PD", w1.RKey(), f.mr.Addr() + 8, 8, RemoteAtomic, Requester{PD: f.pd, QPN: 77}, 0, 8},
		{"a stale window key", keyspace.IncRKey(w2.RKey()), va, 8, RemoteRead, qp5, ReasonStaleKey, 0},
	}
	for _, tc := range tests {
		s, err := f.tb.Remote(tc.key, tc.addr, tc.n, tc.need, tc.who)
		wantReason(t, tc.name, err, tc.want)
		if tc.want == 0 {
			got := make([]byte, 1)
			if s.ReadAt(got, 0); got[0] != f.buf[tc.at] {
				t.Errorf("%s: first byte %d, want the region's byte %d", tc.name, got[0], tc.at)
			}
		}
		s.Release()
	}

	// "ibv_dereg_mr() fails if any memory window is still bound to this MR."
	wantErr(t, "Deregister with windows bound", f.tb.Deregister(f.mr), ErrBusy)
	old := w1.RKey()
	wantErr(t, "unbind type 1", f.tb.BindWindow(&BindRequest{WindowKey: w1.RKey(), NewKey: keyspace.IncRKey(w1.RKey())}, qp5), nil)
	_, err := f.tb.Remote(old, f.mr.Addr(), 8, RemoteRead, qp5)
	wantReason(t, "old type 1 key after the unbind", err, ReasonStaleKey)
	_, err = f.tb.Remote(w1.RKey(), f.mr.Addr(), 8, RemoteRead, qp5)
	wantReason(t, "unbound type 1 window", err, ReasonStaleKey)
	wantErr(t, "invalidate", f.tb.Invalidate(w2.RKey(), qp5), nil)
	wantErr(t, "dealloc a bound window", f.tb.DeallocWindow(zb), nil)
	if n := f.mr.Info().Windows; n != 0 {
		t.Errorf("region has %d windows bound, want none", n)
	}
	wantErr(t, "Deregister once the windows are gone", f.tb.Deregister(f.mr), nil)
}

// TestInvalidate checks LOCAL_INV and SEND_WITH_INVALIDATE, as
// rxe_invalidate_mw decides them.
func TestInvalidate(t *testing.T) {
	f := newWindowFixture(t)
	qp5 := Requester{PD: f.pd, QPN: 5}
	bind := func(w *Window) {
		t.Helper()
		wantErr(t, "bind", f.tb.BindWindow(&BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: f.mr.LKey(), Addr: f.mr.Addr(), Length: 8, Access: RemoteRead}, qp5), nil)
	}
	w2 := f.window(t, WindowType2)
	bind(w2)
	w1 := f.window(t, WindowType1)
	bind(w1)
	free2 := f.window(t, WindowType2)
	tests := []struct {
		name string
		key  uint32
		who  Requester
		want error
	}{
		{"o10-37.2.26: a type 1 window cannot be invalidated", w1.RKey(), qp5, ErrInvalid},
		{"a region registered by ibv_reg_mr cannot be invalidated", f.mr.RKey(), qp5, ErrInvalid},
		{"a free window", free2.RKey(), qp5, ErrInvalid},
		{"a stale key", keyspace.IncRKey(w2.RKey()), qp5, ErrInvalid},
		{"an unknown key", 0xfff0_0000, qp5, ErrInvalid},
		{"type 2B: another QP", w2.RKey(), Requester{PD: f.pd, QPN: 6}, ErrInvalid},
		{"another PD", w2.RKey(), Requester{PD: f.pd2, QPN: 5}, ErrInvalid},
		{"the bound QP invalidates", w2.RKey(), qp5, nil},
		{"an invalidated window is free", w2.RKey(), qp5, ErrInvalid},
	}
	for _, tc := range tests {
		wantErr(t, tc.name, f.tb.Invalidate(tc.key, tc.who), tc.want)
	}
	_, err := f.tb.Remote(w2.RKey(), f.mr.Addr(), 8, RemoteRead, qp5)
	wantReason(t, "access after invalidation", err, ReasonStaleKey)
	// A free type 2 window binds again (o10-37.2.30).
	bind(w2)
	s, err := f.tb.Remote(w2.RKey(), f.mr.Addr(), 8, RemoteRead, qp5)
	wantReason(t, "access after rebinding", err, 0)
	s.Release()
}

func TestWindowAllocation(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	_, err := tb.AllocWindow(pd, 3)
	wantErr(t, "window type 3", err, ErrInvalid)
	_, err = tb.AllocWindow(pd+9, WindowType1)
	wantErr(t, "unknown PD", err, ErrInvalid)
	w, err := tb.AllocWindow(pd, WindowType2)
	wantErr(t, "AllocWindow", err, nil)
	if w.Type() != WindowType2 || w.PD() != pd {
		t.Errorf("window type %d PD %d", w.Type(), w.PD())
	}
	wantErr(t, "DeallocWindow", tb.DeallocWindow(w), nil)
	wantErr(t, "DeallocWindow twice", tb.DeallocWindow(w), ErrInvalid)
	_, err = tb.Remote(w.RKey(), 0, 8, RemoteRead, Requester{PD: pd})
	wantReason(t, "deallocated window", err, ReasonUnknownKey)
}
