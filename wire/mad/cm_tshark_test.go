package mad

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// cmTsharkFields are the fields TestTsharkCM asks tshark for: the MAD
// header, and every field of the CM messages Wireshark 4.0 dissects.
var cmTsharkFields = []string{
	"_ws.col.Info", "_ws.malformed", "_ws.expert.severity", "infiniband.invariant.crc",
	"infiniband.mad.baseversion", "infiniband.mad.mgmtclass", "infiniband.mad.classversion",
	"infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.classspecific",
	"infiniband.mad.transactionid", "infiniband.mad.attributeid", "infiniband.mad.attributemodifier",
	"infiniband.mad.data",
	// REQ
	"infiniband.cm.req", "infiniband.cm.req.serviceid", "infiniband.cm.req.serviceid.protocol",
	"infiniband.cm.req.serviceid.dport", "infiniband.cm.req.localcaguid", "infiniband.cm.req.localqkey",
	"infiniband.cm.req.localqpn", "infiniband.cm.req.responderres", "infiniband.cm.req.localeecn",
	"infiniband.cm.req.initdepth", "infiniband.cm.req.remoteeecn", "infiniband.cm.req.remoteresptout",
	"infiniband.cm.req.transpsvctype", "infiniband.cm.req.e2eflowctrl", "infiniband.cm.req.startpsn",
	"infiniband.cm.req.localresptout", "infiniband.cm.req.retrcount", "infiniband.cm.req.pkey",
	"infiniband.cm.req.pppmtu", "infiniband.cm.req.rdcexist", "infiniband.cm.req.rnrretrcount",
	"infiniband.cm.req.maxcmretr", "infiniband.cm.req.srq", "infiniband.cm.req.ext_transport",
	"infiniband.cm.req.prim_locallid", "infiniband.cm.req.prim_remotelid",
	"infiniband.cm.req.prim_localgid", "infiniband.cm.req.prim_remotegid",
	"infiniband.cm.req.prim_localgid_ipv4", "infiniband.cm.req.prim_remotegid_ipv4",
	"infiniband.cm.req.prim_tfcclass", "infiniband.cm.req.prim_hoplim", "infiniband.cm.req.prim_sl",
	"infiniband.cm.req.prim_subnetlocal", "infiniband.cm.req.prim_localacktout",
	"infiniband.cm.req.alt_locallid", "infiniband.cm.req.alt_remotelid",
	"infiniband.cm.req.alt_localgid", "infiniband.cm.req.alt_remotegid",
	"infiniband.cm.req.alt_tfcclass", "infiniband.cm.req.alt_hoplim", "infiniband.cm.req.alt_sl",
	"infiniband.cm.req.alt_subnetlocal", "infiniband.cm.req.alt_localacktout",
	"infiniband.cm.req.ip_cm.majv", "infiniband.cm.req.ip_cm.minv", "infiniband.cm.req.ip_cm.ipv",
	"infiniband.cm.req.ip_cm.sport", "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
	"infiniband.cm.req.ip_cm.sip6", "infiniband.cm.req.ip_cm.dip6", "infiniband.cm.req.ip_cm.private",
	// REP
	"infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqkey",
	"infiniband.cm.rep.localqpn", "infiniband.cm.rep.localeecn", "infiniband.cm.rep.startpsn",
	"infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth", "infiniband.cm.rep.tgtackdelay",
	"infiniband.cm.rep.failoveracc", "infiniband.cm.rep.e2eflowctrl", "infiniband.cm.rep.rnrretrcount",
	"infiniband.cm.rep.srq", "infiniband.cm.rep.localcaguid", "infiniband.cm.rep.private",
	// RTU
	"infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid", "infiniband.cm.rtu.private",
	// REJ
	"infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid", "infiniband.cm.rej.msgrej",
	"infiniband.cm.rej.rejinfolen", "infiniband.cm.rej.reason", "infiniband.cm.rej.ari",
	"infiniband.cm.rej.private",
	// DREQ, whose remote QPN field Wireshark files under req
	"infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
	"infiniband.cm.req.remoteqpneecn", "infiniband.cm.dreq.private",
	// DREP
	"infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid", "infiniband.cm.drsp.private",
}

