package mr_test

import (
	"errors"
	"fmt"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/mr/keyspace"
)

// Register a buffer for remote reads and writes, and serve a peer's RDMA
// WRITE into it the way the responder does: check the rkey, address and
// length, then copy the payload into the span.
func ExampleTable_Register() {
	t := mr.NewTable(mr.Config{})
	defer t.Close()
	pd, _ := t.AllocPD()

	buf := make([]byte, 64)
	r, err := t.Register(pd, buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The peer targets the buffer's virtual address with the region's rkey.
	qp := mr.Requester{PD: pd, QPN: 0x11}
	s, err := t.Remote(r.RKey(), r.Addr()+8, 5, mr.RemoteWrite, qp)
	if err != nil {
		fmt.Println(err)
		return
	}
	s.WriteAt([]byte("hello"), 0)
	s.Release()
	fmt.Printf("%q\n", buf[8:13])

	// One byte too far is an R_Key violation: the responder NAKs it.
	_, err = t.Remote(r.RKey(), r.Addr()+60, 5, mr.RemoteWrite, qp)
	var why mr.Reason
	fmt.Println(errors.As(err, &why), why)
	// Output:
	// "hello"
	// true out of range
}

// A zero-based region is addressed by offsets from 0 instead of virtual
// addresses (IBV_ACCESS_ZERO_BASED).
func ExampleTable_Register_zeroBased() {
	t := mr.NewTable(mr.Config{})
	defer t.Close()
	pd, _ := t.AllocPD()

	buf := []byte("0123456789")
	r, _ := t.Register(pd, buf, mr.RemoteRead|mr.ZeroBased)
	s, err := t.Remote(r.RKey(), 4, 3, mr.RemoteRead, mr.Requester{PD: pd})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, 3)
	s.ReadAt(got, 0)
	s.Release()
	fmt.Println(r.Addr(), string(got))
	// Output: 0 456
}

// Register three buffers as one region with an application-chosen key, as
// fi_mr_regv does in package nic/fabric: a peer sees them as one contiguous
// range starting at 0 (ZeroBased), and the key it uses is the one asked for.
func ExampleTable_RegisterWith() {
	t := mr.NewTable(mr.Config{})
	defer t.Close()
	pd, _ := t.AllocPD()
	iov := [][]byte{[]byte("abc"), []byte("defg"), []byte("hij")}
	r, err := t.RegisterWith(pd, mr.RegOptions{Segments: iov, Access: mr.RemoteRead | mr.ZeroBased, Key: 0xC0DE, HasKey: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Deregister(r)

	s, err := t.Remote(r.RKey(), 2, 6, mr.RemoteRead, mr.Requester{PD: pd})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, 6)
	s.ReadAt(got, 0)
	s.Release()
	fmt.Printf("key %#x, %d bytes, read %q\n", r.RKey(), r.Len(), got)

	// The same key cannot be had twice.
	_, err = t.RegisterWith(pd, mr.RegOptions{Segments: [][]byte{make([]byte, 8)}, Access: mr.RemoteRead, Key: 0xC0DE, HasKey: true})
	fmt.Println(errors.Is(err, mr.ErrNoKey))
	// Output:
	// key 0xc0de, 10 bytes, read "cdefgh"
	// true
}

// Bind a type 2 memory window over part of a region with a BIND_MW work
// request, reach the region through the window's own rkey, and invalidate
// it (LOCAL_INV).
func ExampleTable_BindWindow() {
	t := mr.NewTable(mr.Config{})
	defer t.Close()
	pd, _ := t.AllocPD()
	buf := []byte("................window..........")
	r, _ := t.Register(pd, buf, mr.LocalWrite|mr.RemoteRead|mr.MWBind)
	w, _ := t.AllocWindow(pd, mr.WindowType2)

	qp := mr.Requester{PD: pd, QPN: 7}
	err := t.BindWindow(&mr.BindRequest{
		WindowKey: w.RKey(),
		NewKey:    keyspace.IncRKey(w.RKey()),
		RegionKey: r.LKey(),
		Addr:      r.Addr() + 16, // the window covers "window"
		Length:    6,
		Access:    mr.RemoteRead | mr.ZeroBased,
	}, qp)
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := t.Remote(w.RKey(), 0, 6, mr.RemoteRead, qp)
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, 6)
	s.ReadAt(got, 0)
	s.Release()
	fmt.Println(string(got))

	// A window bound to QP 7 is not reachable through another QP.
	_, err = t.Remote(w.RKey(), 0, 6, mr.RemoteRead, mr.Requester{PD: pd, QPN: 8})
	fmt.Println(err)

	// While it is bound the region cannot be deregistered.
	fmt.Println(errors.Is(t.Deregister(r), mr.ErrBusy))
	_ = t.Invalidate(w.RKey(), qp)
	_, err = t.Remote(w.RKey(), 0, 6, mr.RemoteRead, qp)
	fmt.Println(err)
	// Output:
	// window
	// window bound to another QP
	// true
	// stale key
}
