// Examples cannot skip, and this one needs attach mode: it is built where
// attach mode works (see nictest.MustHaveAttach).

//go:build linux && !softnic_portable

package nic_test

import (
	"fmt"
	"log"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// ExampleCQ_Wakeup is the loop of a receiver that waits for its CQ in
// poll(2) beside its other descriptors, as an event loop does. It arms the
// CQ's wakeup before it polls the CQ, sleeps in poll while the CQ is
// empty, takes the wakeup, and arms again before it polls what woke it.
// The Notification taken before each arming tells a completion that came
// while the CQ was being armed, which the daemon may not have signalled.
func ExampleCQ_Wakeup() {
	d, err := nictest.StartDaemon(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	pd := must(d.Client.AllocPD())
	cq := must(d.Client.CreateCQ(8))
	q := must(pd.CreateQP(nic.QPConfig{SendCQ: cq}))
	must(0, q.Connect(d.Client.Addr(), q.Num(), nic.ConnectOptions{})) // the QP talks to itself
	m := must(pd.AllocMR(4096, nictest.Access))
	for i := range 3 {
		must(0, q.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{m.SGE(64*i, 64)}}))
	}
	go func() {
		for range 3 {
			time.Sleep(time.Millisecond)
			must(0, q.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{m.SGE(1024, 8)}}))
		}
	}()

	w, ok := cq.Wakeup()
	if !ok {
		log.Fatal("no wakeup descriptor")
	}
	var other [2]int // the loop's other descriptor: a pipe nobody writes
	must(0, unix.Pipe2(other[:], unix.O_CLOEXEC))
	defer unix.Close(other[0])
	defer unix.Close(other[1])
	arm := func() nic.Notification {
		armed := cq.Notify(false)
		w.Arm(false)
		return armed
	}
	wcs := make([]verbs.WC, 4)
	armed := arm()
	for got := 0; got < 3; {
		n := must(cq.Poll(wcs))
		for _, wc := range wcs[:n] {
			fmt.Println("received", wc.ID, wc.Status)
		}
		got += n
		if n > 0 || got == 3 {
			continue
		}
		if !armed.Written() {
			fds := []unix.PollFd{{Fd: int32(w.FD()), Events: unix.POLLIN}, {Fd: int32(other[0]), Events: unix.POLLIN}}
			_, err := unix.Poll(fds, -1)
			for err == unix.EINTR { // a signal, such as the runtime's preemption
				_, err = unix.Poll(fds, -1)
			}
			must(0, err)
		}
		w.Take(0)
		armed = arm()
	}
	// Output:
	// received 0 SUCCESS
	// received 1 SUCCESS
	// received 2 SUCCESS
}
