package nic_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softnic/softnic/nic"
)

// openExampleDevice opens a device on loopback with a PD and a CQ.
func openExampleDevice() (*nic.Device, *nic.PD, *nic.CQ) {
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		log.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		log.Fatal(err)
	}
	return dev, pd, cq
}

// Connect two devices the way rdma_cm applications do: the server listens
// on an rdma_cm port and accepts, the client dials the server's address
// and port; each side reads the other's private data, and both QPs end up
// in RTS, connected to each other. Closing one side disconnects the other.
func ExampleDevice_Dial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, spd, scq := openExampleDevice()
	defer server.Close()
	client, cpd, ccq := openExampleDevice()
	defer client.Close()

	l, err := server.Listen(7471, nic.ListenOptions{PD: spd, QP: nic.QPConfig{SendCQ: scq}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *nic.Conn)
	go func() {
		req, err := l.AcceptRequest(ctx)
		if err != nil {
			log.Fatal(err)
		}
		// Private data is a fixed-size field: trim the padding.
		fmt.Printf("server got %q\n", bytes.TrimRight(req.PrivateData(), "\x00"))
		conn, err := req.Accept(nic.AcceptOptions{PrivateData: []byte("welcome")})
		if err != nil {
			log.Fatal(err)
		}
		accepted <- conn
	}()

	conn, err := client.Dial(ctx, server.Addr(), 7471, nic.DialOptions{
		PD: cpd, QP: nic.QPConfig{SendCQ: ccq}, PrivateData: []byte("hello"),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client got %q\n", bytes.TrimRight(conn.PrivateData(), "\x00"))
	sconn := <-accepted
	fmt.Println(conn.QP().Attr().State, sconn.QP().Attr().State,
		conn.QP().Attr().DestQPN == sconn.QP().Num() && sconn.QP().Attr().DestQPN == conn.QP().Num())

	conn.Close()
	<-sconn.Done()
	fmt.Println("server side:", errors.Is(sconn.Err(), nic.ErrConnReset))
	sconn.Close()
	// Output:
	// server got "hello"
	// client got "welcome"
	// RTS RTS true
	// server side: true
}

// Listen and dial in rdma_cm's IB port space (RDMA_PS_IB) rather than its
// TCP one: the same connection, with the IB port space's service ID. A
// dial of the same port number in the TCP port space finds nobody.
func ExamplePortSpace() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, spd, scq := openExampleDevice()
	defer server.Close()
	client, cpd, ccq := openExampleDevice()
	defer client.Close()

	l, err := server.Listen(7471, nic.ListenOptions{PD: spd, QP: nic.QPConfig{SendCQ: scq}, PortSpace: nic.PortSpaceIB})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	opts := nic.DialOptions{PD: cpd, QP: nic.QPConfig{SendCQ: ccq}}
	_, err = client.Dial(ctx, server.Addr(), 7471, opts)
	fmt.Println("TCP port 7471:", errors.Is(err, nic.ErrConnRefused))

	accepted := make(chan *nic.Conn)
	go func() {
		conn, err := l.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- conn
	}()
	opts.PortSpace = nic.PortSpaceIB
	conn, err := client.Dial(ctx, server.Addr(), 7471, opts)
	if err != nil {
		log.Fatal(err)
	}
	sconn := <-accepted
	fmt.Println("IB port 7471:", conn.QP().Attr().State, sconn.QP().Attr().State)
	conn.Close()
	sconn.Close()
	// Output:
	// TCP port 7471: true
	// IB port 7471: RTS RTS
}

// Connect QPs their owners move to RTR and RTS themselves, as rping -q
// does with rdma_init_qp_attr: the acceptor connects its QP with the
// request's Params, the dialer its own with the Params of the REP, and the
// dialer's Establish sends the RTU that establishes the acceptor's side.
func ExampleConn_Establish() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, spd, scq := openExampleDevice()
	defer server.Close()
	client, cpd, ccq := openExampleDevice()
	defer client.Close()
	newQP := func(pd *nic.PD, cq *nic.CQ) *nic.QP {
		q, err := pd.CreateQP(nic.QPConfig{SendCQ: cq})
		if err != nil {
			log.Fatal(err)
		}
		return q
	}
	sq, cq := newQP(spd, scq), newQP(cpd, ccq)
	defer sq.Destroy()
	defer cq.Destroy()

	l, err := server.Listen(7471, nic.ListenOptions{PD: spd, QP: nic.QPConfig{SendCQ: scq}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *nic.Conn)
	go func() {
		req, err := l.AcceptRequest(ctx)
		if err != nil {
			log.Fatal(err)
		}
		p := req.Params()
		if err := sq.Connect(p.Remote, p.RemoteQPN, p.Options); err != nil {
			log.Fatal(err)
		}
		conn, err := req.Accept(nic.AcceptOptions{UseQP: sq, SelfConnect: true})
		if err != nil {
			log.Fatal(err)
		}
		accepted <- conn
	}()

	conn, err := client.Dial(ctx, server.Addr(), 7471, nic.DialOptions{PD: cpd, UseQP: cq, SelfConnect: true})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	p := conn.Params()
	fmt.Println("at the REP:", cq.Attr().State, p.RemoteQPN == sq.Num())
	if err := cq.Connect(p.Remote, p.RemoteQPN, p.Options); err != nil {
		log.Fatal(err)
	}
	if err := conn.Establish(); err != nil {
		log.Fatal(err)
	}
	sconn := <-accepted
	defer sconn.Close()
	fmt.Println("established:", cq.Attr().State, sq.Attr().State)
	// Output:
	// at the REP: RESET true
	// established: RTS RTS
}

// Hold a port before taking connections on it, as an rdma_cm server that
// binds to port 0, sends rdma_get_src_port's answer to its client and only
// then calls rdma_listen: until Open, a connection to the port is refused
// as one to a port nobody listens on.
func ExampleListener_Open() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, spd, scq := openExampleDevice()
	defer server.Close()
	client, cpd, ccq := openExampleDevice()
	defer client.Close()

	l, err := server.Listen(0, nic.ListenOptions{PD: spd, QP: nic.QPConfig{SendCQ: scq}, Held: true})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	port := l.Port() // a free port, held from now on
	opts := nic.DialOptions{PD: cpd, QP: nic.QPConfig{SendCQ: ccq}}
	_, err = client.Dial(ctx, server.Addr(), port, opts)
	fmt.Println("held:", errors.Is(err, nic.ErrConnRefused))

	if err := l.Open(16); err != nil {
		log.Fatal(err)
	}
	accepted := make(chan *nic.Conn)
	go func() {
		conn, err := l.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- conn
	}()
	conn, err := client.Dial(ctx, server.Addr(), port, opts)
	if err != nil {
		log.Fatal(err)
	}
	sconn := <-accepted
	fmt.Println("open:", conn.QP().Attr().State, sconn.QP().Attr().State)
	conn.Close()
	sconn.Close()
	// Output:
	// held: true
	// open: RTS RTS
}
