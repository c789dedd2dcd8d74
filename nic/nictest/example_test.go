package nictest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// A pair of devices with connected QPs: A writes into B's region. In a
// test, nictest.NewPair(t, nil) does the same and closes the pair when
// the test ends.
func ExampleStartPair() {
	p, err := nictest.StartPair(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	copy(p.A.MR.Bytes(), "hello, B")
	if err := p.A.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{p.A.MR.SGE(0, 8)},
		RemoteAddr: p.B.MR.Addr(), RKey: p.B.MR.RKey()}); err != nil {
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	if _, err := p.A.CQ.Wait(context.Background(), wc[:]); err != nil {
		log.Fatal(err)
	}
	p.B.QP.Status() // orders the device's writes before our read
	fmt.Println(wc[0].Status, string(p.B.MR.Bytes()[:8]))
	// Output: SUCCESS hello, B
}

// Faults switched on while a test runs: A loses the Middle packet of its
// next WRITE toward B once. B sees the Last out of sequence and NAKs it,
// A sends the Middle again, and the recorder shows both.
func ExampleFaults() {
	p, err := nictest.StartPair(&nictest.Options{Seed: 1, Config: nic.Config{MTU: 1024}})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	drop := p.A.Faults.Add(netem.Rule{Action: netem.ActionDrop, OpCodes: []wire.OpCode{wire.OpRCWriteMiddle}, QP: p.B.QP.Num()})
	defer drop.Off()
	if err := p.A.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{p.A.MR.SGE(0, 3000)},
		RemoteAddr: p.B.MR.Addr(), RKey: p.B.MR.RKey()}); err != nil {
		log.Fatal(err)
	}
	var wc [1]verbs.WC
	if _, err := p.A.CQ.Wait(context.Background(), wc[:]); err != nil {
		log.Fatal(err)
	}
	fmt.Println("WRITE:", wc[0].Status, "dropped:", drop.Hits())
	for _, pk := range p.Recorder.Find(func(pk *nictest.Packet) bool { return nictest.Sent(pk) && pk.IsNAK(-1) }) {
		fmt.Println(pk.Device, "sent", pk.Syndrome)
	}
	for _, pk := range p.Recorder.Retransmitted() {
		fmt.Printf("%s sent packet %d of the WRITE again: %v\n", pk.Device, pk.PSN.Sub(p.A.QP.Attr().SQPSN)+1, pk.OpCode)
	}
	// Output:
	// WRITE: SUCCESS dropped: 1
	// B sent NAK(PSN sequence error)
	// A sent packet 2 of the WRITE again: RC RDMA Write Middle
	// A sent packet 3 of the WRITE again: RC RDMA Write Last
}
