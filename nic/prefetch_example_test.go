package nic_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// ExampleMR_Prefetch prefetches half of an on-demand paging region
// (ibv_advise_mr's PREFETCH_WRITE) before a peer WRITEs all of it: the
// pages prefetched take the WRITE without a page fault, the others fault
// on their first access, as on an ODP NIC.
func ExampleMR_Prefetch() {
	local := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	remote := must(nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}))
	defer local.Close()
	defer remote.Close()
	lpd, lcq := must(local.AllocPD()), must(local.CreateCQ(4))
	rpd, rcq := must(remote.AllocPD()), must(remote.CreateCQ(4))
	dst := must(rpd.AllocMR(4*4096, mr.LocalWrite|mr.RemoteWrite|mr.OnDemand))
	src := must(lpd.AllocMR(4*4096, 0))
	must(0, dst.Prefetch(dst.Addr(), 2*4096))

	lqp := must(lpd.CreateQP(nic.QPConfig{SendCQ: lcq}))
	rqp := must(rpd.CreateQP(nic.QPConfig{SendCQ: rcq}))
	must(0, lqp.Connect(remote.Addr(), rqp.Num(), nic.ConnectOptions{}))
	must(0, rqp.Connect(local.Addr(), lqp.Num(), nic.ConnectOptions{}))
	must(0, lqp.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled,
		SGL: []verbs.SGE{src.SGE(0, 4*4096)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}))
	wc := make([]verbs.WC, 1)
	must(lcq.Wait(context.Background(), wc))
	r, _ := remote.Memory().Region(dst.LKey())
	odp := r.Info().ODP
	fmt.Println(wc[0].Status, "prefetched:", odp.Prefetched, "faults:", odp.Faults, "resident:", odp.ResidentPages)
	// Output:
	// SUCCESS prefetched: 2 faults: 2 resident: 4
}
