package nic_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// TestCQWakeup: an attached CQ's wakeup descriptor turns readable at the
// first completion after Arm, and only then, until Take takes it; armed
// for solicited completions only, at the first solicited one; Disarm
// withdraws an arming not signalled and reports one that was. An embedded
// CQ has none.
func TestCQWakeup(t *testing.T) {
	if _, ok := openEnd(t, nic.Config{}).cq.Wakeup(); ok {
		t.Error("an embedded CQ has a wakeup descriptor")
	}
	a := openEnd(t, nic.Config{})
	b := attachedEnd(t, startDaemon(t, nic.Config{}))
	connectEnds(t, a, b)
	w, ok := b.cq.Wakeup()
	if !ok {
		t.Fatal("an attached CQ has no wakeup descriptor")
	}
	readable := func(ms int) bool {
		p := []unix.PollFd{{Fd: int32(w.FD()), Events: unix.POLLIN}}
		n, err := unix.Poll(p, ms)
		for err == unix.EINTR { // the runtime's preemption signal
			n, err = unix.Poll(p, ms)
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	recvs := 0
	send := func(flags verbs.SendFlags) {
		t.Helper()
		if err := b.qp.PostRecv(&verbs.RecvWR{ID: uint64(recvs), SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		recvs++
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: flags, SGL: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(want int) {
		t.Helper()
		wcs := make([]verbs.WC, 8)
		got := 0
		for deadline := time.Now().Add(10 * time.Second); got < want && time.Now().Before(deadline); {
			n, err := b.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if got != want {
			t.Fatalf("polled %d completions, want %d", got, want)
		}
	}

	send(0)
	drain(1)
	if readable(50) {
		t.Error("readable with no arming")
	}
	w.Arm(false)
	send(0)
	if !readable(10000) {
		t.Fatal("armed, a completion did not make it readable")
	}
	if n := w.Take(0); n != 1 || readable(0) {
		t.Errorf("Take took %d wakeups, readable after: %v; want 1, false", n, readable(0))
	}
	drain(1)
	send(0)
	drain(1)
	if readable(50) {
		t.Error("a completion after the wakeup made it readable again without an arming")
	}

	w.Arm(true)
	send(0)
	drain(1)
	if readable(50) {
		t.Error("armed for solicited completions, one not solicited made it readable")
	}
	send(verbs.Solicited)
	if !readable(10000) {
		t.Fatal("armed for solicited completions, a solicited one did not make it readable")
	}
	w.Take(0)
	drain(1)

	w.Arm(false)
	if w.Disarm() {
		t.Error("Disarm with no completion since Arm reports a wakeup")
	}
	send(0)
	drain(1)
	if readable(50) {
		t.Error("disarmed, a completion made it readable")
	}
	w.Arm(false)
	send(0)
	drain(1)
	if !w.Disarm() {
		t.Error("Disarm after a completion does not report its wakeup")
	}
	if n := w.Take(time.Second); n != 1 {
		t.Errorf("Take after Disarm took %d wakeups, want 1", n)
	}
}
