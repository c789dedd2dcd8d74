package mad

import (
	"encoding/binary"

	"github.com/softnic/softnic/wire"
)

// Management datagrams (MADs, IBTA 13.4) are the 256-byte messages of the
// InfiniBand management classes. On RoCEv2 they travel as the payload of UD
// SEND Only packets to and from QP1, the General Services Interface (GSI),
// with the well-known Q_Key 0x80010000; the connection manager (CM, IBTA
// chapter 12) is one such class.
const (
	// MADSize is the length of a MAD, and so the payload of every QP1
	// packet.
	MADSize = 256
	// MADHeaderSize is the length of the common MAD header.
	MADHeaderSize = 24
	// CMDataSize is the length of a CM message: the MAD after its header.
	CMDataSize = MADSize - MADHeaderSize
	// MADBaseVersion is the only base version IBTA defines for MADs.
	MADBaseVersion = 1
	// CMClassVersion is the CM class version of IBTA 1.2 and later, the one
	// Linux sends (IB_CM_CLASS_VERSION).
	CMClassVersion = 2
)

// MADHeader is a view of the common MAD header (IBTA 13.4.2, the MAD base
// format):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                         TransactionID                         +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// R is the response bit, kept here as the top bit of Method. The accessors
// do not check the length; MAD.Decode does.
type MADHeader []byte

const (
	madBaseVersion   = 0
	madMgmtClass     = 1
	madClassVersion  = 2
	madMethod        = 3
	madStatus        = 4
	madClassSpecific = 6
	madTransactionID = 8
	madAttrID        = 16
	madResv          = 18
	madAttrModifier  = 20
)

// MADHeaderFields holds every field of a MAD header, the reserved one
// included.
type MADHeaderFields struct {
	BaseVersion   uint8 // MADBaseVersion
	MgmtClass     MgmtClass
	ClassVersion  uint8 // CMClassVersion for the CM
	Method        MADMethod
	Status        uint16
	ClassSpecific uint16
	TransactionID uint64
	AttrID        AttrID
	Resv16        uint16
	AttrModifier  uint32
}

// CMHeader returns the header of a CM message with attribute attr and
// transaction ID tid, as Linux sends them: base version 1, class version 2,
// method Send, status, class-specific field and attribute modifier 0. The
// CM puts the same transaction ID on every message of one exchange (REQ,
// REP, RTU, or DREQ, DREP).
func CMHeader(attr AttrID, tid uint64) MADHeaderFields {
	return MADHeaderFields{
		BaseVersion:   MADBaseVersion,
		MgmtClass:     MgmtClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MethodSend,
		TransactionID: tid,
		AttrID:        attr,
	}
}

// BaseVersion returns the MAD base version.
func (h MADHeader) BaseVersion() uint8 { return h[madBaseVersion] }

// MgmtClass returns the management class.
func (h MADHeader) MgmtClass() MgmtClass { return MgmtClass(h[madMgmtClass]) }

// ClassVersion returns the version of the management class.
func (h MADHeader) ClassVersion() uint8 { return h[madClassVersion] }

// Method returns the method byte, response bit included.
func (h MADHeader) Method() MADMethod { return MADMethod(h[madMethod]) }

// Status returns the status field.
func (h MADHeader) Status() uint16 { return binary.BigEndian.Uint16(h[madStatus:]) }

// ClassSpecific returns the class-specific field.
func (h MADHeader) ClassSpecific() uint16 { return binary.BigEndian.Uint16(h[madClassSpecific:]) }

// TransactionID returns the transaction ID.
func (h MADHeader) TransactionID() uint64 { return binary.BigEndian.Uint64(h[madTransactionID:]) }

// AttrID returns the attribute ID: for the CM, which message the MAD is.
func (h MADHeader) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(h[madAttrID:])) }

// Resv16 returns the reserved field after the attribute ID.
func (h MADHeader) Resv16() uint16 { return binary.BigEndian.Uint16(h[madResv:]) }

// AttrModifier returns the attribute modifier.
func (h MADHeader) AttrModifier() uint32 { return binary.BigEndian.Uint32(h[madAttrModifier:]) }

