package mad

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

func TestCMStrings(t *testing.T) {
	tests := []struct {
		got  fmt.Stringer
		want string
	}{
		{RejectConsumer, "consumer reject"},
		{RejectInvalidServiceID, "invalid service ID"},
		{RejectTimeout, "timeout"},
		{RejectInvalidClassVersion, "unsupported class version"},
		{RejectVendorOptionNotSupported, "vendor option not supported"},
		{RejectReason(0), "RejectReason(0)"},
		{RejectReason(34), "RejectReason(34)"},
		{RejectReason(0xffff), "RejectReason(65535)"},
		{AttrConnectRequest, "ConnectRequest"},
		{AttrMsgRcptAck, "MsgRcptAck"},
		{AttrConnectReject, "ConnectReject"},
		{AttrConnectReply, "ConnectReply"},
		{AttrReadyToUse, "ReadyToUse"},
		{AttrDisconnectRequest, "DisconnectRequest"},
		{AttrDisconnectReply, "DisconnectReply"},
		{AttrServiceIDResReq, "ServiceIDResReq"},
		{AttrServiceIDResReqResp, "ServiceIDResReqResp"},
		{AttrAlternatePathResponse, "AlternatePathResponse"},
		{SIDRSuccess, "success"},
		{SIDRUnsupported, "service ID not supported"},
		{SIDRReject, "rejected by the service"},
		{SIDRNoQP, "no QP available"},
		{SIDRRedirect, "redirect"},
		{SIDRUnsupportedVersion, "unsupported class version"},
		{SIDRStatus(6), "SIDRStatus(6)"},
		{AttrClassPortInfo, "ClassPortInfo"},
		{AttrID(0x001b), "AttrID(0x001b)"},
		{AttrID(0x000f), "AttrID(0x000f)"},
		{MgmtClassCM, "CM"},
		{MgmtClass(0x99), "MgmtClass(0x99)"},
		{MethodSend, "Send"},
		{MethodGetResp, "GetResp"},
		{MADMethod(0x13), "Method(0x13)"},
		{CMMessageREQ, "REQ"},
		{CMMessageREP, "REP"},
		{CMMessageOther, "other"},
		{CMMessage(3), "CMMessage(3)"},
		{wire.MTU256, "256"},
		{wire.MTU1024, "1024"},
		{wire.MTU4096, "4096"},
		{wire.MTU(0), "MTU(0)"},
		{wire.MTU(6), "MTU(6)"},
		{PortSpaceTCP, "TCP"},
		{PortSpaceUDP, "UDP"},
		{PortSpaceIPoIB, "IPoIB"},
		{PortSpaceIB, "IB"},
		{PortSpace(7), "PortSpace(0x0007)"},
		{ServiceID(0x0000000001061c06), "0x0000000001061c06"},
		{wire.GIDFromAddr(netip.MustParseAddr("10.77.0.12")), "10.77.0.12"},
		{wire.GIDFromAddr(netip.MustParseAddr("fe80::5054:ff:fe77:c")), "fe80::5054:ff:fe77:c"},
		{wire.GID{}, "::"},
	}
	for _, tt := range tests {
		if got := tt.got.String(); got != tt.want {
			t.Errorf("%T(%#v).String() = %q, want %q", tt.got, tt.got, got, tt.want)
		}
	}
}

