package nic_test

import (
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

// Send a datagram to a multicast group, as mckey does: a UD QP attached
// to the group receives what any UD QP sends to the group's address with
// DestQPN MulticastQPN and the QP's Q_Key, here a QP of the same device
// (the host loops its multicast back to itself).
func ExampleQP_AttachMulticast() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		log.Fatal(err)
	}
	buf, err := pd.RegMR(make([]byte, 4096), mr.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	newQP := func() (*nic.QP, *nic.CQ) {
		cq, err := dev.CreateCQ(16)
		if err != nil {
			log.Fatal(err)
		}
		q, err := pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: cq})
		if err != nil {
			log.Fatal(err)
		}
		if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{QKey: nic.RDMAUDPQKey}); err != nil {
			log.Fatal(err)
		}
		return q, cq
	}
	member, mcq := newQP()
	sender, scq := newQP()

	// rdma_cm gives a group as the IPv4-mapped GID of its address.
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	if err := member.AttachMulticast(group); err != nil {
		log.Fatal(err)
	}
	defer member.DetachMulticast(group)
	if err := member.PostRecv(&verbs.RecvWR{SGL: []verbs.SGE{buf.SGE(0, wire.GRHSize+64)}}); err != nil {
		log.Fatal(err)
	}
	copy(buf.Bytes()[1024:], "to all")
	// The group at the device's port: 4791 but for a device that, as
	// this one, listens elsewhere.
	to := netip.AddrPortFrom(group.Unmap(), dev.Addr().Port())
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.SGE(1024, 6)}, Flags: verbs.Signaled,
		Dest: to, DestQPN: nic.MulticastQPN, QKey: nic.RDMAUDPQKey}
	if err := sender.PostSend(&wr); err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	if _, err := scq.Wait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	if _, err := mcq.Wait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, %q from QP %v\n", wc[0].Status, buf.Bytes()[wire.GRHSize:wc[0].ByteLen], wc[0].SrcQPN == sender.Num())
	// Output: SUCCESS, "to all" from QP true
}
