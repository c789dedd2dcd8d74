package mr

import (
	"errors"
	"testing"
)

// TestRereg checks ibv_rereg_mr as rxe implements it (rxe_rereg_user_mr):
// PD and access change in place and the keys stay valid.
func TestRereg(t *testing.T) {
	tb := newTable(t)
	pd, pd2 := allocPD(t, tb), allocPD(t, tb)
	tests := []struct {
		name     string
		access   Access // at registration
		flags    ReregFlags
		pd       PDHandle
		newAcc   Access
		windowed bool
		want     error
	}{
		{"IBV_REREG_MR_CHANGE_PD", rw, ReregPD, pd2, 0, false, nil},
		{"IBV_REREG_MR_CHANGE_ACCESS: drop remote write", rw, ReregAccess, 0, LocalWrite | RemoteRead, false, nil},
		{"IBV_REREG_MR_CHANGE_ACCESS: add remote atomic", LocalWrite, ReregAccess, 0, LocalWrite | RemoteAtomic, false, nil},
		{"PD and access at once", RemoteRead, ReregPD | ReregAccess, pd2, rw, false, nil},
		{"flags 0 is EINVAL (ib_uverbs_rereg_mr)", rw, 0, pd2, 0, false, ErrInvalid},
		{"IBV_REREG_MR_CHANGE_TRANSLATION is EOPNOTSUPP in rxe", rw, ReregTranslation, 0, 0, false, ErrNotSupported},
		{"unknown flags are EOPNOTSUPP", rw, ReregAccess | 1<<3, 0, rw, false, ErrNotSupported},
		{"new access without LOCAL_WRITE for REMOTE_WRITE", rw, ReregAccess, 0, RemoteWrite, false, ErrInvalid},
		{"unknown access bits", rw, ReregAccess, 0, rw | 1<<8, false, ErrInvalid},
		{"flipping ZERO_BASED changes the translation", rw, ReregAccess, 0, rw | ZeroBased, false, ErrNotSupported},
		{"flipping ON_DEMAND changes the translation", rw, ReregAccess, 0, rw | OnDemand, false, ErrNotSupported},
		{"unknown PD", rw, ReregPD, 99, 0, false, ErrInvalid},
		{"a window is bound: it stays, with its rights", rw | MWBind, ReregAccess, 0, LocalWrite, true, nil},
		{"a window is bound: moved to pd2, the window stays in pd", rw | MWBind, ReregPD, pd2, 0, true, nil},
	}
	who := func(p PDHandle) Requester { return Requester{PD: p, QPN: 1} }
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			buf := aligned(64)
			r := register(t, tb, pd, buf, tc.access)
			defer tb.Deregister(r)
			var w *Window
			if tc.windowed {
				var err error
				w, err = tb.AllocWindow(pd, WindowType1)
				wantErr(t, "AllocWindow", err, nil)
				defer tb.DeallocWindow(w)
				wantErr(t, "bind", tb.BindWindow(&BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: r.LKey(), Addr: r.Addr(), Length: 8, Access: RemoteRead}, who(pd)), nil)
			}
			key := r.RKey()
			err := tb.Rereg(r, tc.flags, tc.pd, tc.newAcc)
			wantErr(t, "Rereg", err, tc.want)
			if w != nil {
				// As rxe_lookup_mw, the window's PD and rights decide.
				s, err := tb.Remote(w.RKey(), r.Addr(), 8, RemoteRead, who(pd))
				wantReason(t, "READ through the window", err, 0)
				s.Release()
				_, err = tb.Remote(w.RKey(), r.Addr(), 8, RemoteWrite, who(pd))
				wantReason(t, "WRITE through the window", err, ReasonAccess)
				_, err = tb.Remote(w.RKey(), r.Addr(), 8, RemoteRead, who(pd2))
				wantReason(t, "READ through the window from another PD", err, ReasonWrongPD)
			}
			wantPD, wantAcc := pd, tc.access
			if err == nil && tc.flags&ReregPD != 0 {
				wantPD = tc.pd
			}
			if err == nil && tc.flags&ReregAccess != 0 {
				wantAcc = tc.newAcc
			}
			if r.PD() != wantPD || r.Access() != wantAcc {
				t.Fatalf("after Rereg: PD %d access %v, want PD %d access %v", r.PD(), r.Access(), wantPD, wantAcc)
			}
			// rxe keeps the MR object, so lkey and rkey stay the same.
			if r.RKey() != key || r.LKey() != key {
				t.Fatalf("keys changed from %#x to %#x/%#x", key, r.LKey(), r.RKey())
			}
			// The old key now checks against the new PD and access.
			for _, need := range []Access{RemoteRead, RemoteWrite, RemoteAtomic} {
				want := Reason(0)
				if wantAcc&need == 0 {
					want = ReasonAccess
				}
				s, err := tb.Remote(key, r.Addr(), 8, need, who(wantPD))
				wantReason(t, need.String()+" with the kept key", err, want)
				s.Release()
			}
			if wantPD != pd {
				_, err := tb.Remote(key, r.Addr(), 8, RemoteRead, who(pd))
				wantReason(t, "the old PD", err, ReasonWrongPD)
				if _, ok := tb.RegionAt(pd, r.Addr(), 8); ok {
					t.Error("RegionAt finds the region in its old PD")
				}
			}
			if got, ok := tb.RegionAt(wantPD, r.Addr(), 8); !ok || got != r {
				t.Error("RegionAt does not find the region in its PD")
			}
		})
	}
	// PD accounting follows the region.
	wantErr(t, "DeallocPD of an emptied PD", tb.DeallocPD(pd2), nil)
}

