package mad_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// Build the ConnectRequest rdma_cm sends to connect to TCP port 7471 of
// 10.0.0.2, carry it to QP1 in a UD packet, and read it back.
func ExampleMADFields_Encode() {
	src := netip.MustParseAddrPort("10.0.0.1:40000") // the rdma_cm source port
	dst := netip.MustParseAddr("10.0.0.2")
	req := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, 0x2a)}
	req.REQ = mad.REQFields{
		LocalCommID: 0x1234, ServiceID: mad.RDMACMServiceID(mad.PortSpaceTCP, 7471),
		LocalQPN: 0x11, StartingPSN: 0xabcdef, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15,
		RetryCount: 7, RNRRetryCount: 7, PKey: 0xffff, PathMTU: wire.MTU1024,
		PrimaryPath: mad.CMPathFields{
			LocalLID: 0xffff, RemoteLID: 0xffff, // no LIDs on RoCE
			LocalGID: wire.GIDFromAddr(src.Addr()), RemoteGID: wire.GIDFromAddr(dst),
			HopLimit: 64, LocalACKTimeout: 19,
		},
	}
	cma := mad.NewCMAHeader(src, dst)
	mad.CMAHeader(req.REQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
	copy(req.REQ.PrivateData[mad.CMAHeaderSize:], "hello") // the application's private data

	ud := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpUDSendOnly, PKey: 0xffff, DestQP: wire.GSIQPN, AckReq: true},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN},
	}
	pkt := make([]byte, ud.Len(mad.MADSize))
	off, err := ud.EncodeHeaders(pkt, mad.MADSize)
	if err != nil {
		panic(err)
	}
	if _, err := req.Encode(pkt[off:]); err != nil {
		panic(err)
	}
	env := wire.Envelope{Src: netip.AddrPortFrom(src.Addr(), 49152), Dst: netip.AddrPortFrom(dst, wire.UDPPort)}
	env.Seal(pkt)

	var p wire.Packet
	var m mad.MAD
	if err := p.Decode(pkt); err != nil {
		panic(err)
	}
	if err := m.Decode(p.Payload); err != nil {
		panic(err)
	}
	fmt.Println(string(mad.AppendPacketSummary(nil, &p)))
	h, err := mad.DecodeCMAHeader(m.REQ.PrivateData())
	if err != nil {
		panic(err)
	}
	ps, port, _ := m.REQ.ServiceID().RDMACM()
	fmt.Printf("%v -> %v %v port %d, private data %q\n", h.Src(), h.Dst(), ps, port,
		m.REQ.PrivateData()[mad.CMAHeaderSize:][:5])
	// Output:
	// UD Send Only qp=0x000001 psn=0x000000 ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM ConnectRequest comm_id=0x00001234 qpn=0x000011 psn=0xabcdef service_id=0x0000000001061d2f
	// 10.0.0.1:40000 -> 10.0.0.2 TCP port 7471, private data "hello"
}

// A listener that finds nothing on the port a REQ names rejects it, as
// Linux does, with reason "invalid service ID".
func ExampleREJ() {
	rej := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectReject, 0x2a)}
	rej.REJ = mad.REJFields{
		LocalCommID:     0x5678,
		RemoteCommID:    0x1234, // the REQ's local communication ID
		MessageRejected: mad.CMMessageREQ,
		Reason:          mad.RejectInvalidServiceID,
	}
	buf := make([]byte, mad.MADSize)
	if _, err := rej.Encode(buf); err != nil {
		panic(err)
	}

	var m mad.MAD
	if err := m.Decode(buf); err != nil {
		panic(err)
	}
	fmt.Println(string(m.AppendSummary(nil)))
	fmt.Println(m.REJ.Reason())

	buf[17] = 0x19 // attribute ID 0x0019, LoadAlternatePath: not implemented
	fmt.Println(errors.Is(m.Decode(buf), mad.ErrBadAttr))
	// Output:
	// CM ConnectReject comm_id=0x00005678 remote_comm_id=0x00001234 rejected=REQ reason=8(invalid service ID)
	// invalid service ID
	// true
}
