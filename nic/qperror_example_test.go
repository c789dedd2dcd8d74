package nic_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// ExampleConfig_onQPError learns, outside the data path, that a QP failed:
// a WRITE with a bad rkey completes with REM_ACCESS_ERR, and the QP, now in
// the error state, is reported to the device's OnQPError (what libsoftnic
// turns into IBV_EVENT_QP_FATAL).
func ExampleConfig_onQPError() {
	failed := make(chan verbs.WCStatus, 1)
	cfg := nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"),
		OnQPError: func(q *nic.QP, cause verbs.WCStatus) { failed <- cause }}
	local := must(nic.Open(cfg))
	remote := must(nic.Open(nic.Config{Addr: cfg.Addr}))
	defer local.Close()
	defer remote.Close()
	lpd, lcq := must(local.AllocPD()), must(local.CreateCQ(4))
	rpd, rcq := must(remote.AllocPD()), must(remote.CreateCQ(4))
	lqp := must(lpd.CreateQP(nic.QPConfig{SendCQ: lcq}))
	rqp := must(rpd.CreateQP(nic.QPConfig{SendCQ: rcq}))
	must(0, lqp.Connect(remote.Addr(), rqp.Num(), nic.ConnectOptions{}))
	must(0, rqp.Connect(local.Addr(), lqp.Num(), nic.ConnectOptions{}))

	src := must(lpd.RegMR([]byte("12345678"), 0))
	dst := must(rpd.AllocMR(4096, mr.LocalWrite|mr.RemoteWrite))
	write := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, 8)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey() + 1}
	must(0, lqp.PostSend(&write))
	wc := make([]verbs.WC, 1)
	must(lcq.Wait(context.Background(), wc))
	fmt.Println("completion:", wc[0].Status)
	fmt.Println("OnQPError:", <-failed, lqp.Status().State)
	// Output:
	// completion: REM_ACCESS_ERR
	// OnQPError: REM_ACCESS_ERR ERR
}
