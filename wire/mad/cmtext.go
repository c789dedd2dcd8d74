package mad

import (
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/wirefmt"
)

// AppendPacketSummary appends p's summary (wirefmt.AppendSummary) to
// dst and, when p is a UD packet to QP1 carrying a CM MAD, the MAD's
// summary after it:
//
//	UD Send Only qp=0x000001 psn=0x000012 ackreq=1 qkey=0x80010000 srcqp=0x000001 payload=256 CM ConnectRequest comm_id=0x5818c37c qpn=0x00006b psn=0xdc7d75 service_id=0x0000000001061c06
//
// It does not allocate if dst has room. p must hold a decoded packet.
func AppendPacketSummary(dst []byte, p *wire.Packet) []byte {
	dst = wirefmt.AppendSummary(dst, p)
	var m MAD
	if decodePacket(p, &m) {
		dst = append(dst, ' ')
		dst = m.AppendSummary(dst)
	}
	return dst
}

// AppendPacketVerbose appends every field of p (wirefmt.AppendVerbose)
// to dst and, when p is a UD packet to QP1 carrying a CM MAD, the lines of
// the MAD's AppendVerbose before the payload line. It does not allocate if
// dst has room. p must hold a decoded packet.
func AppendPacketVerbose(dst []byte, p *wire.Packet) []byte {
	dst = wirefmt.AppendVerboseHeaders(dst, p)
	if m := (MAD{}); decodePacket(p, &m) {
		dst = m.AppendVerbose(dst)
	}
	return wirefmt.AppendVerboseTrailer(dst, p)
}

// decodePacket decodes p's payload into m and reports whether it is a CM
// MAD sent to QP1 in a UD packet.
func decodePacket(p *wire.Packet, m *MAD) bool {
	return p.DETH != nil && p.BTH.DestQP() == wire.GSIQPN && m.Decode(p.Payload) == nil
}

// AppendSummary appends a one-line description of m to dst, without a
// newline: "CM", the message name and its identifying fields, as in
//
//	CM ConnectRequest comm_id=0x5818c37c qpn=0x00006b psn=0xdc7d75 service_id=0x0000000001061c06
//	CM ConnectReject comm_id=0x24ce6050 remote_comm_id=0x5818c37c rejected=REQ reason=28(consumer reject)
//
// It does not allocate if dst has room. m must hold a decoded MAD.
func (m *MAD) AppendSummary(dst []byte) []byte {
	dst = append(dst, "CM "...)
	dst = m.AttrID().appendName(dst)
	switch {
	case m.REQ != nil:
		r := m.REQ
		dst = appendField(dst, " comm_id=", uint64(r.LocalCommID()), 8)
		dst = appendField(dst, " qpn=", uint64(r.LocalQPN()), 6)
		dst = appendField(dst, " psn=", uint64(r.StartingPSN()), 6)
		dst = appendField(dst, " service_id=", uint64(r.ServiceID()), 16)
	case m.MRA != nil:
		r := m.MRA
		dst = appendCommIDs(dst, r.LocalCommID(), r.RemoteCommID())
		dst = append(dst, " mraed="...)
		dst = r.MessageMRAed().appendName(dst)
		dst = append(dst, " service_timeout="...)
		dst = appendUint(dst, uint64(r.ServiceTimeout()))
	case m.REJ != nil:
		r := m.REJ
		dst = appendCommIDs(dst, r.LocalCommID(), r.RemoteCommID())
		dst = append(dst, " rejected="...)
		dst = r.MessageRejected().appendName(dst)
		dst = append(dst, " reason="...)
		dst = appendReason(dst, r.Reason())
	case m.REP != nil:
		r := m.REP
		dst = appendCommIDs(dst, r.LocalCommID(), r.RemoteCommID())
		dst = appendField(dst, " qpn=", uint64(r.LocalQPN()), 6)
		dst = appendField(dst, " psn=", uint64(r.StartingPSN()), 6)
	case m.RTU != nil:
		dst = appendCommIDs(dst, m.RTU.LocalCommID(), m.RTU.RemoteCommID())
	case m.DREQ != nil:
		r := m.DREQ
		dst = appendCommIDs(dst, r.LocalCommID(), r.RemoteCommID())
		dst = appendField(dst, " qpn=", uint64(r.RemoteQPN()), 6)
	case m.DREP != nil:
		dst = appendCommIDs(dst, m.DREP.LocalCommID(), m.DREP.RemoteCommID())
	case m.SIDRREQ != nil:
		dst = appendField(dst, " request_id=", uint64(m.SIDRREQ.RequestID()), 8)
		dst = appendField(dst, " service_id=", uint64(m.SIDRREQ.ServiceID()), 16)
	case m.SIDRREP != nil:
		r := m.SIDRREP
		dst = appendField(dst, " request_id=", uint64(r.RequestID()), 8)
		dst = append(dst, " status="...)
		dst = appendSIDRStatus(dst, r.Status())
		dst = appendField(dst, " qpn=", uint64(r.QPN()), 6)
		dst = appendField(dst, " qkey=", uint64(r.QKey()), 8)
	}
	return dst
}

