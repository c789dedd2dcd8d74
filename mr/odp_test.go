package mr

import (
	"testing"
	"unsafe"
)

// pageAligned returns n bytes starting on a page boundary, so page counts
// are exact.
func pageAligned(n int) []byte {
	b := make([]byte, n+PageSize)
	off := (PageSize - int(uintptr(unsafe.Pointer(&b[0]))%PageSize)) % PageSize
	return b[off : off+n : off+n]
}

// TestODPFaults: "IBV_ACCESS_ON_DEMAND: Create an on-demand paging MR" –
// pages are not resident at registration; the first access to a page
// faults it in, later ones find it resident.
func TestODPFaults(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd}
	r := register(t, tb, pd, pageAligned(8*PageSize), rw|OnDemand)
	if got := r.ODP(); got != (ODPStats{}) {
		t.Fatalf("at registration %+v, want nothing resident", got)
	}
	steps := []struct {
		name string
		off  uint64
		n    uint64
		need Access
		want ODPStats
	}{
		{"a check alone touches nothing", 0, 1, 0, ODPStats{}},
		{"first read of page 0 faults", 0, 1, RemoteRead, ODPStats{Faults: 1, ResidentPages: 1}},
		{"second read of page 0 does not", 100, 50, RemoteRead, ODPStats{Faults: 1, ResidentPages: 1}},
		{"write over pages 1..3 faults three", PageSize, 3 * PageSize, RemoteWrite, ODPStats{Faults: 4, ResidentPages: 4}},
		{"write from page 3 into 4 faults one", 4*PageSize - 2, 4, RemoteWrite, ODPStats{Faults: 5, ResidentPages: 5}},
		{"atomic on page 7 faults it", 7*PageSize + 8, 8, RemoteAtomic, ODPStats{Faults: 6, ResidentPages: 6}},
	}
	for _, st := range steps {
		need := st.need
		if need == 0 {
			need = RemoteRead
		}
		s, err := tb.Remote(r.RKey(), r.Addr()+st.off, st.n, need, who)
		wantReason(t, st.name, err, 0)
		switch st.need {
		case RemoteRead:
			s.ReadAt(make([]byte, st.n), 0)
		case RemoteWrite:
			s.WriteAt(make([]byte, st.n), 0)
		case RemoteAtomic:
			s.FetchAdd(1)
		}
		s.Release()
		if got := r.ODP(); got != st.want {
			t.Errorf("%s: %+v, want %+v", st.name, got, st.want)
		}
	}
}

// TestPrefetch: like ibv_advise_mr(3) PREFETCH, pages become resident
// ahead of use without a fault.
func TestPrefetch(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	r := register(t, tb, pd, pageAligned(4*PageSize), rw|OnDemand|ZeroBased)
	plain := register(t, tb, pd, make([]byte, PageSize), rw)
	readOnly := register(t, tb, pd, pageAligned(PageSize), RemoteRead|OnDemand)
	tests := []struct {
		name      string
		r         *Region
		addr, n   uint64
		want      error
		wantStats ODPStats
	}{
		{"prefetch pages 1 and 2", r, PageSize + 10, PageSize, nil, ODPStats{Prefetched: 2, ResidentPages: 2}},
		{"prefetch resident pages again: nothing new", r, PageSize, 2 * PageSize, nil, ODPStats{Prefetched: 2, ResidentPages: 2}},
		{"zero length does nothing", r, 0, 0, nil, ODPStats{Prefetched: 2, ResidentPages: 2}},
		{"prefetch past the region", r, 3 * PageSize, PageSize + 1, ErrInvalid, ODPStats{Prefetched: 2, ResidentPages: 2}},
		{"prefetch of a region without ON_DEMAND", plain, plain.Addr(), 8, ErrInvalid, ODPStats{}},
		{"prefetch of a region without LOCAL_WRITE", readOnly, readOnly.Addr(), 8, ErrInvalid, ODPStats{}},
	}
	for _, tc := range tests {
		wantErr(t, tc.name, tb.Prefetch(tc.r, tc.addr, tc.n), tc.want)
		if got := tc.r.ODP(); got != tc.wantStats {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.wantStats)
		}
	}
	// A prefetched page does not fault when used.
	s, err := tb.Remote(r.RKey(), PageSize, 8, RemoteRead, Requester{PD: pd})
	wantReason(t, "read", err, 0)
	s.ReadAt(make([]byte, 8), 0)
	s.Release()
	if got := r.ODP(); got.Faults != 0 {
		t.Errorf("read of a prefetched page faulted: %+v", got)
	}
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	wantErr(t, "prefetch a deregistered region", tb.Prefetch(r, 0, 8), ErrInvalid)
}