func TestReregDeregistered(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	r := register(t, tb, pd, make([]byte, 8), rw)
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	wantErr(t, "Rereg of a deregistered region", tb.Rereg(r, ReregAccess, 0, LocalWrite), ErrInvalid)
}

// TestReregConcurrent re-registers a region back and forth between
// (pd1, REMOTE_READ) and (pd2, REMOTE_READ|REMOTE_WRITE) while readers
// check it from both PDs; run it with -race. PD and access change
// together, so no check may ever see pd1 with REMOTE_WRITE (a torn
// state), and every refusal is for the PD or the access.
func TestReregConcurrent(t *testing.T) {
	tb := newTable(t)
	pd1, pd2 := allocPD(t, tb), allocPD(t, tb)
	r := register(t, tb, pd1, aligned(64), RemoteRead)
	defer tb.Deregister(r)
	key := r.RKey()
	iterations := 5000
	if testing.Short() {
		iterations = 500
	}
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(done)
		for range iterations {
			for _, to := range []struct {
				pd  PDHandle
				acc Access
			}{{pd2, rw}, {pd1, RemoteRead}} {
				if err := tb.Rereg(r, ReregPD|ReregAccess, to.pd, to.acc); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	var writes1, refusals int
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		for _, pd := range []PDHandle{pd1, pd2} {
			s, err := tb.Remote(key, r.Addr(), 8, RemoteWrite, Requester{PD: pd, QPN: 1})
			s.Release()
			switch {
			case err == nil && pd == pd1:
				writes1++
			case err != nil:
				refusals++
				if !errors.Is(err, ReasonWrongPD) && !errors.Is(err, ReasonAccess) {
					t.Fatalf("REMOTE_WRITE from PD %d refused for %v", pd, err)
				}
			}
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("Rereg: %v", err)
	default:
	}
	if writes1 != 0 {
		t.Fatalf("%d REMOTE_WRITEs from pd1 passed: PD and access were seen torn", writes1)
	}
	if refusals == 0 {
		t.Fatal("no check was refused: the readers never ran against the changes")
	}
	// The last change left (pd1, REMOTE_READ).
	s, err := tb.Remote(key, r.Addr(), 8, RemoteRead, Requester{PD: pd1, QPN: 1})
	wantReason(t, "REMOTE_READ from pd1 at the end", err, 0)
	s.Release()
}

// TestMoveArena moves a region's arena along with the region, so that the
// old PD can be deallocated, as rxe's re-registration lets it.
func TestMoveArena(t *testing.T) {
	tb := newTable(t)
	pd1, pd2 := allocPD(t, tb), allocPD(t, tb)
	a, err := tb.NewArena(pd1, PageSize)
	wantErr(t, "NewArena", err, nil)
	r := register(t, tb, pd1, a.Bytes(), rw)
	wantErr(t, "Rereg", tb.Rereg(r, ReregPD, pd2, 0), nil)
	wantErr(t, "DeallocPD of the arena's PD", tb.DeallocPD(pd1), ErrBusy)
	wantErr(t, "MoveArena to an unknown PD", tb.MoveArena(a, 99), ErrInvalid)
	wantErr(t, "MoveArena", tb.MoveArena(a, pd2), nil)
	if a.PD() != pd2 {
		t.Fatalf("arena PD %d, want %d", a.PD(), pd2)
	}
	wantErr(t, "DeallocPD of the emptied PD", tb.DeallocPD(pd1), nil)
	wantErr(t, "DeallocPD of the new PD", tb.DeallocPD(pd2), ErrBusy)
	// With the region gone, implicit regions of the new PD still resolve
	// inside the arena, and those of another PD do not.
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	pd3 := allocPD(t, tb)
	for _, tc := range []struct {
		pd   PDHandle
		want Reason
	}{{pd2, 0}, {pd3, ReasonNotMapped}} {
		imp, err := tb.RegisterImplicit(tc.pd, OnDemand|LocalWrite|RemoteRead)
		wantErr(t, "RegisterImplicit", err, nil)
		s, err := tb.Remote(imp.RKey(), a.Addr(), 8, RemoteRead, Requester{PD: tc.pd, QPN: 1})
		wantReason(t, "implicit READ inside the moved arena", err, tc.want)
		s.Release()
		wantErr(t, "Deregister implicit", tb.Deregister(imp), nil)
	}
	wantErr(t, "FreeArena", tb.FreeArena(a), nil)
	wantErr(t, "MoveArena of a freed arena", tb.MoveArena(a, pd2), ErrInvalid)
	wantErr(t, "DeallocPD at the end", tb.DeallocPD(pd2), nil)
}
