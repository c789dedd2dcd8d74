package udp_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/softnic/softnic/nic/udp"
)

// Three equal datagrams to ourselves: with GSO they leave in one send, with
// GRO they may arrive in one message; Segments walks them either way.
func Example() {
	c, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	out := []udp.Message{
		{Buf: []byte("one"), Addr: c.LocalAddr()},
		{Buf: []byte("two"), Addr: c.LocalAddr()},
		{Buf: []byte("six"), Addr: c.LocalAddr()},
	}
	if _, err := c.WriteBatch(out); err != nil {
		log.Fatal(err)
	}

	in := make([]udp.Message, udp.MaxBatch)
	for i := range in {
		in[i].Buf = make([]byte, 1<<16)
	}
	for got := 0; got < len(out); {
		n, err := c.ReadBatch(in)
		if err != nil {
			log.Fatal(err)
		}
		for i := range in[:n] {
			for d := range udp.Segments(&in[i]) {
				fmt.Printf("%s to %v\n", d, in[i].Local)
				got++
			}
		}
	}
	// Output:
	// one to 127.0.0.1
	// two to 127.0.0.1
	// six to 127.0.0.1
}