// TestImplicitODP: an implicit ODP region "covers every address the device
// can resolve"; an address that resolves to nothing is a remote access
// error, never a crash.
func TestImplicitODP(t *testing.T) {
	tb := newTable(t)
	pd, pd2 := allocPD(t, tb), allocPD(t, tb)
	imp, err := tb.RegisterImplicit(pd, OnDemand|LocalWrite|RemoteRead|RemoteWrite)
	wantErr(t, "RegisterImplicit", err, nil)
	mine := pageAligned(2 * PageSize)
	copy(mine, "mine")
	other := pageAligned(PageSize)
	copy(other, "other PD")
	register(t, tb, pd, mine, 0) // memory of pd, with no access of its own
	register(t, tb, pd2, other, rw)
	arena, err := tb.NewArena(pd, PageSize)
	wantErr(t, "NewArena", err, nil)
	copy(arena.Bytes(), "arena")
	who := Requester{PD: pd}

	tests := []struct {
		name string
		addr uint64
		n    uint64
		need Access
		want Reason
		data string
	}{
		{"an address inside a region of the PD", addrOf(mine), 4, RemoteRead, 0, "mine"},
		{"writes go to that region's memory", addrOf(mine) + 100, 8, RemoteWrite, 0, ""},
		{"an address inside an arena of the PD", arena.Addr(), 5, RemoteRead, 0, "arena"},
		{"memory of another PD resolves to nothing", addrOf(other), 8, RemoteRead, ReasonNotMapped, ""},
		{"a range running past the memory", addrOf(mine) + 2*PageSize - 4, 8, RemoteRead, ReasonNotMapped, ""},
		{"address 0", 0, 8, RemoteRead, ReasonNotMapped, ""},
		{"the top of the address space", 1<<64 - 16, 8, RemoteRead, ReasonNotMapped, ""},
		{"the last byte of 2^64 is past SIZE_MAX bytes from 0", 1<<64 - 8, 8, RemoteRead, ReasonRange, ""},
		{"a range wrapping past 2^64", 1<<64 - 8, 16, RemoteRead, ReasonRange, ""},
		{"no REMOTE_ATOMIC on the implicit region", addrOf(mine), 8, RemoteAtomic, ReasonAccess, ""},
		{"wrong PD", addrOf(mine), 8, RemoteRead, ReasonWrongPD, ""},
	}
	for _, tc := range tests {
		w := who
		if tc.want == ReasonWrongPD {
			w.PD = pd2
		}
		s, err := tb.Remote(imp.RKey(), tc.addr, tc.n, tc.need, w)
		wantReason(t, tc.name, err, tc.want)
		if tc.data != "" {
			got := make([]byte, len(tc.data))
			if s.ReadAt(got, 0); string(got) != tc.data {
				t.Errorf("%s: read %q, want %q", tc.name, got, tc.data)
			}
		}
		if tc.need == RemoteWrite && tc.want == 0 {
			s.WriteAt([]byte("implicit"), 0)
			if string(mine[100:108]) != "implicit" {
				t.Errorf("%s: memory %q", tc.name, mine[100:108])
			}
		}
		s.Release()
	}
	// Faults are counted on the implicit region: page 0 of mine, the arena.
	if got := imp.ODP(); got.Faults != 2 || got.ResidentPages != 2 {
		t.Errorf("implicit ODP stats %+v, want 2 faults, 2 resident", got)
	}
	wantErr(t, "prefetch mapped memory", tb.Prefetch(imp, addrOf(mine)+PageSize, 8), nil)
	wantErr(t, "prefetch unmapped memory", tb.Prefetch(imp, 4096, 8), ErrFault)
	if got := imp.ODP(); got.Prefetched != 1 || got.ResidentPages != 3 {
		t.Errorf("implicit ODP stats after prefetch %+v", got)
	}

	// Memory that goes away stops resolving.
	r, _ := tb.RegionAt(pd, addrOf(mine), 1)
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	wantErr(t, "FreeArena", tb.FreeArena(arena), nil)
	for _, addr := range []uint64{addrOf(mine), arena.Addr()} {
		_, err := tb.Remote(imp.RKey(), addr, 4, RemoteRead, who)
		wantReason(t, "after the memory is gone", err, ReasonNotMapped)
	}
}
