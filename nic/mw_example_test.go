package nic_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/mr/keyspace"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// ExamplePD_AllocMW opens 16 bytes of a region to a peer through a type 2
// memory window: the owner binds the window with a BIND_MW work request on
// its QP, then the peer writes through the window's rkey.
func ExamplePD_AllocMW() {
	ctx := context.Background()
	loopback := nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}
	owner, peer := must(nic.Open(loopback)), must(nic.Open(loopback))
	defer owner.Close()
	defer peer.Close()
	opd, ocq := must(owner.AllocPD()), must(owner.CreateCQ(4))
	ppd, pcq := must(peer.AllocPD()), must(peer.CreateCQ(4))
	oqp := must(opd.CreateQP(nic.QPConfig{SendCQ: ocq}))
	pqp := must(ppd.CreateQP(nic.QPConfig{SendCQ: pcq}))
	must(0, oqp.Connect(peer.Addr(), pqp.Num(), nic.ConnectOptions{}))
	must(0, pqp.Connect(owner.Addr(), oqp.Num(), nic.ConnectOptions{}))

	// The region itself grants no remote access, only the right to bind windows.
	region := must(opd.AllocMR(4096, mr.LocalWrite|mr.MWBind))
	w := must(opd.AllocMW(mr.WindowType2))
	bind := verbs.SendWR{Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &mr.BindRequest{
		WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: region.LKey(),
		Addr: region.Addr() + 1024, Length: 16, Access: mr.RemoteWrite}}
	must(0, oqp.PostSend(&bind))
	wc := make([]verbs.WC, 1)
	must(ocq.Wait(ctx, wc))
	fmt.Println(wc[0].Opcode, wc[0].Status)

	src := must(ppd.RegMR([]byte("through a window"), 0))
	write := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{src.SGE(0, 16)},
		RemoteAddr: region.Addr() + 1024, RKey: w.RKey()}
	must(0, pqp.PostSend(&write))
	must(pcq.Wait(ctx, wc))
	fmt.Println(wc[0].Opcode, wc[0].Status)
	oqp.Status() // a one-sided WRITE completes at the peer only; this orders the read below after it
	fmt.Printf("%s\n", region.Bytes()[1024:1040])
	// Output:
	// BIND_MW SUCCESS
	// RDMA_WRITE SUCCESS
	// through a window
}
