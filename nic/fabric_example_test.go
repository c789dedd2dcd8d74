package nic_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// Two endpoints on loopback: the initiator writes into the target's memory
// with remote CQ data, and both sides get a completion.
func ExampleEndpoint() {
	open := func() (*nic.Device, *nic.MR, *nic.Endpoint) {
		dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
		if err != nil {
			log.Fatal(err)
		}
		pd, err := dev.AllocPD()
		if err != nil {
			log.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, 4096), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
		if err != nil {
			log.Fatal(err)
		}
		ep, err := pd.NewEndpoint(nic.EndpointConfig{})
		if err != nil {
			log.Fatal(err)
		}
		return dev, m, ep
	}
	devA, mrA, a := open()
	defer devA.Close()
	devB, mrB, b := open()
	defer devB.Close()
	// Exchange QP numbers out of band and connect both QPs.
	if err := a.QP().Connect(devB.Addr(), b.QP().Num(), nic.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := b.QP().Connect(devA.Addr(), a.QP().Num(), nic.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}

	// Remote CQ data consumes a receive at the target: post one first.
	if err := b.Recv(nil, nil, "data slot"); err != nil {
		log.Fatal(err)
	}
	msg := copy(mrA.Bytes(), "hello, RDMA")
	err := a.WriteData(mrA.Bytes()[:msg], mrA, 42, mrB.Addr(), uint64(mrB.RKey()), "my write")
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c [1]nic.Completion
	if _, err := a.Wait(ctx, c[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c[0].Context, c[0].Flags, c[0].Len, c[0].Err)
	if _, err := b.Wait(ctx, c[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c[0].Context, c[0].Flags, c[0].Data, string(mrB.Bytes()[:c[0].Len]))
	// Output:
	// my write RMA|WRITE 11 <nil>
	// data slot RMA|REMOTE_WRITE|REMOTE_CQ_DATA 42 hello, RDMA
}
