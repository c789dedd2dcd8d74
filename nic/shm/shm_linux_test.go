//go:build !softnic_portable

package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMapSharesMemory(t *testing.T) {
	m, err := Create("shm-test", 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Bytes()) != 2*PageSize {
		t.Fatalf("Create(5000) maps %d bytes, want two pages", len(m.Bytes()))
	}
	fd, err := unix.Dup(m.FD())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := Map(fd, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	copy(m.Bytes()[4097:], "shared")
	if got := string(peer.Bytes()[4097:4103]); got != "shared" {
		t.Errorf("the second mapping reads %q", got)
	}
	// Sealed: the file can no longer shrink under a reader.
	if err := unix.Ftruncate(m.FD(), 0); err == nil {
		t.Error("a created memfd can be truncated")
	}
}

// TestMapRange maps the second page of a memfd on its own: it sees what
// the first mapping wrote there; a range past the end, or at an offset that
// is not a page boundary, is refused.
func TestMapRange(t *testing.T) {
	m, err := Create("shm-range", 3*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	copy(m.Bytes()[PageSize+8:], "second page")
	dup := func() int {
		fd, err := unix.Dup(m.FD())
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	peer, err := MapRange(dup(), PageSize, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if len(peer.Bytes()) != PageSize || string(peer.Bytes()[8:19]) != "second page" {
		t.Errorf("MapRange(PageSize, 100) maps %d bytes reading %q", len(peer.Bytes()), peer.Bytes()[8:19])
	}
	for _, tc := range []struct {
		name string
		off  int64
		size int
		want error
	}{
		{"past the end", 2 * PageSize, 2 * PageSize, ErrNotShared},
		{"offset inside a page", 100, PageSize, unix.EINVAL},
		{"negative offset", -PageSize, PageSize, unix.EINVAL},
	} {
		if _, err := MapRange(dup(), tc.off, tc.size); !errors.Is(err, tc.want) {
			t.Errorf("%s: MapRange(%d, %d) = %v, want %v", tc.name, tc.off, tc.size, err, tc.want)
		}
	}
}

func TestMapRefuses(t *testing.T) {
	unsealed := func(t *testing.T) int {
		fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, PageSize); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	small := func(t *testing.T) int {
		m, err := Create("small", PageSize)
		if err != nil {
			t.Fatal(err)
		}
		fd, _ := unix.Dup(m.FD())
		m.Close()
		return fd
	}
	pipe := func(t *testing.T) int {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(p[1])
		return p[0]
	}
	for _, tc := range []struct {
		name string
		fd   func(*testing.T) int
		size int
	}{
		{"memfd without seals", unsealed, PageSize},
		{"sealed memfd smaller than asked", small, 2 * PageSize},
		{"a pipe", pipe, PageSize},
	} {
		fd := tc.fd(t)
		if _, err := Map(fd, tc.size); !errors.Is(err, ErrNotShared) {
			t.Errorf("%s: Map = %v, want ErrNotShared", tc.name, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("%s: Map left the refused descriptor open", tc.name)
		}
	}
}

func TestConnCarriesDescriptors(t *testing.T) {
	a, b := socketPair(t)
	m, err := Create("carried", PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	copy(m.Bytes(), "through the socket")
	efd, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	// Three messages in a row: the descriptors keep their order and their
	// message.
	for _, s := range []struct {
		line string
		fds  []int
	}{{"first", nil}, {"second", []int{m.FD(), efd}}, {"third", nil}} {
		if err := a.Send([]byte(s.line), s.fds); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []struct {
		line string
		fds  int
	}{{"first", 0}, {"second", 2}, {"third", 0}} {
		line, err := b.ReadLine()
		if err != nil || string(line) != want.line {
			t.Fatalf("ReadLine = %q, %v; want %q", line, err, want.line)
		}
		fds, err := b.TakeFDs(want.fds)
		if err != nil {
			t.Fatal(err)
		}
		if want.fds == 0 {
			continue
		}
		peer, err := Map(fds[0], PageSize)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(peer.Bytes(), []byte("through the socket")) {
			t.Error("the received memfd does not share the memory")
		}
		peer.Close()
		Signal(efd)
		var v [8]byte
		if n, err := unix.Read(fds[1], v[:]); n != 8 || err != nil || v[0] != 1 {
			t.Errorf("the received eventfd reads %v, %v after a signal", v, err)
		}
		CloseFDs(fds[1:])
	}
	if _, err := b.TakeFDs(1); !errors.Is(err, ErrProtocol) {
		t.Errorf("taking a descriptor that never came: %v", err)
	}
}

// newTestWaiter returns an eventfd, an epoll fd in which it is registered
// and the Waiter of that, closed when t ends.
func newTestWaiter(t *testing.T) (efd, epfd int, w *Waiter) {
	t.Helper()
	efd, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(efd) })
	if epfd, err = NewEpoll(efd); err != nil {
		t.Fatal(err)
	}
	if w, err = NewWaiter(epfd, "test-wakeup"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return efd, epfd, w
}

// TestWaiterTakesEarlierWakeups: wakeups signalled before a Wait are
// taken by it before its look, as one, and do not end it; those signalled
// after the look end the wait and are taken as one, however often they
// are signalled before the waiter runs.
func TestWaiterTakesEarlierWakeups(t *testing.T) {
	efd, epfd, w := newTestWaiter(t)
	w.SetDeadline(time.Now().Add(10 * time.Second))

	Signal(efd)
	Signal(efd)
	looks := 0
	var taken atomic.Uint64
	if woke, err := w.Wait(func() bool { looks++; return true }, &taken); taken.Load() != 1 || woke || err != nil || looks != 1 {
		t.Fatalf("Wait whose look finds work = %d taken, %v, %v after %d looks; want the two signals taken as 1, not woken, nil after 1", taken.Load(), woke, err, looks)
	}
	if n := takeWakeups(epfd); n != 0 {
		t.Fatalf("%d wakeups left after a Wait took them", n)
	}

	taken.Store(0)
	Signal(efd) // before the Wait: taken before the look
	woke, err := w.Wait(func() bool {
		Signal(efd) // after the look, as a completion the look missed
		Signal(efd)
		return false
	}, &taken)
	if taken.Load() != 2 || !woke || err != nil {
		t.Fatalf("Wait woken after its look = %d taken, %v, %v; want 2 taken (one event of the two signals after the look), woken, nil", taken.Load(), woke, err)
	}
}

// TestWaiterCountsAsItTakes: a wakeup taken before the look, for
// something the waiter took care of before it waited, is counted while
// the wait goes on, not when the next wakeup ends it (a doorbell's
// signals counted so would lag behind the posts that made them for as
// long as the process posts nothing more).
func TestWaiterCountsAsItTakes(t *testing.T) {
	efd, _, w := newTestWaiter(t)
	w.SetDeadline(time.Now().Add(10 * time.Second))
	Signal(efd)
	var taken atomic.Uint64
	looked := make(chan struct{})
	done := make(chan bool)
	go func() {
		woke, _ := w.Wait(func() bool { close(looked); return false }, &taken)
		done <- woke
	}()
	<-looked
	if n := taken.Load(); n != 1 {
		t.Errorf("the wakeup before the look: %d taken while the wait goes on, want 1", n)
	}
	select {
	case <-done:
		t.Fatal("a wakeup before the look ended the wait")
	case <-time.After(20 * time.Millisecond):
	}
	Signal(efd)
	if woke := <-done; !woke || taken.Load() != 2 {
		t.Errorf("Wait woken by a signal after its look = %v, %d taken; want woken, 2", woke, taken.Load())
	}
}

// TestWaiterEnds: a Wait under way returns an error at its deadline and
// when the Waiter closes.
func TestWaiterEnds(t *testing.T) {
	for _, how := range []string{"deadline", "close"} {
		t.Run(how, func(t *testing.T) {
			_, _, w := newTestWaiter(t)
			looked := make(chan struct{})
			go func() {
				<-looked
				if how == "deadline" {
					w.SetDeadline(time.Unix(1, 0))
				} else {
					w.Close()
				}
			}()
			if _, err := w.Wait(func() bool { close(looked); return false }, nil); err == nil {
				t.Fatalf("Wait ended by %s returned no error", how)
			}
		})
	}
}

// TestSignalNeverBlocks: a full counter (as a process that held the
// eventfd could make it) fails the signal, which returns.
func TestSignalNeverBlocks(t *testing.T) {
	fd, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var full [8]byte
	binary.NativeEndian.PutUint64(full[:], 1<<64-2)
	if _, err := unix.Write(fd, full[:]); err != nil {
		t.Fatal(err)
	}
	Signal(fd) // returns, or the test times out
	var got [8]byte
	if _, err := unix.Read(fd, got[:]); err != nil || binary.NativeEndian.Uint64(got[:]) != 1<<64-2 {
		t.Fatalf("counter %d, %v after a signal of a full eventfd; want it unchanged", binary.NativeEndian.Uint64(got[:]), err)
	}
}