func TestCMHelpers(t *testing.T) {
	if !MethodGetResp.IsResponse() || MethodSend.IsResponse() {
		t.Error("IsResponse does not read the R bit")
	}
	g := wire.GIDFromAddr(netip.MustParseAddr("10.77.0.12"))
	if want := unhex(t, "00000000000000000000ffff0a4d000c"); string(g[:]) != string(want) {
		t.Errorf("GID of 10.77.0.12 = %x, want the IPv4-mapped %x", g, want)
	}
	if a := g.Addr(); a != netip.MustParseAddr("10.77.0.12") {
		t.Errorf("GID.Addr() = %v, want the IPv4 address", a)
	}
	for _, tt := range []struct {
		n    int
		want wire.MTU
		ok   bool
	}{{256, wire.MTU256, true}, {512, wire.MTU512, true}, {1024, wire.MTU1024, true}, {2048, wire.MTU2048, true}, {4096, wire.MTU4096, true},
		{1500, 0, false}, {128, 0, false}, {8192, 0, false}, {0, 0, false}} {
		if got, ok := wire.MTUFromBytes(tt.n); got != tt.want || ok != tt.ok {
			t.Errorf("MTUFromBytes(%d) = %v, %v; want %v, %v", tt.n, got, ok, tt.want, tt.ok)
		}
		if tt.ok && tt.want.Bytes() != tt.n {
			t.Errorf("%v.Bytes() = %d", tt.want, tt.want.Bytes())
		}
	}
}

// TestCMSummary checks the one-line description of UD packets carrying CM
// MADs: the golden ones from rping.pcap, and softnic-built MRA and REJ.
func TestCMSummary(t *testing.T) {
	const ud = "UD Send Only qp=0x000001 "
	want := map[int]string{
		1:  ud + "psn=0x000012 ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM ConnectRequest comm_id=0x5818c37c qpn=0x00006b psn=0xdc7d75 service_id=0x0000000001061c06",
		2:  ud + "psn=0x00000c ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM ConnectReply comm_id=0x24ce6050 remote_comm_id=0x5818c37c qpn=0x00006b psn=0xb96548",
		3:  ud + "psn=0x000013 ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM ReadyToUse comm_id=0x5818c37c remote_comm_id=0x24ce6050",
		40: ud + "psn=0x000014 ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM DisconnectRequest comm_id=0x5818c37c remote_comm_id=0x24ce6050 qpn=0x00006b",
		41: ud + "psn=0x00000d ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM DisconnectReply comm_id=0x24ce6050 remote_comm_id=0x5818c37c",
	}
	var p wire.Packet
	for _, fr := range golden.Frames(t, golden.Path(t, "rping.pcap")) {
		if err := p.Decode(fr.Payload); err != nil {
			t.Fatal(err)
		}
		if got := string(AppendPacketSummary(nil, &p)); want[fr.N] != "" && got != want[fr.N] {
			t.Errorf("frame %d:\n got %s\nwant %s", fr.N, got, want[fr.N])
		} else if want[fr.N] == "" && strings.Contains(got, " CM ") {
			t.Errorf("frame %d is no MAD: %s", fr.N, got)
		}
	}

	tests := []struct {
		name  string
		mad   MADFields
		qp    uint32
		pad   int // bytes added to the payload
		wantT string
	}{
		{"MRA", sampleMAD(AttrMsgRcptAck), wire.GSIQPN, 0,
			" CM MsgRcptAck comm_id=0x11223344 remote_comm_id=0x55667788 mraed=REP service_timeout=19"},
		{"REJ", sampleMAD(AttrConnectReject), wire.GSIQPN, 0,
			" CM ConnectReject comm_id=0x11223344 remote_comm_id=0x55667788 rejected=other reason=28(consumer reject)"},
		{"SIDR_REQ", sampleMAD(AttrServiceIDResReq), wire.GSIQPN, 0,
			" CM ServiceIDResReq request_id=0x11223344 service_id=0x0000000001111c06"},
		{"SIDR_REP", sampleMAD(AttrServiceIDResReqResp), wire.GSIQPN, 0,
			" CM ServiceIDResReqResp request_id=0x11223344 status=2(rejected by the service) qpn=0xabcdef qkey=0x01234567"},
		{"a MAD to another QP is data", sampleMAD(AttrConnectReject), 2, 0, ""},
		{"257 bytes to QP1 are not a MAD", sampleMAD(AttrConnectReject), wire.GSIQPN, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := append(encodeMAD(t, &tt.mad), make([]byte, tt.pad)...)
			pkt := encodeUD(t, tt.qp, payload)
			if err := p.Decode(pkt); err != nil {
				t.Fatal(err)
			}
			got := string(AppendPacketSummary(nil, &p))
			_, cm, _ := strings.Cut(got, "payload=")
			_, cm, _ = strings.Cut(cm, " ")
			if tt.wantT != "" {
				cm = " " + cm
			}
			if cm != tt.wantT {
				t.Errorf("summary %q\nends in %q, want %q", got, cm, tt.wantT)
			}
		})
	}
}