// AppendVerbose appends every field of m to dst in the format of
// wirefmt.AppendVerbose: the MAD header, then the CM message, each line
// indented by two spaces and ending in a newline. A REQ's paths get a line
// each, and so does the rdma_cm header when its private data starts with
// one. Private data and a REJ's ARI are shown with their length and in hex
// without their trailing zero bytes. It does
// not allocate if dst has room. m must hold a decoded MAD.
func (m *MAD) AppendVerbose(dst []byte) []byte {
	h := m.Header
	dst = append(dst, "  MAD base="...)
	dst = appendUint(dst, uint64(h.BaseVersion()))
	dst = appendField(dst, " class=", uint64(h.MgmtClass()), 2)
	dst = append(dst, " version="...)
	dst = appendUint(dst, uint64(h.ClassVersion()))
	dst = appendField(dst, " method=", uint64(h.Method()), 2)
	dst = appendField(dst, " status=", uint64(h.Status()), 4)
	dst = appendField(dst, " specific=", uint64(h.ClassSpecific()), 4)
	dst = appendField(dst, " tid=", h.TransactionID(), 16)
	dst = appendField(dst, " attr=", uint64(h.AttrID()), 4)
	dst = appendField(dst, " resv=", uint64(h.Resv16()), 4)
	dst = appendField(dst, " modifier=", uint64(h.AttrModifier()), 8)
	dst = append(dst, '\n')
	switch {
	case m.REQ != nil:
		dst = appendREQ(dst, m.REQ)
	case m.MRA != nil:
		f := m.MRA.Fields()
		dst = append(dst, "  MRA"...)
		dst = appendCommIDs(dst, f.LocalCommID, f.RemoteCommID)
		dst = append(dst, " mraed="...)
		dst = f.MessageMRAed.appendName(dst)
		dst = appendField(dst, " resv6=", uint64(f.Resv6), 2)
		dst = append(dst, " service_timeout="...)
		dst = appendUint(dst, uint64(f.ServiceTimeout))
		dst = appendField(dst, " resv3=", uint64(f.Resv3), 1)
		dst = appendPrivate(dst, m.MRA.PrivateData())
	case m.REJ != nil:
		f := m.REJ.Fields()
		dst = append(dst, "  REJ"...)
		dst = appendCommIDs(dst, f.LocalCommID, f.RemoteCommID)
		dst = append(dst, " rejected="...)
		dst = f.MessageRejected.appendName(dst)
		dst = appendField(dst, " resv6=", uint64(f.Resv6), 2)
		dst = append(dst, " ari_len="...)
		dst = appendUint(dst, uint64(f.ARILength))
		dst = appendField(dst, " resv1=", uint64(f.Resv1), 1)
		dst = append(dst, " reason="...)
		dst = appendReason(dst, f.Reason)
		dst = appendBytes(dst, " ari", m.REJ.ARI())
		dst = appendPrivate(dst, m.REJ.PrivateData())
	case m.REP != nil:
		f := m.REP.Fields()
		dst = append(dst, "  REP"...)
		dst = appendCommIDs(dst, f.LocalCommID, f.RemoteCommID)
		dst = appendField(dst, " qkey=", uint64(f.LocalQKey), 8)
		dst = appendField(dst, " qpn=", uint64(f.LocalQPN), 6)
		dst = appendField(dst, " resv8a=", uint64(f.Resv8a), 2)
		dst = appendField(dst, " eecn=", uint64(f.LocalEECN), 6)
		dst = appendField(dst, " resv8b=", uint64(f.Resv8b), 2)
		dst = appendField(dst, " psn=", uint64(f.StartingPSN), 6)
		dst = appendField(dst, " resv8c=", uint64(f.Resv8c), 2)
		dst = append(dst, " resp_res="...)
		dst = appendUint(dst, uint64(f.ResponderResources))
		dst = append(dst, " init_depth="...)
		dst = appendUint(dst, uint64(f.InitiatorDepth))
		dst = append(dst, " target_ack_delay="...)
		dst = appendUint(dst, uint64(f.TargetACKDelay))
		dst = append(dst, " failover="...)
		dst = appendUint(dst, uint64(f.FailoverAccepted))
		dst = append(dst, " e2e_fc="...)
		dst = appendBool(dst, f.EndToEndFlowControl)
		dst = append(dst, " rnr_retry="...)
		dst = appendUint(dst, uint64(f.RNRRetryCount))
		dst = append(dst, " srq="...)
		dst = appendBool(dst, f.SRQ)
		dst = appendField(dst, " resv4=", uint64(f.Resv4), 1)
		dst = appendField(dst, " ca_guid=", f.LocalCAGUID, 16)
		dst = appendPrivate(dst, m.REP.PrivateData())
	case m.RTU != nil:
		dst = append(dst, "  RTU"...)
		dst = appendCommIDs(dst, m.RTU.LocalCommID(), m.RTU.RemoteCommID())
		dst = appendPrivate(dst, m.RTU.PrivateData())
	case m.DREQ != nil:
		f := m.DREQ.Fields()
		dst = append(dst, "  DREQ"...)
		dst = appendCommIDs(dst, f.LocalCommID, f.RemoteCommID)
		dst = appendField(dst, " qpn=", uint64(f.RemoteQPN), 6)
		dst = appendField(dst, " resv8=", uint64(f.Resv8), 2)
		dst = appendPrivate(dst, m.DREQ.PrivateData())
	case m.DREP != nil:
		dst = append(dst, "  DREP"...)
		dst = appendCommIDs(dst, m.DREP.LocalCommID(), m.DREP.RemoteCommID())
		dst = appendPrivate(dst, m.DREP.PrivateData())
	case m.SIDRREQ != nil:
		f := m.SIDRREQ.Fields()
		dst = appendField(dst, "  SIDR_REQ request_id=", uint64(f.RequestID), 8)
		dst = appendField(dst, " pkey=", uint64(f.PKey), 4)
		dst = appendField(dst, " resv16=", uint64(f.Resv16), 4)
		dst = appendField(dst, " service_id=", uint64(f.ServiceID), 16)
		dst = append(dst, '\n')
		dst = appendCMAHeader(dst, m.SIDRREQ.PrivateData(), f.ServiceID)
		dst = appendPrivate(append(dst, "  SIDR_REQ"...), m.SIDRREQ.PrivateData())
	case m.SIDRREP != nil:
		f := m.SIDRREP.Fields()
		dst = appendField(dst, "  SIDR_REP request_id=", uint64(f.RequestID), 8)
		dst = append(dst, " status="...)
		dst = appendSIDRStatus(dst, f.Status)
		dst = append(dst, " add_info_len="...)
		dst = appendUint(dst, uint64(f.AddInfoLength))
		dst = appendField(dst, " resv16=", uint64(f.Resv16), 4)
		dst = appendField(dst, " qpn=", uint64(f.QPN), 6)
		dst = appendField(dst, " resv8=", uint64(f.Resv8), 2)
		dst = appendField(dst, " service_id=", uint64(f.ServiceID), 16)
		dst = appendField(dst, " qkey=", uint64(f.QKey), 8)
		dst = appendBytes(dst, " class_port_info", m.SIDRREP.ClassPortInfo())
		dst = appendPrivate(dst, m.SIDRREP.PrivateData())
	}
	return dst
}

