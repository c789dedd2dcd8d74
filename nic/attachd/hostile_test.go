//go:build linux

package attachd

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// TestHostileDescriptorsBlockNothing: a process that clears O_NONBLOCK on
// every descriptor the daemon gave it (which it shares with the daemon
// when the daemon holds them too: the flag lives in the open file
// description), fills its doorbell eventfd's counter and empties it
// right after signalling, while the daemon wakes its CQ, cannot make the
// daemon block: another process's WRITEs keep completing. Its CQ's
// wakeup is an epoll fd, through which it can neither fill nor empty the
// daemon's eventfd, and which still wakes for its completions.
func TestHostileDescriptorsBlockNothing(t *testing.T) {
	// A daemon blocked in a write would hang the test in its cleanup (the
	// server's close waits for the device's goroutines), past a failed wait.
	watchdog := time.AfterFunc(2*time.Minute, func() { panic("the daemon is blocked: the cleanup waited 2 minutes") })
	t.Cleanup(func() { watchdog.Stop() })
	_, srv, path := serveTest(t, Config{})
	victim := newLoop(t, path, false)
	victim.write(t, 0)

	fz := &sessionFuzz{srv: srv, path: path}
	s, err := fz.attach()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if fd := s.page.FD(); fd >= 0 {
		blocking(t, fd)
	}
	res := func(op string, args any) (attachproto.QPResult, []int) {
		t.Helper()
		r, ok, err := s.call(op, args, -1, false)
		if err != nil || !ok || r.m.Error != "" {
			t.Fatalf("%s: %v (answered %v) %s", op, err, ok, r.m.Error)
		}
		for _, fd := range r.fds {
			blocking(t, fd)
		}
		var q attachproto.QPResult
		if err := json.Unmarshal(r.m.Result, &q); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return q, r.fds
	}
	pd, _ := res(attachproto.OpAllocPD, nil)
	cq, fds := res(attachproto.OpCreateCQ, attachproto.CreateCQArgs{Depth: 16})
	if len(fds) != 2 {
		t.Fatalf("create_cq: %d descriptors", len(fds))
	}
	cqMap, cqRing, err := shm.MapRing(fds[0], 16, shm.CQESize)
	if err != nil {
		t.Fatal(err)
	}
	wake := fds[1]
	t.Cleanup(func() { cqMap.Close(); unix.Close(wake) })
	cfg := attachproto.QPConfig{Type: verbs.RC, SendCQ: cq.H, RecvCQ: cq.H, MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	qp, fds := res(attachproto.OpCreateQP, attachproto.CreateQPArgs{PD: pd.H, Config: cfg})
	if len(fds) != 2 {
		t.Fatalf("create_qp: %d descriptors", len(fds))
	}
	c := qp.Config
	sendMap, _, err := shm.MapRing(fds[0], c.MaxSendWR, shm.SendSlotSize(c.MaxSendSGE, c.MaxInline))
	if err != nil {
		t.Fatal(err)
	}
	recvMap, recvRing, err := shm.MapRing(fds[1], c.MaxRecvWR, shm.RecvSlotSize(c.MaxRecvSGE))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sendMap.Close(); recvMap.Close() })

	// Nothing the process holds is the daemon's eventfd of its CQ.
	if link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(wake)); link != "anon_inode:[eventpoll]" {
		t.Fatalf("the CQ's wakeup descriptor is %q, want an epoll fd", link)
	}
	var full [8]byte
	binary.NativeEndian.PutUint64(full[:], 1<<64-2)
	if _, err := unix.Write(wake, full[:]); err == nil {
		t.Fatal("the process wrote to its CQ's wakeup descriptor")
	}
	blocking(t, s.bell)

	// The doorbell: signalled and emptied at once, then left full.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var one, b [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		for {
			select {
			case <-stop:
				unix.Write(s.bell, full[:]) // the counter is 0: it fills
				return
			default:
			}
			s.db.Mark(qp.Slot)
			unix.Write(s.bell, one[:])
			unix.Read(s.bell, b[:]) // nobody else reads it: never blocks
			shm.Yield()
		}
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(halt) // before the page is unmapped

	// Its CQ armed, and a completion for it: a receive flushed.
	res(attachproto.OpModifyQP, attachproto.ModifyQPArgs{H: qp.H, Attr: verbs.Attr{State: verbs.Init, AccessFlags: mr.LocalWrite},
		Mask: verbs.AttrState | verbs.AttrAccessFlags})
	if err := shm.EncodeRecv(recvRing.Slot(0), &verbs.RecvWR{ID: 7}); err != nil {
		t.Fatal(err)
	}
	recvRing.Producer().Store(1)
	cqRing.Armed().Store(1)
	for i := range uint64(100) {
		if i == 50 {
			res(attachproto.OpModifyQP, attachproto.ModifyQPArgs{H: qp.H, Attr: verbs.Attr{State: verbs.Err}, Mask: verbs.AttrState})
		}
		victim.write(t, i+1)
	}
	halt()
	for i := range uint64(20) {
		victim.write(t, 100+i)
	}

	// The flush woke the CQ's epoll fd (the process's wait), and the
	// completion is in the ring.
	p := []unix.PollFd{{Fd: int32(wake), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 10_000)
	for err == unix.EINTR { // the runtime's preemption signal
		n, err = unix.Poll(p, 10_000)
	}
	if n != 1 || err != nil {
		t.Fatalf("poll of the CQ's wakeup = %d, %v; want it readable", n, err)
	}
	if got := cqRing.Producer().Load(); got != 1 {
		t.Errorf("%d completions in the process's CQ, want the flushed receive's", got)
	}
}

// blocking clears O_NONBLOCK on fd, as a hostile process may.
func blocking(t *testing.T, fd int) {
	t.Helper()
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatalf("clearing O_NONBLOCK on %d: %v", fd, err)
	}
}