// TestTsharkCM writes a pcap of every CM message softnic implements, as UD
// packets between the QP1s of two hosts over IPv4 and IPv6, and has
// Wireshark's dissector read it back: "CM: ConnectRequest" and so on in the
// Info column, no malformed packet or expert note, and every field tshark
// decodes equal to what was encoded. Wireshark 4.0 shows the MRA only as a
// MAD ("Dissector Not Implemented"), so for it the MAD's data bytes are
// compared; and it reads a REQ path's flow label and packet rate from the
// wrong bits (see rpingMADs), so those two fields are not compared. It runs
// when tshark is installed (.ci/run installs Debian's).
func TestTsharkCM(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH; install Debian's tshark to run this test")
	}
	type packet struct {
		name string
		env  wire.Envelope
		mad  MADFields
		pkt  []byte
	}
	var pkts []packet
	for _, env := range []wire.Envelope{
		{Src: netip.MustParseAddrPort("10.0.0.1:55410"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")},
		{Src: netip.MustParseAddrPort("[fd00::1]:55410"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")},
	} {
		for _, attr := range cmAttrs {
			mad := sampleMAD(attr)
			if attr == AttrConnectRequest {
				src, dst := env.Src.Addr(), env.Dst.Addr()
				for _, p := range []*CMPathFields{&mad.REQ.PrimaryPath, &mad.REQ.AlternatePath} {
					p.LocalGID, p.RemoteGID = wire.GIDFromAddr(src), wire.GIDFromAddr(dst)
				}
				cma := NewCMAHeader(netip.AddrPortFrom(src, 40910), dst)
				CMAHeader(mad.REQ.PrivateData[:CMAHeaderSize]).Encode(&cma)
			}
			pkt := encodeUD(t, wire.GSIQPN, encodeMAD(t, &mad))
			env.Seal(pkt)
			family := "IPv4"
			if !env.Src.Addr().Unmap().Is4() {
				family = "IPv6"
			}
			pkts = append(pkts, packet{family + "/" + attr.String(), env, mad, pkt})
		}
	}
	var file bytes.Buffer
	w, err := wire.NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range pkts {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), &p.env, p.pkt); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "cm.pcap")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cols := tsharkCMFields(t, tshark, path)
	if len(cols) != len(pkts) {
		t.Fatalf("tshark printed %d lines for %d packets", len(cols), len(pkts))
	}
	for i, col := range cols {
		p := pkts[i]
		t.Run(p.name, func(t *testing.T) { checkTsharkCM(t, col, &p.mad, p.pkt) })
	}
}

// tsharkCMFields has tshark print cmTsharkFields of every MAD of the
// capture at path and returns them, a map from field to value a packet.
func tsharkCMFields(t *testing.T, tshark, path string) []map[string]string {
	t.Helper()
	args := []string{"-n", "-r", path, "-Y", "infiniband.mad", "-T", "fields", "-E", "separator=/t", "-E", "aggregator=,"}
	for _, f := range cmTsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	var cols []map[string]string
	for line := range strings.Lines(string(out)) {
		col := map[string]string{}
		for j, v := range strings.Split(strings.TrimSuffix(line, "\n"), "\t") {
			col[cmTsharkFields[j]] = v
		}
		cols = append(cols, col)
	}
	return cols
}

// checkTsharkCM compares what tshark shows of one CM packet with the MAD
// encoded into it.
func checkTsharkCM(t *testing.T, col map[string]string, mad *MADFields, pkt []byte) {
	t.Helper()
	h := &mad.Header
	if got, want := col["_ws.col.Info"], "CM: "+h.AttrID.String(); got != want {
		t.Errorf("Info %q, want %q", got, want)
	}
	if col["_ws.malformed"] != "" || col["_ws.expert.severity"] != "" {
		t.Errorf("tshark reports malformed %q, expert severity %q", col["_ws.malformed"], col["_ws.expert.severity"])
	}
	expectField(t, col, "infiniband.invariant.crc", uint64(binary.BigEndian.Uint32(pkt[len(pkt)-wire.ICRCSize:])))
	nums := map[string]uint64{
		"infiniband.mad.baseversion":       uint64(h.BaseVersion),
		"infiniband.mad.mgmtclass":         uint64(h.MgmtClass),
		"infiniband.mad.classversion":      uint64(h.ClassVersion),
		"infiniband.mad.method":            uint64(h.Method),
		"infiniband.mad.status":            uint64(h.Status),
		"infiniband.mad.classspecific":     uint64(h.ClassSpecific),
		"infiniband.mad.transactionid":     h.TransactionID,
		"infiniband.mad.attributeid":       uint64(h.AttrID),
		"infiniband.mad.attributemodifier": uint64(h.AttrModifier),
	}
	data := pkt[wire.BTHSize+wire.DETHSize+MADHeaderSize : wire.BTHSize+wire.DETHSize+MADSize]
	bytesWant := map[string][]byte{"infiniband.mad.data": data}
	strs := map[string]string{}
	switch h.AttrID {
	case AttrConnectRequest:
		r := &mad.REQ
		_, port, _ := r.ServiceID.RDMACM()
		for k, v := range map[string]uint64{
			"infiniband.cm.req":                    uint64(r.LocalCommID),
			"infiniband.cm.req.serviceid":          uint64(r.ServiceID),
			"infiniband.cm.req.serviceid.protocol": 0x06, // TCP
			"infiniband.cm.req.serviceid.dport":    uint64(port),
			"infiniband.cm.req.localcaguid":        r.LocalCAGUID,
			"infiniband.cm.req.localqkey":          uint64(r.LocalQKey),
			"infiniband.cm.req.localqpn":           uint64(r.LocalQPN),
			"infiniband.cm.req.responderres":       uint64(r.ResponderResources),
			"infiniband.cm.req.localeecn":          uint64(r.LocalEECN),
			"infiniband.cm.req.initdepth":          uint64(r.InitiatorDepth),
			"infiniband.cm.req.remoteeecn":         uint64(r.RemoteEECN),
			"infiniband.cm.req.remoteresptout":     uint64(r.RemoteCMResponseTimeout),
			"infiniband.cm.req.transpsvctype":      uint64(r.TransportServiceType),
			"infiniband.cm.req.e2eflowctrl":        boolValue(r.EndToEndFlowControl),
			"infiniband.cm.req.startpsn":           uint64(r.StartingPSN),
			"infiniband.cm.req.localresptout":      uint64(r.LocalCMResponseTimeout),
			"infiniband.cm.req.retrcount":          uint64(r.RetryCount),
			"infiniband.cm.req.pkey":               uint64(r.PKey),
			"infiniband.cm.req.pppmtu":             uint64(r.PathMTU),
			"infiniband.cm.req.rdcexist":           boolValue(r.RDCExists),
			"infiniband.cm.req.rnrretrcount":       uint64(r.RNRRetryCount),
			"infiniband.cm.req.maxcmretr":          uint64(r.MaxCMRetries),
			"infiniband.cm.req.srq":                boolValue(r.SRQ),
			"infiniband.cm.req.ext_transport":      uint64(r.ExtendedTransportType),
			"infiniband.cm.req.prim_locallid":      uint64(r.PrimaryPath.LocalLID),
			"infiniband.cm.req.prim_remotelid":     uint64(r.PrimaryPath.RemoteLID),
			"infiniband.cm.req.prim_tfcclass":      uint64(r.PrimaryPath.TrafficClass),
			"infiniband.cm.req.prim_hoplim":        uint64(r.PrimaryPath.HopLimit),
			"infiniband.cm.req.prim_sl":            uint64(r.PrimaryPath.SL),
			"infiniband.cm.req.prim_subnetlocal":   boolValue(r.PrimaryPath.SubnetLocal),
			"infiniband.cm.req.prim_localacktout":  uint64(r.PrimaryPath.LocalACKTimeout),
			"infiniband.cm.req.alt_locallid":       uint64(r.AlternatePath.LocalLID),
			"infiniband.cm.req.alt_remotelid":      uint64(r.AlternatePath.RemoteLID),
			"infiniband.cm.req.alt_tfcclass":       uint64(r.AlternatePath.TrafficClass),
			"infiniband.cm.req.alt_hoplim":         uint64(r.AlternatePath.HopLimit),
			"infiniband.cm.req.alt_sl":             uint64(r.AlternatePath.SL),
			"infiniband.cm.req.alt_subnetlocal":    boolValue(r.AlternatePath.SubnetLocal),
			"infiniband.cm.req.alt_localacktout":   uint64(r.AlternatePath.LocalACKTimeout),
			"infiniband.cm.req.ip_cm.majv":         0,
			"infiniband.cm.req.ip_cm.minv":         0,
		} {
			nums[k] = v
		}
		cma, err := DecodeCMAHeader(r.PrivateData[:])
		if err != nil {
			t.Fatal(err)
		}
		nums["infiniband.cm.req.ip_cm.ipv"] = uint64(cma.IPVersion())
		nums["infiniband.cm.req.ip_cm.sport"] = uint64(cma.SrcPort())
		bytesWant["infiniband.cm.req.alt_localgid"] = r.AlternatePath.LocalGID[:]
		bytesWant["infiniband.cm.req.alt_remotegid"] = r.AlternatePath.RemoteGID[:]
		bytesWant["infiniband.cm.req.ip_cm.private"] = r.PrivateData[CMAHeaderSize:]
		gid, ip := "infiniband.cm.req.prim_", "infiniband.cm.req.ip_cm."
		if cma.IPVersion() == 4 {
			strs[gid+"localgid_ipv4"] = r.PrimaryPath.LocalGID.String()
			strs[gid+"remotegid_ipv4"] = r.PrimaryPath.RemoteGID.String()
			strs[ip+"sip4"], strs[ip+"dip4"] = cma.Src().Addr().String(), cma.Dst().String()
		} else {
			strs[gid+"localgid"] = r.PrimaryPath.LocalGID.String()
			strs[gid+"remotegid"] = r.PrimaryPath.RemoteGID.String()
			strs[ip+"sip6"], strs[ip+"dip6"] = cma.Src().Addr().String(), cma.Dst().String()
		}
	case AttrConnectReply:
		r := &mad.REP
		for k, v := range map[string]uint64{
			"infiniband.cm.rep":              uint64(r.LocalCommID),
			"infiniband.cm.rep.remotecommid": uint64(r.RemoteCommID),
			"infiniband.cm.rep.localqkey":    uint64(r.LocalQKey),
			"infiniband.cm.rep.localqpn":     uint64(r.LocalQPN),
			"infiniband.cm.rep.localeecn":    uint64(r.LocalEECN),
			"infiniband.cm.rep.startpsn":     uint64(r.StartingPSN),
			"infiniband.cm.rep.respres":      uint64(r.ResponderResources),
			"infiniband.cm.rep.initdepth":    uint64(r.InitiatorDepth),
			"infiniband.cm.rep.tgtackdelay":  uint64(r.TargetACKDelay),
			"infiniband.cm.rep.failoveracc":  uint64(r.FailoverAccepted),
			"infiniband.cm.rep.e2eflowctrl":  boolValue(r.EndToEndFlowControl),
			"infiniband.cm.rep.rnrretrcount": uint64(r.RNRRetryCount),
			"infiniband.cm.rep.srq":          boolValue(r.SRQ),
			"infiniband.cm.rep.localcaguid":  r.LocalCAGUID,
		} {
			nums[k] = v
		}
		bytesWant["infiniband.cm.rep.private"] = r.PrivateData[:]
	case AttrReadyToUse:
		nums["infiniband.cm.rtu.localcommid"] = uint64(mad.RTU.LocalCommID)
		nums["infiniband.cm.rtu.remotecommid"] = uint64(mad.RTU.RemoteCommID)
		bytesWant["infiniband.cm.rtu.private"] = mad.RTU.PrivateData[:]
	case AttrConnectReject:
		r := &mad.REJ
		nums["infiniband.cm.rej.localcommid"] = uint64(r.LocalCommID)
		nums["infiniband.cm.rej.remotecommid"] = uint64(r.RemoteCommID)
		nums["infiniband.cm.rej.msgrej"] = uint64(r.MessageRejected)
		nums["infiniband.cm.rej.rejinfolen"] = uint64(r.ARILength)
		nums["infiniband.cm.rej.reason"] = uint64(r.Reason)
		bytesWant["infiniband.cm.rej.ari"] = r.ARI[:]
		bytesWant["infiniband.cm.rej.private"] = r.PrivateData[:]
	case AttrDisconnectRequest:
		nums["infiniband.cm.dreq.localcommid"] = uint64(mad.DREQ.LocalCommID)
		nums["infiniband.cm.dreq.remotecommid"] = uint64(mad.DREQ.RemoteCommID)
		nums["infiniband.cm.req.remoteqpneecn"] = uint64(mad.DREQ.RemoteQPN)
		bytesWant["infiniband.cm.dreq.private"] = mad.DREQ.PrivateData[:]
	case AttrDisconnectReply:
		nums["infiniband.cm.drsp.localcommid"] = uint64(mad.DREP.LocalCommID)
		nums["infiniband.cm.drsp.remotecommid"] = uint64(mad.DREP.RemoteCommID)
		bytesWant["infiniband.cm.drsp.private"] = mad.DREP.PrivateData[:]
	}
	for field, want := range nums {
		expectField(t, col, field, want)
	}
	for field, want := range bytesWant {
		if got := col[field]; got != hex.EncodeToString(want) {
			t.Errorf("%s = %q, want %x", field, got, want)
		}
	}
	for field, want := range strs {
		if got := col[field]; got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	// Fields of other messages must be absent: the dissector picked the
	// message by the attribute ID.
	for _, field := range cmTsharkFields {
		_, n := nums[field]
		_, b := bytesWant[field]
		_, s := strs[field]
		if strings.HasPrefix(field, "infiniband.cm.") && col[field] != "" && !n && !b && !s {
			t.Errorf("tshark shows %s = %q, which a %v does not have", field, col[field], h.AttrID)
		}
	}
}

// TestTsharkGoldenCM has tshark decode the CM MADs of rping.pcap and
// compares every field it shows with softnic's decoding of the same bytes.
func TestTsharkGoldenCM(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH; install Debian's tshark to run this test")
	}
	path := golden.Path(t, "rping.pcap")
	var pkts [][]byte
	for _, fr := range golden.Frames(t, path) {
		var p wire.Packet
		if err := p.Decode(fr.Payload); err != nil {
			t.Fatal(err)
		}
		if p.DETH != nil {
			pkts = append(pkts, fr.Payload)
		}
	}
	cols := tsharkCMFields(t, tshark, path)
	if len(cols) != len(pkts) {
		t.Fatalf("tshark shows %d MADs, softnic finds %d", len(cols), len(pkts))
	}
	for i, col := range cols {
		var p wire.Packet
		var m MAD
		var mad MADFields
		if err := p.Decode(pkts[i]); err != nil {
			t.Fatal(err)
		}
		if err := m.Decode(p.Payload); err != nil {
			t.Fatal(err)
		}
		m.Fields(&mad)
		t.Run(m.AttrID().String(), func(t *testing.T) { checkTsharkCM(t, col, &mad, pkts[i]) })
	}
}