// appendSIDRStatus appends a SIDR_REP status as "2(rejected by the
// service)".
func appendSIDRStatus(dst []byte, s SIDRStatus) []byte {
	dst = appendUint(dst, uint64(s))
	dst = append(dst, '(')
	return append(s.appendName(dst), ')')
}

// appendREQ appends the verbose lines of a REQ: its fields, its two paths,
// and the rdma_cm header if the private data starts with one.
func appendREQ(dst []byte, r REQ) []byte {
	f := r.Fields()
	dst = appendField(dst, "  REQ comm_id=", uint64(f.LocalCommID), 8)
	dst = appendField(dst, " resv32a=", uint64(f.Resv32a), 8)
	dst = appendField(dst, " service_id=", uint64(f.ServiceID), 16)
	dst = appendField(dst, " ca_guid=", f.LocalCAGUID, 16)
	dst = appendField(dst, " resv32b=", uint64(f.Resv32b), 8)
	dst = appendField(dst, " qkey=", uint64(f.LocalQKey), 8)
	dst = appendField(dst, " qpn=", uint64(f.LocalQPN), 6)
	dst = append(dst, " resp_res="...)
	dst = appendUint(dst, uint64(f.ResponderResources))
	dst = appendField(dst, " eecn=", uint64(f.LocalEECN), 6)
	dst = append(dst, " init_depth="...)
	dst = appendUint(dst, uint64(f.InitiatorDepth))
	dst = appendField(dst, " remote_eecn=", uint64(f.RemoteEECN), 6)
	dst = append(dst, " remote_cm_timeout="...)
	dst = appendUint(dst, uint64(f.RemoteCMResponseTimeout))
	dst = append(dst, " tst="...)
	dst = appendUint(dst, uint64(f.TransportServiceType))
	dst = append(dst, " e2e_fc="...)
	dst = appendBool(dst, f.EndToEndFlowControl)
	dst = appendField(dst, " psn=", uint64(f.StartingPSN), 6)
	dst = append(dst, " local_cm_timeout="...)
	dst = appendUint(dst, uint64(f.LocalCMResponseTimeout))
	dst = append(dst, " retry="...)
	dst = appendUint(dst, uint64(f.RetryCount))
	dst = appendField(dst, " pkey=", uint64(f.PKey), 4)
	dst = append(dst, " mtu="...)
	dst = appendMTU(dst, f.PathMTU)
	dst = append(dst, " rdc="...)
	dst = appendBool(dst, f.RDCExists)
	dst = append(dst, " rnr_retry="...)
	dst = appendUint(dst, uint64(f.RNRRetryCount))
	dst = append(dst, " max_cm_retries="...)
	dst = appendUint(dst, uint64(f.MaxCMRetries))
	dst = append(dst, " srq="...)
	dst = appendBool(dst, f.SRQ)
	dst = append(dst, " ext="...)
	dst = appendUint(dst, uint64(f.ExtendedTransportType))
	dst = append(dst, '\n')
	dst = appendPath(dst, "  REQ primary", &f.PrimaryPath)
	dst = appendPath(dst, "  REQ alternate", &f.AlternatePath)
	dst = appendCMAHeader(dst, r.PrivateData(), f.ServiceID)
	return appendPrivate(append(dst, "  REQ"...), r.PrivateData())
}

