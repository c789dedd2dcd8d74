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

// ExampleMR_Rereg opens a region to remote WRITEs after it was registered
// without them (ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS): the peer's
// first WRITE is refused, and after Rereg the same rkey takes one. A new
// address range is not something Rereg does.
func ExampleMR_Rereg() {
	local := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	remote := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	defer local.Close()
	defer remote.Close()
	lpd, lcq := must(local.AllocPD()), must(local.CreateCQ(4))
	rpd, rcq := must(remote.AllocPD()), must(remote.CreateCQ(4))
	dst := must(rpd.AllocMR(4096, mr.LocalWrite|mr.RemoteRead))
	src := must(lpd.RegMR([]byte("rewrite!"), 0))
	rkey := dst.RKey() // what the peer was told

	write := func() verbs.WCStatus {
		// A refused WRITE ends its QP, so each WRITE has a pair of its own.
		lqp := must(lpd.CreateQP(nic.QPConfig{SendCQ: lcq}))
		rqp := must(rpd.CreateQP(nic.QPConfig{SendCQ: rcq}))
		must(0, lqp.Connect(remote.Addr(), rqp.Num(), nic.ConnectOptions{}))
		must(0, rqp.Connect(local.Addr(), lqp.Num(), nic.ConnectOptions{}))
		must(0, lqp.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled,
			SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: rkey}))
		wc := make([]verbs.WC, 1)
		must(lcq.Wait(context.Background(), wc))
		rqp.Status() // orders the device's write before the reads below
		return wc[0].Status
	}
	fmt.Println("before:", write())
	must(0, dst.Rereg(mr.ReregAccess, nil, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite))
	fmt.Println("after:", write(), string(dst.Bytes()[:8]), dst.RKey() == rkey)
	err := dst.Rereg(mr.ReregTranslation, nil, 0)
	fmt.Println("new memory:", errors.Is(err, nic.ErrNotSupported))
	// Output:
	// before: REM_ACCESS_ERR
	// after: SUCCESS rewrite! true
	// new memory: true
}
