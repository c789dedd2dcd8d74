package mr

import "testing"

func mapped(a *Arena) bool { return a.mem.refs.Load() > 0 }

func TestArenaArguments(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	tests := []struct {
		name string
		pd   PDHandle
		size uint64
		want error
	}{
		{"one byte maps a page", pd, 1, nil},
		{"several pages", pd, 3*PageSize + 1, nil},
		{"zero bytes", pd, 0, ErrInvalid},
		{"absurd size", pd, 1 << 62, ErrInvalid},
		{"unknown PD", pd + 100, 64, ErrInvalid},
	}
	for _, tc := range tests {
		a, err := tb.NewArena(tc.pd, tc.size)
		wantErr(t, tc.name, err, tc.want)
		if err != nil {
			continue
		}
		if uint64(len(a.Bytes())) != tc.size || a.Addr()%PageSize != 0 || a.PD() != tc.pd {
			t.Errorf("%s: arena of %d bytes at %#x in PD %d", tc.name, len(a.Bytes()), a.Addr(), a.PD())
		}
		a.Bytes()[tc.size-1] = 1 // the memory is there
		wantErr(t, "FreeArena", tb.FreeArena(a), nil)
		wantErr(t, "FreeArena twice", tb.FreeArena(a), ErrInvalid)
	}
}

// TestArenaLifetime: NIC-owned memory stays mapped while a region or a
// transfer uses it; deregistration defers the munmap until the last Span
// is released.
func TestArenaLifetime(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd}
	a, err := tb.NewArena(pd, 2*PageSize)
	wantErr(t, "NewArena", err, nil)
	r := register(t, tb, pd, a.Bytes()[PageSize:], rw)
	if r.Kind() != ArenaMemory || r.pinner != nil {
		t.Errorf("region over an arena: kind %v, pinned %v", r.Kind(), r.pinner != nil)
	}
	if r.Addr() != a.Addr()+PageSize {
		t.Errorf("region at %#x, want the arena's address %#x + a page", r.Addr(), a.Addr())
	}
	s, err := tb.Remote(r.RKey(), r.Addr(), 16, RemoteWrite, who)
	wantReason(t, "write", err, 0)

	wantErr(t, "FreeArena under a region", tb.FreeArena(a), nil)
	if !mapped(a) {
		t.Fatal("arena unmapped while a region uses it")
	}
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	if !mapped(a) {
		t.Fatal("arena unmapped while a transfer uses it")
	}
	if st := tb.Stats(); st.Draining != 1 || st.Arenas != 0 {
		t.Errorf("stats while draining: %+v", st)
	}
	if n := s.WriteAt([]byte("still here"), 0); n != 10 {
		t.Errorf("WriteAt during the deferred unmap = %d", n)
	}
	s.Release()
	if mapped(a) {
		t.Error("arena still mapped after the last reference")
	}
	if st := tb.Stats(); st.Draining != 0 {
		t.Errorf("stats after release: %+v", st)
	}
	tb.addrMu.Lock()
	n := tb.addrArenas.len()
	tb.addrMu.Unlock()
	if n != 0 {
		t.Errorf("%d arenas still indexed after munmap", n)
	}
}

func TestArenaFreedFirst(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	a, err := tb.NewArena(pd, PageSize)
	wantErr(t, "NewArena", err, nil)
	b := a.Bytes()
	wantErr(t, "FreeArena", tb.FreeArena(a), nil)
	if mapped(a) {
		t.Fatal("an unused arena stays mapped after FreeArena")
	}
	// Unmapped, the arena has left the address index.
	if tb.arenaOf(b) != nil {
		t.Error("a freed arena is still found")
	}
}