// appendCMAHeader appends a line describing the rdma_cm header that starts
// the private data of a REQ or SIDR_REQ for service id, if it does.
func appendCMAHeader(dst, private []byte, id ServiceID) []byte {
	h, err := DecodeCMAHeader(private)
	if err != nil {
		return dst
	}
	dst = append(dst, "  rdma_cm ip="...)
	dst = appendUint(dst, uint64(h.IPVersion()))
	dst = append(dst, " src="...)
	dst = h.Src().AppendTo(dst)
	dst = append(dst, " dst="...)
	dst = h.Dst().AppendTo(dst)
	if ps, port, ok := id.RDMACM(); ok {
		dst = append(dst, ' ')
		dst = ps.appendName(dst)
		dst = append(dst, " port="...)
		dst = appendUint(dst, uint64(port))
	}
	return append(dst, '\n')
}

// appendPath appends a verbose line describing a REQ path.
func appendPath(dst []byte, name string, p *CMPathFields) []byte {
	dst = append(dst, name...)
	dst = appendField(dst, " lid=", uint64(p.LocalLID), 4)
	dst = appendField(dst, "->", uint64(p.RemoteLID), 4)
	dst = append(dst, " gid="...)
	dst = p.LocalGID.Addr().AppendTo(dst)
	dst = append(dst, "->"...)
	dst = p.RemoteGID.Addr().AppendTo(dst)
	dst = appendField(dst, " flow_label=", uint64(p.FlowLabel), 5)
	dst = appendField(dst, " resv6=", uint64(p.Resv6), 2)
	dst = append(dst, " rate="...)
	dst = appendUint(dst, uint64(p.PacketRate))
	dst = appendField(dst, " tclass=", uint64(p.TrafficClass), 2)
	dst = append(dst, " hop_limit="...)
	dst = appendUint(dst, uint64(p.HopLimit))
	dst = append(dst, " sl="...)
	dst = appendUint(dst, uint64(p.SL))
	dst = append(dst, " subnet_local="...)
	dst = appendBool(dst, p.SubnetLocal)
	dst = appendField(dst, " resv3a=", uint64(p.Resv3a), 1)
	dst = append(dst, " ack_timeout="...)
	dst = appendUint(dst, uint64(p.LocalACKTimeout))
	dst = appendField(dst, " resv3b=", uint64(p.Resv3b), 1)
	return append(dst, '\n')
}

