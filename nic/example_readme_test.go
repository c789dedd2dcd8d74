package nic_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// must stops the example at the first error.
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}

// Example_readme is the Go library section of the README: two NICs on
// loopback, memory on one, a connection through the connection manager,
// and an RDMA WRITE that an RDMA READ reads back.
func Example_readme() {
	ctx := context.Background()
	loopback := nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")}
	server, client := must(nic.Open(loopback)), must(nic.Open(loopback))
	defer server.Close()
	defer client.Close()

	// The server: 4 KiB that peers may read and write, and a listener on rdma_cm port 7471.
	spd := must(server.AllocPD())
	region := must(spd.AllocMR(4096, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite))
	l := must(server.Listen(7471, nic.ListenOptions{PD: spd, QP: nic.QPConfig{SendCQ: must(server.CreateCQ(16))}}))
	go l.Accept(ctx)

	// The client: a registered buffer, a connected QP, a WRITE and a READ.
	cpd, cq := must(client.AllocPD()), must(client.CreateCQ(16))
	buf := must(cpd.RegMR(make([]byte, 64), mr.LocalWrite))
	conn := must(client.Dial(ctx, server.Addr(), 7471, nic.DialOptions{PD: cpd, QP: nic.QPConfig{SendCQ: cq}}))
	copy(buf.Bytes(), "hello, RDMA")
	for _, wr := range []verbs.SendWR{
		{Opcode: verbs.WRWrite, SGL: []verbs.SGE{buf.SGE(0, 11)}, RemoteAddr: region.Addr(), RKey: region.RKey()},
		{Opcode: verbs.WRRead, SGL: []verbs.SGE{buf.SGE(32, 11)}, RemoteAddr: region.Addr(), RKey: region.RKey()},
	} {
		wr.Flags = verbs.Signaled
		must(0, conn.QP().PostSend(&wr))
		wc := make([]verbs.WC, 1)
		must(cq.Wait(ctx, wc))
		fmt.Println(wc[0].Opcode, wc[0].Status)
	}
	fmt.Printf("%s\n", buf.Bytes()[32:43])
	// Output:
	// RDMA_WRITE SUCCESS
	// RDMA_READ SUCCESS
	// hello, RDMA
}
