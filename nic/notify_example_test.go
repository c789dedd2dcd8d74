package nic_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// ExampleCQ_Notify is the loop of a receiver that sleeps while its CQ is
// empty, as a program blocks in ibv_get_cq_event: it arms the CQ before it
// polls, so that a completion written after the poll found nothing still
// wakes it, and it arms again before it polls what woke it. A completion
// already in the CQ when it is armed does not end the wait.
func ExampleCQ_Notify() {
	local := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	remote := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	defer local.Close()
	defer remote.Close()
	lpd, lcq := must(local.AllocPD()), must(local.CreateCQ(4))
	rpd, rcq := must(remote.AllocPD()), must(remote.CreateCQ(4))
	lqp := must(lpd.CreateQP(nic.QPConfig{SendCQ: lcq}))
	rqp := must(rpd.CreateQP(nic.QPConfig{SendCQ: rcq}))
	must(0, lqp.Connect(remote.Addr(), rqp.Num(), nic.ConnectOptions{}))
	must(0, rqp.Connect(local.Addr(), lqp.Num(), nic.ConnectOptions{}))
	src := must(lpd.RegMR([]byte("a message"), 0))
	dst := must(rpd.AllocMR(4096, mr.LocalWrite))
	for i := range 3 {
		must(0, rqp.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(64*i, 64)}}))
	}
	go func() {
		for i := range 3 {
			time.Sleep(time.Millisecond)
			must(0, lqp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 9)}}))
		}
	}()

	ctx := context.Background()
	wcs := make([]verbs.WC, 4)
	armed := rcq.Notify(false)
	for got := 0; got < 3; {
		n := must(rcq.Poll(wcs))
		for _, wc := range wcs[:n] {
			fmt.Println("received", wc.ID, wc.Status)
		}
		got += n
		if n == 0 {
			must(0, armed.Wait(ctx))
			armed = rcq.Notify(false)
		}
	}

	must(0, rqp.PostRecv(&verbs.RecvWR{ID: 3, SGL: []verbs.SGE{dst.SGE(192, 64)}}))
	must(0, lqp.PostSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 9)}}))
	must(0, rcq.WaitReady(ctx))
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	err := rcq.Notify(false).Wait(short)
	fmt.Println("armed with a completion in the CQ:", errors.Is(err, context.DeadlineExceeded))
	// Output:
	// received 0 SUCCESS
	// received 1 SUCCESS
	// received 2 SUCCESS
	// armed with a completion in the CQ: true
}