// Fields returns every field of the header.
func (h MADHeader) Fields() MADHeaderFields {
	return MADHeaderFields{
		BaseVersion:   h.BaseVersion(),
		MgmtClass:     h.MgmtClass(),
		ClassVersion:  h.ClassVersion(),
		Method:        h.Method(),
		Status:        h.Status(),
		ClassSpecific: h.ClassSpecific(),
		TransactionID: h.TransactionID(),
		AttrID:        h.AttrID(),
		Resv16:        h.Resv16(),
		AttrModifier:  h.AttrModifier(),
	}
}

// Encode writes f into the header.
func (h MADHeader) Encode(f *MADHeaderFields) {
	h[madBaseVersion] = f.BaseVersion
	h[madMgmtClass] = byte(f.MgmtClass)
	h[madClassVersion] = f.ClassVersion
	h[madMethod] = byte(f.Method)
	binary.BigEndian.PutUint16(h[madStatus:], f.Status)
	binary.BigEndian.PutUint16(h[madClassSpecific:], f.ClassSpecific)
	binary.BigEndian.PutUint64(h[madTransactionID:], f.TransactionID)
	binary.BigEndian.PutUint16(h[madAttrID:], uint16(f.AttrID))
	binary.BigEndian.PutUint16(h[madResv:], f.Resv16)
	binary.BigEndian.PutUint32(h[madAttrModifier:], f.AttrModifier)
}

// MgmtClass is the management class of a MAD (IBTA 13.4.4).
type MgmtClass uint8

// The management classes softnic names. It decodes only the CM.
const (
	MgmtClassSubnLID  MgmtClass = 0x01 // subnet management, LID routed
	MgmtClassSubnAdm  MgmtClass = 0x03 // subnet administration
	MgmtClassPerf     MgmtClass = 0x04 // performance management
	MgmtClassBM       MgmtClass = 0x05 // baseboard management
	MgmtClassDevMgt   MgmtClass = 0x06 // device management
	MgmtClassCM       MgmtClass = 0x07 // communication management
	MgmtClassSNMP     MgmtClass = 0x08 // SNMP tunneling
	MgmtClassSubnDirR MgmtClass = 0x81 // subnet management, directed route
)

var mgmtClassNames = map[MgmtClass]string{
	MgmtClassSubnLID:  "SubnMgt",
	MgmtClassSubnAdm:  "SubnAdm",
	MgmtClassPerf:     "PerfMgt",
	MgmtClassBM:       "BM",
	MgmtClassDevMgt:   "DevMgt",
	MgmtClassCM:       "CM",
	MgmtClassSNMP:     "SNMP",
	MgmtClassSubnDirR: "SubnMgt(DR)",
}

// String returns the class's short name, such as "CM", or "MgmtClass(0x..)".
func (c MgmtClass) String() string {
	if s, ok := mgmtClassNames[c]; ok {
		return s
	}
	return "MgmtClass(" + string(wire.AppendHex(nil, uint64(c), 2)) + ")"
}

// MADMethod is the method byte of a MAD header (IBTA 13.4.5): the
// response bit R in bit 7 and the method in bits 6-0.
type MADMethod uint8

// The common methods. CM messages are all sent with MethodSend.
const (
	MethodGet         MADMethod = 0x01
	MethodSet         MADMethod = 0x02
	MethodSend        MADMethod = 0x03
	MethodTrap        MADMethod = 0x05
	MethodReport      MADMethod = 0x06
	MethodTrapRepress MADMethod = 0x07
	MethodGetResp     MADMethod = 0x81
	MethodReportResp  MADMethod = 0x86

	methodResponse MADMethod = 0x80
)

var methodNames = map[MADMethod]string{
	MethodGet:         "Get",
	MethodSet:         "Set",
	MethodSend:        "Send",
	MethodTrap:        "Trap",
	MethodReport:      "Report",
	MethodTrapRepress: "TrapRepress",
	MethodGetResp:     "GetResp",
	MethodReportResp:  "ReportResp",
}

// IsResponse reports whether the response bit is set.
func (m MADMethod) IsResponse() bool { return m&methodResponse != 0 }

// String returns the method's name, such as "Send", or "Method(0x..)".
func (m MADMethod) String() string {
	if s, ok := methodNames[m]; ok {
		return s
	}
	return "Method(" + string(wire.AppendHex(nil, uint64(m), 2)) + ")"
}

// AttrID is the attribute ID of a MAD. For the CM class it names the message
// (IBTA 12.6).
type AttrID uint16

