//go:build unix

package mr

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAdoptArena: a mapping made elsewhere (here a file mapped twice, as
// an attached process and the daemon map its memfd) becomes an arena; a region
// over it writes through to the other mapping, and the table unmaps it only
// after the last transfer.
func TestAdoptArena(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	f, err := os.CreateTemp(t.TempDir(), "arena")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(2 * PageSize); err != nil {
		t.Fatal(err)
	}
	mmap := func() []byte {
		b, err := unix.Mmap(int(f.Fd()), 0, 2*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
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
