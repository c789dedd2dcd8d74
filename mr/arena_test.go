package mr

import (
	"testing"

	"golang.org/x/sys/unix"
)

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

// TestAdoptArena: a mapping made elsewhere (here a memfd mapped twice, as
// an attached process and the daemon map it) becomes an arena; a region
// over it writes through to the other mapping, and the table unmaps it only
// after the last transfer.
func TestAdoptArena(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	fd, err := unix.MemfdCreate("mr-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 2*PageSize); err != nil {
		t.Fatal(err)
	}
	mmap := func() []byte {
		b, err := unix.Mmap(fd, 0, 2*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	theirs, ours := mmap(), mmap()
	defer unix.Munmap(theirs)

	for _, tc := range []struct {
		name string
		pd   PDHandle
		b    []byte
		want error
	}{
		{"unknown PD", pd + 100, ours, ErrInvalid},
		{"empty mapping", pd, ours[:0], ErrInvalid},
	} {
		_, err := tb.AdoptArena(tc.pd, tc.b)
		wantErr(t, tc.name, err, tc.want)
	}
	a, err := tb.AdoptArena(pd, ours)
	wantErr(t, "AdoptArena", err, nil)
	if len(a.Bytes()) != 2*PageSize || a.Addr() != addrOf(ours) {
		t.Fatalf("arena of %d bytes at %#x, want the mapping's %d at %#x", len(a.Bytes()), a.Addr(), len(ours), addrOf(ours))
	}
	r := register(t, tb, pd, a.Bytes()[PageSize:], rw)
	s, err := tb.Remote(r.RKey(), r.Addr()+8, 5, RemoteWrite, Requester{PD: pd})
	wantReason(t, "write", err, 0)
	s.WriteAt([]byte("hello"), 0)
	if got := string(theirs[PageSize+8 : PageSize+13]); got != "hello" {
		t.Errorf("the other mapping reads %q", got)
	}
	wantErr(t, "FreeArena", tb.FreeArena(a), nil)
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	if !mapped(a) {
		t.Fatal("adopted arena unmapped while a transfer uses it")
	}
	s.Release()
	if mapped(a) {
		t.Error("adopted arena still mapped after the last reference")
	}
}