// The CM attributes. softnic implements the connection and disconnection
// messages and service ID resolution; the others are named so that a
// decoder can say what it drops.
const (
	AttrClassPortInfo         AttrID = 0x0001
	AttrConnectRequest        AttrID = 0x0010 // REQ
	AttrMsgRcptAck            AttrID = 0x0011 // MRA
	AttrConnectReject         AttrID = 0x0012 // REJ
	AttrConnectReply          AttrID = 0x0013 // REP
	AttrReadyToUse            AttrID = 0x0014 // RTU
	AttrDisconnectRequest     AttrID = 0x0015 // DREQ
	AttrDisconnectReply       AttrID = 0x0016 // DREP
	AttrServiceIDResReq       AttrID = 0x0017 // SIDR_REQ
	AttrServiceIDResReqResp   AttrID = 0x0018 // SIDR_REP
	AttrLoadAlternatePath     AttrID = 0x0019 // LAP
	AttrAlternatePathResponse AttrID = 0x001A // APR
)

// cmAttrNames holds the IBTA names of the CM attributes 0x0010 to 0x001A.
var cmAttrNames = [...]string{
	"ConnectRequest",
	"MsgRcptAck",
	"ConnectReject",
	"ConnectReply",
	"ReadyToUse",
	"DisconnectRequest",
	"DisconnectReply",
	"ServiceIDResReq",
	"ServiceIDResReqResp",
	"LoadAlternatePath",
	"AlternatePathResponse",
}

// String returns the IBTA name of a CM attribute, such as "ConnectRequest",
// or "AttrID(0x....)".
func (a AttrID) String() string { return string(a.appendName(nil)) }

func (a AttrID) appendName(dst []byte) []byte {
	switch {
	case a == AttrClassPortInfo:
		return append(dst, "ClassPortInfo"...)
	case a >= AttrConnectRequest && int(a-AttrConnectRequest) < len(cmAttrNames):
		return append(dst, cmAttrNames[a-AttrConnectRequest]...)
	}
	dst = append(dst, "AttrID("...)
	return append(wire.AppendHex(dst, uint64(a), 4), ')')
}

// cmDecoded reports whether softnic decodes the CM attribute a.
func (a AttrID) cmDecoded() bool { return a >= AttrConnectRequest && a <= AttrServiceIDResReqResp }

// MAD is a decoded CM management datagram: views into the buffer passed to
// Decode of the header and of the one CM message the attribute ID names, nil
// for the others. A MAD is meant to be reused: Decode overwrites every field
// and allocates nothing.
type MAD struct {
	Header MADHeader
	REQ    REQ
	MRA    MRA
	REJ    REJ
	REP    REP
	RTU    RTU
	DREQ   DREQ
	DREP   DREP
	// SIDRREQ and SIDRREP are the service ID resolution messages.
	SIDRREQ SIDRREQ
	SIDRREP SIDRREP
	Raw     []byte // the whole MAD
}

// Decode parses b, the payload of a UD packet to or from QP1, into m as a
// CM message. It returns
//   - ErrTruncated if b is shorter than MADSize;
//   - ErrBadLength if b is longer (a MAD on RoCE is exactly one 256-byte
//     UD payload);
//   - ErrBadMAD if the base version is not 1, the class not the CM, the
//     class version not 2, or the method not Send;
//   - ErrBadAttr if the attribute is not REQ, MRA, REJ, REP, RTU, DREQ,
//     DREP, SIDR_REQ or SIDR_REP (LAP, APR and ClassPortInfo are not
//     implemented).
//
// Decode checks the layout, not the meaning: field values are the CM's to
// judge. On error m is reset to the zero MAD. Decode never panics.
func (m *MAD) Decode(b []byte) error {
	*m = MAD{}
	switch {
	case len(b) < MADSize:
		return wire.ErrTruncated
	case len(b) > MADSize:
		return wire.ErrBadLength
	}
	h := MADHeader(b[:MADHeaderSize:MADHeaderSize])
	if err := checkCMHeader(h.BaseVersion(), h.MgmtClass(), h.ClassVersion(), h.Method(), h.AttrID()); err != nil {
		return err
	}
	data := b[MADHeaderSize:MADSize:MADSize]
	m.Header = h
	switch h.AttrID() {
	case AttrConnectRequest:
		m.REQ = data
	case AttrMsgRcptAck:
		m.MRA = data
	case AttrConnectReject:
		m.REJ = data
	case AttrConnectReply:
		m.REP = data
	case AttrReadyToUse:
		m.RTU = data
	case AttrDisconnectRequest:
		m.DREQ = data
	case AttrDisconnectReply:
		m.DREP = data
	case AttrServiceIDResReq:
		m.SIDRREQ = data
	case AttrServiceIDResReqResp:
		m.SIDRREP = data
	}
	m.Raw = b
	return nil
}

