package fabric_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/fabric"
)

// Two endpoints on loopback: the initiator writes into the target's memory
// with remote CQ data, and both sides get a completion.
func ExampleEndpoint() {
	open := func() (*nic.Device, *nic.MR, *fabric.Endpoint) {
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
		ep, err := fabric.NewEndpoint(pd, fabric.EndpointConfig{})
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
	var c [1]fabric.Completion
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

// Register three buffers as one region with an application-chosen key, as
// fi_mr_regv does: a peer sees them as one contiguous range starting at 0
// (scalable mr_mode), and the key it uses is the one requested.
func ExampleDomain_Regv() {
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	d, err := fabric.OpenDomain(dev, fabric.DomainConfig{Cache: &mr.CacheConfig{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	iov := [][]byte{[]byte("abc"), []byte("defg"), []byte("hij")}
	m, err := d.Regv(iov, fabric.FIRemoteRead, 0, 0xC0DE, 0, "my context")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()

	// What a peer's RDMA READ of 6 bytes at offset 2 finds.
	s, err := dev.Memory().Remote(uint32(m.Key()), 2, 6, mr.RemoteRead, mr.Requester{PD: d.PD().Handle()})
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([]byte, 6)
	s.ReadAt(got, 0)
	s.Release()
	fmt.Printf("key %#x, %d bytes, read %q\n", m.Key(), m.Region().Len(), got)

	// The same key cannot be had twice.
	_, err = d.Reg(make([]byte, 8), fabric.FIRemoteRead, 0, 0xC0DE, 0, nil)
	fmt.Println(errors.Is(err, fabric.ErrNoKey))
	// Output:
	// key 0xc0de, 10 bytes, read "cdefgh"
	// true
}