// appendPrivate ends a message's line with its private data and a newline.
func appendPrivate(dst, b []byte) []byte { return append(appendBytes(dst, " private", b), '\n') }

// appendCommIDs appends the local and remote communication IDs.
func appendCommIDs(dst []byte, local, remote uint32) []byte {
	dst = appendField(dst, " comm_id=", uint64(local), 8)
	return appendField(dst, " remote_comm_id=", uint64(remote), 8)
}

// appendField appends name and v in hex, zero-padded to digits.
func appendField(dst []byte, name string, v uint64, digits int) []byte {
	return wire.AppendHex(append(dst, name...), v, digits)
}

// appendReason appends a reject reason as "28(consumer reject)".
func appendReason(dst []byte, r RejectReason) []byte {
	dst = appendUint(dst, uint64(r))
	dst = append(dst, '(')
	return append(r.appendName(dst), ')')
}

// appendBytes appends name, b's length in brackets, '=' and b in hex
// without its trailing zero bytes ("-" if all are zero):
// " private[92]=00409fce".
func appendBytes(dst []byte, name string, b []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, name...)
	dst = append(dst, '[')
	dst = appendUint(dst, uint64(len(b)))
	dst = append(dst, "]="...)
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	if n == 0 {
		return append(dst, '-')
	}
	for _, c := range b[:n] {
		dst = append(dst, hex[c>>4], hex[c&0x0f])
	}
	return dst
}
