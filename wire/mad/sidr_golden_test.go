package mad

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// udaddyTID is the transaction ID of the SIDR_REQ of
// testdata/udaddy_rxe.pcap and of the SIDR_REP that answers it.
const udaddyTID = 0x00000002d2af33af

// udaddyMADs holds the SIDR MADs of testdata/udaddy_rxe.pcap (udaddy
// -b/-s between two rxe guests of the lab, see udaddy_rxe.txt) by frame
// number. The SIDR_REQ's private data starts with rdma_cm's header from
// 10.77.0.12 port 0xcdef to 10.77.0.11, as softnic builds it; its reserved
// field is 0, and so are the SIDR_REP's (Linux 6.1 puts no vendor ID
// there without enhanced connection establishment).
func udaddyMADs() map[int]MADFields {
	req := MADFields{Header: CMHeader(AttrServiceIDResReq, udaddyTID)}
	req.SIDRREQ = SIDRREQFields{
		RequestID: 0xaf33afd2,
		PKey:      0xffff,
		ServiceID: RDMACMServiceID(PortSpaceUDP, 7174),
	}
	cma := NewCMAHeader(netip.MustParseAddrPort("10.77.0.12:52719"), netip.MustParseAddr("10.77.0.11"))
	CMAHeader(req.SIDRREQ.PrivateData[:CMAHeaderSize]).Encode(&cma)
	rep := MADFields{Header: CMHeader(AttrServiceIDResReqResp, udaddyTID)}
	rep.SIDRREP = SIDRREPFields{
		RequestID: 0xaf33afd2,
		Status:    SIDRSuccess,
		QPN:       0x11,
		ServiceID: RDMACMServiceID(PortSpaceUDP, 7174),
		QKey:      0x01234567,
	}
	return map[int]MADFields{1: req, 2: rep}
}

// TestGoldenSIDR decodes Linux's SIDR_REQ and SIDR_REP of udaddy_rxe.pcap,
// compares every field with what they are known to carry, and rebuilds
// each whole packet from its fields byte for byte. The datagrams udaddy
// sends after the resolution must go to the QPN and carry the Q_Key the
// SIDR_REP named (rdma_cm's RDMA_UDP_QKEY), from the client's QP of the
// same number: the capture ties the reply to its use.
func TestGoldenSIDR(t *testing.T) {
	path := "testdata/udaddy_rxe.pcap"
	want := udaddyMADs()
	seen, data := 0, 0
	for _, fr := range golden.Frames(t, path) {
		var p wire.Packet
		if err := p.Decode(fr.Payload); err != nil {
			t.Fatalf("frame %d: %v", fr.N, err)
		}
		if p.DETH == nil {
			t.Fatalf("frame %d: %s is not a UD packet", fr.N, AppendPacketSummary(nil, &p))
		}
		wantMAD, ok := want[fr.N]
		if !ok {
			rep := want[2].SIDRREP
			if p.BTH.DestQP() != rep.QPN || p.DETH.SrcQP() != rep.QPN || p.DETH.QKey() != rep.QKey {
				t.Errorf("frame %d: %s is not a datagram of udaddy's QPs with the SIDR_REP's Q_Key", fr.N, AppendPacketSummary(nil, &p))
			}
			data++
			continue
		}
		seen++
		checkGoldenMAD(t, fr, &p, &wantMAD)
	}
	if seen != len(want) || data != 20 {
		t.Errorf("%d SIDR MADs and %d datagrams in %s, want %d and 20", seen, data, path, len(want))
	}
}
