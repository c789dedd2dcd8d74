package nic_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// ExampleSRQ_Modify arms an SRQ's limit, the low watermark a server uses
// to learn, outside the data path, that it must post more receives: the
// SEND that takes the SRQ below it is reported to the device's
// OnSRQLimit (what libsoftnic turns into IBV_EVENT_SRQ_LIMIT_REACHED),
// and the limit is disarmed.
func ExampleSRQ_Modify() {
	low := make(chan *nic.SRQ, 1)
	cfg := nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), OnSRQLimit: func(s *nic.SRQ) { low <- s }}
	server := must(nic.Open(cfg))
	client := must(nic.Open(nic.Config{Addr: cfg.Addr}))
	defer server.Close()
	defer client.Close()
	spd, scq := must(server.AllocPD()), must(server.CreateCQ(8))
	cpd, ccq := must(client.AllocPD()), must(client.CreateCQ(8))
	srq := must(spd.CreateSRQ(8, 1))
	sqp := must(spd.CreateQP(nic.QPConfig{SendCQ: scq, SRQ: srq}))
	cqp := must(cpd.CreateQP(nic.QPConfig{SendCQ: ccq}))
	must(0, sqp.Connect(client.Addr(), cqp.Num(), nic.ConnectOptions{}))
	must(0, cqp.Connect(server.Addr(), sqp.Num(), nic.ConnectOptions{}))

	buf := must(spd.RegMR(make([]byte, 256), mr.LocalWrite))
	for i := range 4 {
		must(0, srq.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{buf.SGE(i*64, 64)}}))
	}
	must(0, srq.Modify(&verbs.SRQAttr{Limit: 4}, verbs.SRQLimit))
	fmt.Printf("armed: %+v\n", srq.Attr())

	msg := must(cpd.RegMR([]byte("hello"), 0))
	must(0, cqp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{msg.SGE(0, 5)}}))
	wc := make([]verbs.WC, 1)
	must(scq.Wait(context.Background(), wc))
	fmt.Println("received:", wc[0].Status, "limit reached:", <-low == srq)
	fmt.Printf("disarmed: %+v\n", srq.Attr())
	// Output:
	// armed: {MaxWR:8 MaxSGE:1 Limit:4}
	// received: SUCCESS limit reached: true
	// disarmed: {MaxWR:8 MaxSGE:1 Limit:0}
}

// ExampleCQ_Resize grows a CQ made too small for the work a program
// posts: a CQ of one entry takes three completions once resized to four.
// A depth of 0, like one below the completions waiting, is refused.
func ExampleCQ_Resize() {
	local := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	remote := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	defer local.Close()
	defer remote.Close()
	lpd, lcq := must(local.AllocPD()), must(local.CreateCQ(1))
	rpd, rcq := must(remote.AllocPD()), must(remote.CreateCQ(1))
	lqp := must(lpd.CreateQP(nic.QPConfig{SendCQ: lcq}))
	rqp := must(rpd.CreateQP(nic.QPConfig{SendCQ: rcq}))
	must(0, lqp.Connect(remote.Addr(), rqp.Num(), nic.ConnectOptions{}))
	must(0, rqp.Connect(local.Addr(), lqp.Num(), nic.ConnectOptions{}))

	must(0, lcq.Resize(4))
	src := must(lpd.RegMR([]byte("12345678"), 0))
	dst := must(rpd.AllocMR(4096, mr.LocalWrite|mr.RemoteWrite))
	for i := range 3 {
		must(0, lqp.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}))
	}
	wcs := make([]verbs.WC, 4)
	for got := 0; got < 3; {
		n := must(lcq.Wait(context.Background(), wcs[got:]))
		got += n
	}
	fmt.Println("completions:", wcs[0].ID, wcs[1].ID, wcs[2].ID, wcs[2].Status)
	fmt.Println("resize to 0 is ErrInvalid:", errors.Is(lcq.Resize(0), nic.ErrInvalid))
	// Output:
	// completions: 0 1 2 SUCCESS
	// resize to 0 is ErrInvalid: true
}