// encodeUD returns a UD SEND Only from QP1 to qp carrying payload, as
// Linux sends MADs.
func encodeUD(t testing.TB, qp uint32, payload []byte) []byte {
	t.Helper()
	f := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpUDSendOnly, PKey: 0xffff, DestQP: qp, AckReq: true, PSN: 0x12},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN},
	}
	b := make([]byte, f.Len(len(payload)))
	if _, err := f.Encode(b, payload); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCMVerbose checks every line AppendVerbose adds for a CM MAD: the
// golden REQ, whose rdma_cm header gets a line, and one of each message
// with all fields set.
func TestCMVerbose(t *testing.T) {
	frames := golden.Frames(t, golden.Path(t, "rping.pcap"))
	var p wire.Packet
	if err := p.Decode(frames[0].Payload); err != nil {
		t.Fatal(err)
	}
	got := string(AppendPacketVerbose(nil, &p))
	want := `  BTH opcode=0x64 se=0 m=0 padcnt=0 tver=0 pkey=0xffff fecn=0 becn=0 resv6a=0x00 destqp=0x000001 ackreq=1 resv7=0x00 psn=0x000012
  DETH qkey=0x80010000 resv8=0x00 srcqp=0x000001
  MAD base=1 class=0x07 version=2 method=0x03 status=0x0000 specific=0x0000 tid=0x000000027cc31858 attr=0x0010 resv=0x0000 modifier=0x00000000
  REQ comm_id=0x5818c37c resv32a=0x00000000 service_id=0x0000000001061c06 ca_guid=0x505400fffe77000c resv32b=0x00000000 qkey=0x00000000 qpn=0x00006b resp_res=1 eecn=0x000000 init_depth=1 remote_eecn=0x000000 remote_cm_timeout=20 tst=0 e2e_fc=0 psn=0xdc7d75 local_cm_timeout=20 retry=7 pkey=0xffff mtu=1024 rdc=0 rnr_retry=7 max_cm_retries=15 srq=0 ext=0
  REQ primary lid=0xffff->0xffff gid=10.77.0.12->10.77.0.11 flow_label=0x375f8 resv6=0x00 rate=0 tclass=0x00 hop_limit=64 sl=0 subnet_local=0 resv3a=0x0 ack_timeout=19 resv3b=0x0
  REQ alternate lid=0x0000->0x0000 gid=::->:: flow_label=0x00000 resv6=0x00 rate=0 tclass=0x00 hop_limit=0 sl=0 subnet_local=0 resv3a=0x0 ack_timeout=0 resv3b=0x0
  rdma_cm ip=4 src=10.77.0.12:40910 dst=10.77.0.11 TCP port=7174
  REQ private[92]=00409fce0000000000000000000000000a4d000c0000000000000000000000000a4d000b
  payload=256 pad=0 icrc=0xd84ece30
`
	if got != want {
		t.Errorf("golden REQ:\n%s\nwant\n%s", got, want)
	}

	sampleLines := map[AttrID]string{
		AttrMsgRcptAck:          "  MRA comm_id=0x11223344 remote_comm_id=0x55667788 mraed=REP resv6=0x15 service_timeout=19 resv3=0x6 private[222]=8182",
		AttrConnectReject:       "  REJ comm_id=0x11223344 remote_comm_id=0x55667788 rejected=other resv6=0x2b ari_len=72 resv1=0x1 reason=28(consumer reject) ari[72]=0102",
		AttrConnectReply:        "  REP comm_id=0x11223344 remote_comm_id=0x55667788 qkey=0x12345678 qpn=0xabcdef resv8a=0x11 eecn=0x654321 resv8b=0x22 psn=0xfedcba resv8c=0x33 resp_res=16 init_depth=32 target_ack_delay=21 failover=2 e2e_fc=1 rnr_retry=6 srq=1 resv4=0xa ca_guid=0x0002c90300aabbcc private[196]=8384",
		AttrReadyToUse:          "  RTU comm_id=0x11223344 remote_comm_id=0x55667788 private[224]=8485",
		AttrDisconnectRequest:   "  DREQ comm_id=0x11223344 remote_comm_id=0x55667788 qpn=0xabcdef resv8=0x44 private[220]=8586",
		AttrDisconnectReply:     "  DREP comm_id=0x11223344 remote_comm_id=0x55667788 private[224]=8687",
		AttrServiceIDResReq:     "  SIDR_REQ request_id=0x11223344 pkey=0x8001 resv16=0x5566 service_id=0x0000000001111c06\n  SIDR_REQ private[216]=8788",
		AttrServiceIDResReqResp: "  SIDR_REP request_id=0x11223344 status=2(rejected by the service) add_info_len=72 resv16=0x5566 qpn=0xabcdef resv8=0x77 service_id=0x0000000001111c06 qkey=0x01234567 class_port_info[72]=0203",

		AttrConnectRequest: "  REQ comm_id=0x11223344 resv32a=0x55667788 service_id=0x0000000001061c06 ca_guid=0x0002c90300aabbcc resv32b=0x99aabbcc qkey=0x12345678 qpn=0xabcdef resp_res=16 eecn=0x654321 init_depth=32 remote_eecn=0x123456 remote_cm_timeout=23 tst=1 e2e_fc=1 psn=0xfedcba local_cm_timeout=22 retry=6 pkey=0x8001 mtu=4096 rdc=1 rnr_retry=5 max_cm_retries=14 srq=1 ext=1",
	}
	// A SIDR_REQ as rdma_cm sends it: its rdma_cm header gets a line.
	req := MADFields{Header: CMHeader(AttrServiceIDResReq, 1)}
	req.SIDRREQ = SIDRREQFields{RequestID: 7, PKey: 0xffff, ServiceID: RDMACMServiceID(PortSpaceUDP, 7174)}
	cma := NewCMAHeader(netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddr("10.0.0.2"))
	CMAHeader(req.SIDRREQ.PrivateData[:CMAHeaderSize]).Encode(&cma)
	var sidr MAD
	if err := sidr.Decode(encodeMAD(t, &req)); err != nil {
		t.Fatal(err)
	}
	if got, want := string(sidr.AppendVerbose(nil)), "  rdma_cm ip=4 src=10.0.0.1:40000 dst=10.0.0.2 UDP port=7174\n"; !strings.Contains(got, want) {
		t.Errorf("SIDR_REQ:\n%s\nwant a line\n%s", got, want)
	}

	for attr, line := range sampleLines {
		f := sampleMAD(attr)
		var m MAD
		if err := m.Decode(encodeMAD(t, &f)); err != nil {
			t.Fatal(err)
		}
		got := string(m.AppendVerbose(nil))
		header := "  MAD base=1 class=0x07 version=2 method=0x03 status=0x0102 specific=0x0304 tid=0x0123456789abcdef attr=" +
			string(wire.AppendHex(nil, uint64(attr), 4)) + " resv=0x0506 modifier=0x0708090a\n"
		if !strings.HasPrefix(got, header+line) || !strings.HasSuffix(got, "\n") {
			t.Errorf("%v:\n%s\nwant it to start\n%s%s", attr, got, header, line)
		}
	}
}
