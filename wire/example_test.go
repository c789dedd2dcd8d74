package wire_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/wirefmt"
)

// Encode an RDMA WRITE Only into a buffer, seal its ICRC, and decode it.
func ExampleFields_Encode() {
	f := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpRCWriteOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 0x2a},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x3bfa, DMALen: 5},
	}
	payload := []byte("hello")
	buf := make([]byte, f.Len(len(payload)))
	n, err := f.Encode(buf, payload)
	if err != nil {
		panic(err)
	}
	env := wire.Envelope{
		Src: netip.MustParseAddrPort("10.0.0.1:49152"),
		Dst: netip.MustParseAddrPort("10.0.0.2:4791"),
	}
	env.Seal(buf[:n])

	var p wire.Packet
	if err := p.Decode(buf[:n]); err != nil {
		panic(err)
	}
	fmt.Println(n, "bytes")
	fmt.Println(string(wirefmt.AppendSummary(nil, &p)))
	fmt.Printf("payload %q, pad %d\n", p.Payload, p.BTH.PadCount())
	// Output:
	// 40 bytes
	// RC RDMA Write Only qp=0x000011 psn=0x00002a ackreq=1 va=0x00007f0000001000 rkey=0x00003bfa dmalen=5 payload=5
	// payload "hello", pad 3
}

// Build the headers first and copy the payload straight into the packet.
func ExampleFields_EncodeHeaders() {
	f := wire.Fields{
		BTH:   wire.BTHFields{OpCode: wire.OpRCSendLastImm, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 7},
		ImmDT: 0xcafe,
	}
	buf := make([]byte, f.Len(8))
	off, err := f.EncodeHeaders(buf, 8)
	if err != nil {
		panic(err)
	}
	copy(buf[off:], "8 bytes!")
	var p wire.Packet
	fmt.Println(p.Decode(buf), string(wirefmt.AppendSummary(nil, &p)))
	// Output:
	// <nil> RC Send Last Immediate qp=0x000011 psn=0x000007 ackreq=1 imm=0x0000cafe payload=8
}

// Seal a packet's ICRC for the datagram it travels in, and check it on
// arrival: a changed byte is caught, a router's ECN mark is not.
func ExampleEnvelope_Check() {
	f := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xffff, DestQP: 0x11, PSN: 0x2a},
		AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditInvalid), MSN: 1},
	}
	pkt := make([]byte, f.Len(0))
	if _, err := f.Encode(pkt, nil); err != nil {
		panic(err)
	}
	// softnic sends from an unconnected UDP socket with DF: IPv4 ID 0.
	env := wire.Envelope{
		Src: netip.MustParseAddrPort("10.0.0.2:49152"),
		Dst: netip.MustParseAddrPort("10.0.0.1:4791"),
	}
	env.Seal(pkt)
	fmt.Println(env.Check(pkt))

	wire.BTH(pkt).SetBECN(true) // variant: masked by the ICRC
	fmt.Println(env.Check(pkt))

	wire.BTH(pkt).SetPSN(0x2b)
	fmt.Println(errors.Is(env.Check(pkt), wire.ErrBadICRC))
	// Output:
	// <nil>
	// <nil>
	// true
}

// PSNs compare across the 24-bit wrap.
func ExamplePSN() {
	last := wire.PSN(0xfffffe)
	next := last.Add(3)
	fmt.Println(next, next.After(last), next.Sub(last), next.InWindow(last, 4))
	// Output:
	// 0x000001 true 3 true
}

// Syndromes of the three kinds of acknowledgement.
func ExampleSyndrome() {
	for _, s := range []wire.Syndrome{
		wire.ACKSyndrome(wire.CreditInvalid),
		wire.RNRNakSyndrome(14),
		wire.NakSyndrome(wire.NakPSNSequenceError),
	} {
		fmt.Printf("%#02x %v\n", uint8(s), s)
	}
	fmt.Println(wire.RNRTimeout(14))
	// Output:
	// 0x1f ACK(credit=31)
	// 0x2e RNR NAK(timer=14,1280us)
	// 0x60 NAK(PSN sequence error)
	// 1.28ms
}

// A receiver reading from a UDP socket does not see the IPv4 identification
// rxe put on the datagram, and the ICRC covers it: RecoverIPID finds the
// identification that makes the ICRC right, and still rejects a corrupted
// packet (with 2^-16 odds of a miss instead of 2^-32).
func ExampleEnvelope_RecoverIPID() {
	f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCSendOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 7}}
	pkt := make([]byte, f.Len(4))
	if _, err := f.Encode(pkt, []byte("ping")); err != nil {
		panic(err)
	}
	sender := wire.Envelope{
		Src:  netip.MustParseAddrPort("10.77.0.12:49362"),
		Dst:  netip.MustParseAddrPort("10.77.0.11:4791"),
		IPID: 0x09ab, // as rxe numbers its datagrams
	}
	sender.Seal(pkt)

	receiver := sender
	receiver.IPID = 0 // all a UDP socket can say
	fmt.Println(receiver.Check(pkt))
	id, ok := receiver.RecoverIPID(pkt)
	fmt.Printf("%#04x %v\n", id, ok)

	pkt[wire.BTHSize] ^= 0x01 // "ping" becomes "qing"
	fmt.Println(receiver.RecoverIPID(pkt))
	// Output:
	// wire: bad ICRC
	// 0x09ab true
	// 0 false
}