// checkCMHeader validates the header fields Decode and Encode check.
func checkCMHeader(base uint8, class MgmtClass, version uint8, method MADMethod, attr AttrID) error {
	switch {
	case base != MADBaseVersion, class != MgmtClassCM, version != CMClassVersion, method != MethodSend:
		return ErrBadMAD
	case !attr.cmDecoded():
		return ErrBadAttr
	}
	return nil
}

// AttrID returns the attribute ID of a decoded MAD.
func (m *MAD) AttrID() AttrID { return m.Header.AttrID() }

// Fields copies the header and the fields of the message m carries into f
// and zeroes the other messages, so that f.Encode rebuilds the MAD byte for
// byte. m must hold a decoded MAD.
func (m *MAD) Fields(f *MADFields) {
	*f = MADFields{Header: m.Header.Fields()}
	switch {
	case m.REQ != nil:
		f.REQ = m.REQ.Fields()
	case m.MRA != nil:
		f.MRA = m.MRA.Fields()
	case m.REJ != nil:
		f.REJ = m.REJ.Fields()
	case m.REP != nil:
		f.REP = m.REP.Fields()
	case m.RTU != nil:
		f.RTU = m.RTU.Fields()
	case m.DREQ != nil:
		f.DREQ = m.DREQ.Fields()
	case m.DREP != nil:
		f.DREP = m.DREP.Fields()
	case m.SIDRREQ != nil:
		f.SIDRREQ = m.SIDRREQ.Fields()
	case m.SIDRREP != nil:
		f.SIDRREP = m.SIDRREP.Fields()
	}
}

// MADFields describes a CM MAD to encode: the header and the message its
// attribute ID names (the others are ignored).
type MADFields struct {
	Header MADHeaderFields
	REQ    REQFields
	MRA    MRAFields
	REJ    REJFields
	REP    REPFields
	RTU    RTUFields
	DREQ   DREQFields
	DREP   DREPFields
	// SIDRREQ and SIDRREP are the service ID resolution messages.
	SIDRREQ SIDRREQFields
	SIDRREP SIDRREPFields
}

// Encode writes the MAD f describes into buf[:MADSize], typically the
// payload of a UD SEND Only to QP1 (see Fields.EncodeHeaders with payload
// length MADSize), and returns MADSize. It returns
//   - ErrBadMAD or ErrBadAttr if the header is one Decode rejects;
//   - ErrShortBuffer if buf is shorter than MADSize.
//
// Fields wider than their wire field are truncated to it.
func (f *MADFields) Encode(buf []byte) (n int, err error) {
	h := &f.Header
	if err := checkCMHeader(h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method, h.AttrID); err != nil {
		return 0, err
	}
	if len(buf) < MADSize {
		return 0, wire.ErrShortBuffer
	}
	MADHeader(buf[:MADHeaderSize]).Encode(h)
	data := buf[MADHeaderSize:MADSize]
	switch h.AttrID {
	case AttrConnectRequest:
		REQ(data).Encode(&f.REQ)
	case AttrMsgRcptAck:
		MRA(data).Encode(&f.MRA)
	case AttrConnectReject:
		REJ(data).Encode(&f.REJ)
	case AttrConnectReply:
		REP(data).Encode(&f.REP)
	case AttrReadyToUse:
		RTU(data).Encode(&f.RTU)
	case AttrDisconnectRequest:
		DREQ(data).Encode(&f.DREQ)
	case AttrDisconnectReply:
		DREP(data).Encode(&f.DREP)
	case AttrServiceIDResReq:
		SIDRREQ(data).Encode(&f.SIDRREQ)
	case AttrServiceIDResReqResp:
		SIDRREP(data).Encode(&f.SIDRREP)
	}
	return MADSize, nil
}
