package nic_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Find a peer's UD QP the way rdma_cm's UDP port space does (udaddy): the
// server listens on a port with ListenUD and answers each resolution with
// its UD QP; the client resolves the server's address and port to that QP
// and its Q_Key, and sends to it.
func ExampleDevice_Resolve() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func() (*nic.Device, *nic.QP, *nic.MR, *nic.CQ) {
		dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
		if err != nil {
			log.Fatal(err)
		}
		pd, err := dev.AllocPD()
		if err != nil {
			log.Fatal(err)
		}
		cq, err := dev.CreateCQ(16)
		if err != nil {
			log.Fatal(err)
		}
		buf, err := pd.RegMR(make([]byte, 4096), mr.LocalWrite)
		if err != nil {
			log.Fatal(err)
		}
		q, err := pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: cq})
		if err != nil {
			log.Fatal(err)
		}
		// rdma_cm's UD QPs take its Q_Key.
		if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{QKey: nic.RDMAUDPQKey}); err != nil {
			log.Fatal(err)
		}
		return dev, q, buf, cq
	}
	server, sq, sbuf, scq := open()
	defer server.Close()
	client, cqp, cbuf, _ := open()
	defer client.Close()

	l, err := server.ListenUD(7174, nic.ListenUDOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// A UD receive starts with the 40 bytes of the GRH.
	if err := sq.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{sbuf.SGE(0, wire.GRHSize+64)}}); err != nil {
		log.Fatal(err)
	}
	go func() {
		req, err := l.AcceptRequest(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := req.AcceptUD(sq, []byte("welcome")); err != nil {
			log.Fatal(err)
		}
	}()

	peer, err := client.Resolve(ctx, server.Addr(), 7174, nic.ResolveOptions{PrivateData: []byte("hello")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client got %q, QP of the server: %v, Q_Key %#x\n",
		bytes.TrimRight(peer.PrivateData, "\x00"), peer.QPN == sq.Num(), peer.QKey)

	copy(cbuf.Bytes(), "ping")
	if err := cqp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{cbuf.SGE(0, 4)},
		Dest: peer.Addr, DestQPN: peer.QPN, QKey: peer.QKey}); err != nil {
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	if _, err := scq.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server received %q from QP %v\n", sbuf.Bytes()[wire.GRHSize:wc[0].ByteLen], wc[0].SrcQPN == cqp.Num())
	// Output:
	// client got "welcome", QP of the server: true, Q_Key 0x1234567
	// server received "ping" from QP true
}
