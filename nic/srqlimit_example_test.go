package nic_test

import (
	"context"
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
