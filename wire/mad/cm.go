package mad

import (
	"encoding/binary"

	"github.com/softnic/softnic/wire"
)

// The CM messages (IBTA 12.6) are views of the CMDataSize bytes after a MAD
// header; MAD.Decode hands them out. Every message starts with the sender's
// communication ID; every message but the REQ follows it with the
// receiver's. What is left of the 232 bytes after the fields is private
// data, the consumer's to fill (rdma_cm puts its CMAHeader at the start of
// a REQ's).
const (
	REQPrivateDataSize  = 92
	MRAPrivateDataSize  = 222
	REJPrivateDataSize  = 148
	REJARISize          = 72 // additional reject information
	REPPrivateDataSize  = 196
	RTUPrivateDataSize  = 224
	DREQPrivateDataSize = 220
	DREPPrivateDataSize = 224
	// CMPathSize is the length of a path description in a REQ.
	CMPathSize = 44
)

// Offsets shared by the CM messages.
const (
	cmLocalCommID  = 0
	cmRemoteCommID = 4
)

// bitfield returns the width-bit field of b that starts shift bits above bit 0.
func bitfield(b byte, shift, width uint) uint8 { return b >> shift & (1<<width - 1) }

// packBits returns v's low width bits moved shift bits up.
func packBits(v uint8, shift, width uint) byte { return v & (1<<width - 1) << shift }

// bit returns mask if v is set, else 0.
func bit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}

// put24 stores the low 24 bits of v big-endian in b[0:3].
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

// REQ is a view of a ConnectRequest (IBTA 12.6.5; Table 106 in release
// 1.4), sent by the active side to open a connection:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Reserved                            |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      ServiceID (8 bytes)                      |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local CA GUID (8 bytes)                    |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Reserved                            |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local QPN                   |  Resp. Res.   |  32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local EECN                  |  Init. Depth  |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote EECN                  | RemTO   |TST|F|  40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Starting PSN                 | LocTO   |Retry|  44
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             P_Key             |  MTU  |D| RNR | MaxCM |S| Ext |  48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Primary path (44 bytes, CMPath)                 |  52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Alternate path (44 bytes, CMPath)                |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Private Data (92 bytes)                     | 140
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RemTO/LocTO: remote and local CM response timeouts, TST: transport service
// type, F: end-to-end flow control, Retry: retry count, D: RDC exists, RNR:
// RNR retry count, MaxCM: max CM retries, S: SRQ, Ext: extended transport
// type. The accessors do not check the length; MAD.Decode does.
type REQ []byte

const (
	reqResv32a         = 4
	reqServiceID       = 8
	reqLocalCAGUID     = 16
	reqResv32b         = 24
	reqLocalQKey       = 28
	reqLocalQPN        = 32
	reqResponderRes    = 35
	reqLocalEECN       = 36
	reqInitiatorDepth  = 39
	reqRemoteEECN      = 40
	reqRemoteTimeout   = 43 // remote CM response timeout, TST, F
	reqStartingPSN     = 44
	reqLocalTimeout    = 47 // local CM response timeout, retry count
	reqPKey            = 48
	reqMTU             = 50 // path MTU, RDC exists, RNR retry count
	reqMaxCMRetries    = 51 // max CM retries, SRQ, extended transport type
	reqPrimaryPath     = 52
	reqAlternatePath   = reqPrimaryPath + CMPathSize
	reqPrivateData     = reqAlternatePath + CMPathSize
	reqTimeoutShift    = 3
	reqTSTShift        = 1
	reqMTUShift        = 4
	reqRDCExists       = 0x08
	reqMaxCMShift      = 4
	reqSRQ             = 0x08
	reqFlowControl     = 0x01
	qpn24Shift         = 8 // a 24-bit QPN, EECN or PSN in the top of a word
	cmTimeoutWidth     = 5
	retryCountWidth    = 3
	transportTypeWidth = 2
	mtuWidth           = 4
)

// REQFields holds every field of a REQ, reserved bits included, so that
// decoding and encoding round-trips a REQ byte for byte.
type REQFields struct {
	LocalCommID             uint32
	Resv32a                 uint32
	ServiceID               ServiceID
	LocalCAGUID             uint64
	Resv32b                 uint32
	LocalQKey               uint32 // UD and RD only; 0 for RC
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8  // RDMA READs and atomics the requester accepts at once
	LocalEECN               uint32 // 24 bits, RD only
	InitiatorDepth          uint8  // RDMA READs and atomics the requester issues at once
	RemoteEECN              uint32 // 24 bits, RD only
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 µs × 2^n
	TransportServiceType    uint8  // 2 bits: 0 RC, 1 UC, 2 RD, 3 extended (see below)
	EndToEndFlowControl     bool
	StartingPSN             wire.PSN
	LocalCMResponseTimeout  uint8 // 5 bits: 4.096 µs × 2^n
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 wire.MTU // 4 bits
	RDCExists               bool     // RD only
	RNRRetryCount           uint8
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits, with transport service type 3: 1 is XRC
	PrimaryPath             CMPathFields
	AlternatePath           CMPathFields // all zero when there is none
	PrivateData             [REQPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// ServiceID returns the service the REQ asks to connect to.
func (r REQ) ServiceID() ServiceID { return ServiceID(binary.BigEndian.Uint64(r[reqServiceID:])) }

// LocalCAGUID returns the sender's channel adapter GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[reqLocalCAGUID:]) }

// LocalQKey returns the sender's Q_Key.
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[reqLocalQKey:]) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return binary.BigEndian.Uint32(r[reqLocalQPN:]) >> qpn24Shift }

// ResponderResources returns how many RDMA READs and atomics the sender
// accepts at once.
func (r REQ) ResponderResources() uint8 { return r[reqResponderRes] }

// LocalEECN returns the sender's EE context number.
func (r REQ) LocalEECN() uint32 { return binary.BigEndian.Uint32(r[reqLocalEECN:]) >> qpn24Shift }

// InitiatorDepth returns how many RDMA READs and atomics the sender issues
// at once.
func (r REQ) InitiatorDepth() uint8 { return r[reqInitiatorDepth] }

// RemoteEECN returns the receiver's EE context number.
func (r REQ) RemoteEECN() uint32 { return binary.BigEndian.Uint32(r[reqRemoteEECN:]) >> qpn24Shift }

// RemoteCMResponseTimeout returns the 5-bit exponent of the time within
// which the receiver is expected to answer.
func (r REQ) RemoteCMResponseTimeout() uint8 {
	return bitfield(r[reqRemoteTimeout], reqTimeoutShift, cmTimeoutWidth)
}

// TransportServiceType returns the 2-bit transport of the QP to connect:
// 0 RC, 1 UC, 2 RD, 3 the extended transport type (Linux: XRC).
func (r REQ) TransportServiceType() uint8 {
	return bitfield(r[reqRemoteTimeout], reqTSTShift, transportTypeWidth)
}

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REQ) EndToEndFlowControl() bool { return r[reqRemoteTimeout]&reqFlowControl != 0 }

// StartingPSN returns the PSN the sender's first request will carry.
func (r REQ) StartingPSN() wire.PSN {
	return wire.PSN(binary.BigEndian.Uint32(r[reqStartingPSN:]) >> qpn24Shift)
}

// LocalCMResponseTimeout returns the 5-bit exponent of the time within
// which the sender answers.
func (r REQ) LocalCMResponseTimeout() uint8 {
	return bitfield(r[reqLocalTimeout], reqTimeoutShift, cmTimeoutWidth)
}

// RetryCount returns how often the sender's QP retransmits on a timeout.
func (r REQ) RetryCount() uint8 { return bitfield(r[reqLocalTimeout], 0, retryCountWidth) }

// PKey returns the partition key.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[reqPKey:]) }

// PathMTU returns the path MTU code.
func (r REQ) PathMTU() wire.MTU { return wire.MTU(bitfield(r[reqMTU], reqMTUShift, mtuWidth)) }

// RDCExists returns the RDC-exists bit.
func (r REQ) RDCExists() bool { return r[reqMTU]&reqRDCExists != 0 }

// RNRRetryCount returns how often the receiver's QP may retry after an RNR
// NAK (7: without limit).
func (r REQ) RNRRetryCount() uint8 { return bitfield(r[reqMTU], 0, retryCountWidth) }

// MaxCMRetries returns how often the sender resends a CM message that gets
// no answer.
func (r REQ) MaxCMRetries() uint8 { return bitfield(r[reqMaxCMRetries], reqMaxCMShift, 4) }

// SRQ returns whether the sender's QP uses a shared receive queue.
func (r REQ) SRQ() bool { return r[reqMaxCMRetries]&reqSRQ != 0 }

// ExtendedTransportType returns the 3-bit extended transport type.
func (r REQ) ExtendedTransportType() uint8 { return bitfield(r[reqMaxCMRetries], 0, 3) }

// PrimaryPath returns the primary path.
func (r REQ) PrimaryPath() CMPath { return CMPath(r[reqPrimaryPath:reqAlternatePath:reqAlternatePath]) }

// AlternatePath returns the alternate path, all zero when there is none.
func (r REQ) AlternatePath() CMPath { return CMPath(r[reqAlternatePath:reqPrivateData:reqPrivateData]) }

// PrivateData returns the private data.
func (r REQ) PrivateData() []byte { return r[reqPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID:             r.LocalCommID(),
		Resv32a:                 binary.BigEndian.Uint32(r[reqResv32a:]),
		ServiceID:               r.ServiceID(),
		LocalCAGUID:             r.LocalCAGUID(),
		Resv32b:                 binary.BigEndian.Uint32(r[reqResv32b:]),
		LocalQKey:               r.LocalQKey(),
		LocalQPN:                r.LocalQPN(),
		ResponderResources:      r.ResponderResources(),
		LocalEECN:               r.LocalEECN(),
		InitiatorDepth:          r.InitiatorDepth(),
		RemoteEECN:              r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		TransportServiceType:    r.TransportServiceType(),
		EndToEndFlowControl:     r.EndToEndFlowControl(),
		StartingPSN:             r.StartingPSN(),
		LocalCMResponseTimeout:  r.LocalCMResponseTimeout(),
		RetryCount:              r.RetryCount(),
		PKey:                    r.PKey(),
		PathMTU:                 r.PathMTU(),
		RDCExists:               r.RDCExists(),
		RNRRetryCount:           r.RNRRetryCount(),
		MaxCMRetries:            r.MaxCMRetries(),
		SRQ:                     r.SRQ(),
		ExtendedTransportType:   r.ExtendedTransportType(),
		PrimaryPath:             r.PrimaryPath().Fields(),
		AlternatePath:           r.AlternatePath().Fields(),
		PrivateData:             [REQPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message. Values wider than their field are
// truncated to it.
func (r REQ) Encode(f *REQFields) {
	be := binary.BigEndian
	be.PutUint32(r[cmLocalCommID:], f.LocalCommID)
	be.PutUint32(r[reqResv32a:], f.Resv32a)
	be.PutUint64(r[reqServiceID:], uint64(f.ServiceID))
	be.PutUint64(r[reqLocalCAGUID:], f.LocalCAGUID)
	be.PutUint32(r[reqResv32b:], f.Resv32b)
	be.PutUint32(r[reqLocalQKey:], f.LocalQKey)
	be.PutUint32(r[reqLocalQPN:], f.LocalQPN<<qpn24Shift|uint32(f.ResponderResources))
	be.PutUint32(r[reqLocalEECN:], f.LocalEECN<<qpn24Shift|uint32(f.InitiatorDepth))
	put24(r[reqRemoteEECN:], f.RemoteEECN)
	r[reqRemoteTimeout] = packBits(f.RemoteCMResponseTimeout, reqTimeoutShift, cmTimeoutWidth) |
		packBits(f.TransportServiceType, reqTSTShift, transportTypeWidth) |
		bit(f.EndToEndFlowControl, reqFlowControl)
	put24(r[reqStartingPSN:], uint32(f.StartingPSN))
	r[reqLocalTimeout] = packBits(f.LocalCMResponseTimeout, reqTimeoutShift, cmTimeoutWidth) |
		packBits(f.RetryCount, 0, retryCountWidth)
	be.PutUint16(r[reqPKey:], f.PKey)
	r[reqMTU] = packBits(uint8(f.PathMTU), reqMTUShift, mtuWidth) | bit(f.RDCExists, reqRDCExists) |
		packBits(f.RNRRetryCount, 0, retryCountWidth)
	r[reqMaxCMRetries] = packBits(f.MaxCMRetries, reqMaxCMShift, 4) | bit(f.SRQ, reqSRQ) |
		packBits(f.ExtendedTransportType, 0, 3)
	r.PrimaryPath().Encode(&f.PrimaryPath)
	r.AlternatePath().Encode(&f.AlternatePath)
	copy(r[reqPrivateData:], f.PrivateData[:])
}

// CMPath is a view of the description of a path in a REQ (IBTA 12.6.5;
// the primary and the alternate path have the same layout):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Local Port LID         |        Remote Port LID        |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Local Port GID (16 bytes)                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote Port GID (16 bytes)                   |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Flow Label               |   Resv    |  Pkt Rate |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Traffic Class |   Hop Limit   |  SL   |L|Resv | ACK TO  |Resv |  40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// L: subnet local. On RoCE there are no LIDs: Linux sends 0xFFFF, the
// permissive LID, and the GIDs are the IP addresses (see GID). In the
// alternate path of a REQ Linux calls the top bit of the last Resv "SAP
// supported"; softnic keeps it as reserved.
type CMPath []byte

const (
	pathLocalLID     = 0
	pathRemoteLID    = 2
	pathLocalGID     = 4
	pathRemoteGID    = 20
	pathFlowLabel    = 36 // flow label, reserved, packet rate
	pathTrafficClass = 40
	pathHopLimit     = 41
	pathSL           = 42 // SL, subnet local, reserved
	pathACKTimeout   = 43 // local ACK timeout, reserved
	flowLabelShift   = 12
	flowLabelMask    = 1<<20 - 1
	pathResv6Shift   = 6
	sixBits          = 0x3f
	pathSLShift      = 4
	pathSubnetLocal  = 0x08
)

// CMPathFields holds every field of a CMPath, reserved bits included.
type CMPathFields struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        wire.GID
	RemoteGID       wire.GID
	FlowLabel       uint32 // 20 bits
	Resv6           uint8
	PacketRate      uint8 // 6 bits, the IBTA rate code (0: the port's current rate)
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits, service level
	SubnetLocal     bool
	Resv3a          uint8
	LocalACKTimeout uint8 // 5 bits: 4.096 µs × 2^n
	Resv3b          uint8
}

// LocalLID returns the sender's port LID.
func (p CMPath) LocalLID() uint16 { return binary.BigEndian.Uint16(p[pathLocalLID:]) }

// RemoteLID returns the receiver's port LID.
func (p CMPath) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[pathRemoteLID:]) }

// LocalGID returns the sender's port GID.
func (p CMPath) LocalGID() wire.GID { return wire.GID(p[pathLocalGID:pathRemoteGID]) }

// RemoteGID returns the receiver's port GID.
func (p CMPath) RemoteGID() wire.GID { return wire.GID(p[pathRemoteGID:pathFlowLabel]) }

// FlowLabel returns the 20-bit flow label. rdma_cm derives it from the
// ports, and rxe derives the UDP source port of the connection from it.
func (p CMPath) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(p[pathFlowLabel:]) >> flowLabelShift
}

// PacketRate returns the 6-bit rate code.
func (p CMPath) PacketRate() uint8 { return p[pathFlowLabel+3] & sixBits }

// TrafficClass returns the traffic class.
func (p CMPath) TrafficClass() uint8 { return p[pathTrafficClass] }

// HopLimit returns the hop limit.
func (p CMPath) HopLimit() uint8 { return p[pathHopLimit] }

// SL returns the service level.
func (p CMPath) SL() uint8 { return bitfield(p[pathSL], pathSLShift, 4) }

// SubnetLocal returns whether the path stays in the sender's subnet.
func (p CMPath) SubnetLocal() bool { return p[pathSL]&pathSubnetLocal != 0 }

// LocalACKTimeout returns the 5-bit exponent of the QP's ACK timeout.
func (p CMPath) LocalACKTimeout() uint8 {
	return bitfield(p[pathACKTimeout], reqTimeoutShift, cmTimeoutWidth)
}

// Fields returns every field of the path.
func (p CMPath) Fields() CMPathFields {
	fl := binary.BigEndian.Uint32(p[pathFlowLabel:])
	return CMPathFields{
		LocalLID:        p.LocalLID(),
		RemoteLID:       p.RemoteLID(),
		LocalGID:        p.LocalGID(),
		RemoteGID:       p.RemoteGID(),
		FlowLabel:       fl >> flowLabelShift,
		Resv6:           uint8(fl>>pathResv6Shift) & sixBits,
		PacketRate:      uint8(fl) & sixBits,
		TrafficClass:    p.TrafficClass(),
		HopLimit:        p.HopLimit(),
		SL:              p.SL(),
		SubnetLocal:     p.SubnetLocal(),
		Resv3a:          bitfield(p[pathSL], 0, 3),
		LocalACKTimeout: p.LocalACKTimeout(),
		Resv3b:          bitfield(p[pathACKTimeout], 0, 3),
	}
}

// Encode writes f into the path. Values wider than their field are
// truncated to it.
func (p CMPath) Encode(f *CMPathFields) {
	be := binary.BigEndian
	be.PutUint16(p[pathLocalLID:], f.LocalLID)
	be.PutUint16(p[pathRemoteLID:], f.RemoteLID)
	copy(p[pathLocalGID:], f.LocalGID[:])
	copy(p[pathRemoteGID:], f.RemoteGID[:])
	be.PutUint32(p[pathFlowLabel:], f.FlowLabel&flowLabelMask<<flowLabelShift|
		uint32(f.Resv6&sixBits)<<pathResv6Shift|uint32(f.PacketRate&sixBits))
	p[pathTrafficClass] = f.TrafficClass
	p[pathHopLimit] = f.HopLimit
	p[pathSL] = packBits(f.SL, pathSLShift, 4) | bit(f.SubnetLocal, pathSubnetLocal) | packBits(f.Resv3a, 0, 3)
	p[pathACKTimeout] = packBits(f.LocalACKTimeout, reqTimeoutShift, cmTimeoutWidth) | packBits(f.Resv3b, 0, 3)
}

// MRA is a view of a MessageReceiptAcknowledgement (IBTA 12.6.6, Table
// 107 in release 1.4): the receiver of a REQ, REP or LAP needs longer than
// the sender's CM response timeout to answer, and tells it how long to wait
// instead:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Remote Communication ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Msg|   Resv    | SvcTO   |Resv |                               |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                  Private Data (222 bytes)                     |  10
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Msg: the message MRAed, SvcTO: the service timeout.
type MRA []byte

const (
	mraMessage        = 8
	mraServiceTimeout = 9
	mraPrivateData    = 10
	cmMessageShift    = 6
)

// MRAFields holds every field of an MRA, reserved bits included.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   CMMessage
	Resv6          uint8
	ServiceTimeout uint8 // 5 bits: 4.096 µs × 2^n
	Resv3          uint8
	PrivateData    [MRAPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (m MRA) LocalCommID() uint32 { return binary.BigEndian.Uint32(m[cmLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (m MRA) RemoteCommID() uint32 { return binary.BigEndian.Uint32(m[cmRemoteCommID:]) }

// MessageMRAed returns which message is acknowledged: a REQ, a REP or (as
// CMMessageOther) a LAP.
func (m MRA) MessageMRAed() CMMessage { return CMMessage(m[mraMessage] >> cmMessageShift) }

// ServiceTimeout returns the 5-bit exponent of the time the sender of the
// acknowledged message should now wait, on top of its CM response timeout.
func (m MRA) ServiceTimeout() uint8 {
	return bitfield(m[mraServiceTimeout], reqTimeoutShift, cmTimeoutWidth)
}

// PrivateData returns the private data.
func (m MRA) PrivateData() []byte { return m[mraPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (m MRA) Fields() MRAFields {
	return MRAFields{
		LocalCommID:    m.LocalCommID(),
		RemoteCommID:   m.RemoteCommID(),
		MessageMRAed:   m.MessageMRAed(),
		Resv6:          m[mraMessage] & sixBits,
		ServiceTimeout: m.ServiceTimeout(),
		Resv3:          bitfield(m[mraServiceTimeout], 0, 3),
		PrivateData:    [MRAPrivateDataSize]byte(m.PrivateData()),
	}
}

// Encode writes f into the message. Values wider than their field are
// truncated to it.
func (m MRA) Encode(f *MRAFields) {
	putCommIDs(m, f.LocalCommID, f.RemoteCommID)
	m[mraMessage] = packBits(uint8(f.MessageMRAed), cmMessageShift, 2) | f.Resv6&sixBits
	m[mraServiceTimeout] = packBits(f.ServiceTimeout, reqTimeoutShift, cmTimeoutWidth) | packBits(f.Resv3, 0, 3)
	copy(m[mraPrivateData:], f.PrivateData[:])
}

// putCommIDs writes the local and remote communication IDs that start every
// CM message but the REQ.
func putCommIDs(b []byte, local, remote uint32) {
	binary.BigEndian.PutUint32(b[cmLocalCommID:], local)
	binary.BigEndian.PutUint32(b[cmRemoteCommID:], remote)
}

// CMMessage names the message an MRA acknowledges or a REJ rejects (a 2-bit
// field).
type CMMessage uint8

// The messages an MRA or a REJ may refer to.
const (
	CMMessageREQ CMMessage = 0
	CMMessageREP CMMessage = 1
	// CMMessageOther is a LAP in an MRA; in a REJ, no message: the REJ is
	// sent on its own, for instance after a timeout.
	CMMessageOther CMMessage = 2
)

var cmMessageNames = [...]string{CMMessageREQ: "REQ", CMMessageREP: "REP", CMMessageOther: "other"}

// String returns "REQ", "REP", "other" or "CMMessage(3)".
func (m CMMessage) String() string { return string(m.appendName(nil)) }

func (m CMMessage) appendName(dst []byte) []byte {
	if int(m) < len(cmMessageNames) {
		return append(dst, cmMessageNames[m]...)
	}
	dst = append(dst, "CMMessage("...)
	return append(appendUint(dst, uint64(m)), ')')
}

// REJ is a view of a Reject (IBTA 12.6.7, Table 108 in release 1.4), the
// refusal of a REQ or REP, or the end of a connection attempt that timed
// out:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Remote Communication ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Msg|   Resv    | ARI Length  |R|            Reason             |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Additional Reject Information (ARI, 72 bytes)         |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (148 bytes)                     |  84
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Msg: the message rejected; ARI Length: how many bytes of the ARI are
// meaningful.
type REJ []byte

const (
	rejMessage     = 8
	rejARILength   = 9
	rejReason      = 10
	rejARI         = 12
	rejPrivateData = rejARI + REJARISize
	rejARILenShift = 1
)

// REJFields holds every field of a REJ, reserved bits included.
type REJFields struct {
	LocalCommID     uint32
	RemoteCommID    uint32
	MessageRejected CMMessage
	Resv6           uint8
	ARILength       uint8 // 7 bits
	Resv1           uint8
	Reason          RejectReason
	ARI             [REJARISize]byte
	PrivateData     [REJPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (r REJ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID (0 when a REQ is
// rejected: the requester has not learnt one yet).
func (r REJ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// MessageRejected returns which message is rejected.
func (r REJ) MessageRejected() CMMessage { return CMMessage(r[rejMessage] >> cmMessageShift) }

// ARILength returns how many bytes of the ARI are meaningful.
func (r REJ) ARILength() uint8 { return bitfield(r[rejARILength], rejARILenShift, 7) }

// Reason returns why the message is rejected.
func (r REJ) Reason() RejectReason { return RejectReason(binary.BigEndian.Uint16(r[rejReason:])) }

// ARI returns the whole additional reject information field; its first
// ARILength bytes are meaningful.
func (r REJ) ARI() []byte { return r[rejARI:rejPrivateData:rejPrivateData] }

// PrivateData returns the private data.
func (r REJ) PrivateData() []byte { return r[rejPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r REJ) Fields() REJFields {
	return REJFields{
		LocalCommID:     r.LocalCommID(),
		RemoteCommID:    r.RemoteCommID(),
		MessageRejected: r.MessageRejected(),
		Resv6:           r[rejMessage] & sixBits,
		ARILength:       r.ARILength(),
		Resv1:           r[rejARILength] & 1,
		Reason:          r.Reason(),
		ARI:             [REJARISize]byte(r.ARI()),
		PrivateData:     [REJPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message. Values wider than their field are
// truncated to it.
func (r REJ) Encode(f *REJFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	r[rejMessage] = packBits(uint8(f.MessageRejected), cmMessageShift, 2) | f.Resv6&sixBits
	r[rejARILength] = packBits(f.ARILength, rejARILenShift, 7) | f.Resv1&1
	binary.BigEndian.PutUint16(r[rejReason:], uint16(f.Reason))
	copy(r[rejARI:], f.ARI[:])
	copy(r[rejPrivateData:], f.PrivateData[:])
}

// RejectReason is the reason code of a REJ (IBTA 12.6.7).
type RejectReason uint16

// The reject reasons. rdma_cm sends RejectConsumer when the application
// rejects and RejectInvalidServiceID when nothing listens on the port.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupportedRequest        RejectReason = 5
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConnection           RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumer                  RejectReason = 28
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
	RejectVendorOptionNotSupported  RejectReason = 35 // as Linux numbers it
)

var rejectNames = [...]string{
	RejectNoQP:                      "no QP available",
	RejectNoEEC:                     "no EE context available",
	RejectNoResources:               "no resources available",
	RejectTimeout:                   "timeout",
	RejectUnsupportedRequest:        "unsupported request",
	RejectInvalidCommID:             "invalid communication ID",
	RejectInvalidCommInstance:       "invalid communication instance",
	RejectInvalidServiceID:          "invalid service ID",
	RejectInvalidTransportType:      "invalid transport service type",
	RejectStaleConnection:           "stale connection",
	RejectRDCNotExist:               "RDC does not exist",
	RejectInvalidGID:                "primary remote port GID rejected",
	RejectInvalidLID:                "primary remote port LID rejected",
	RejectInvalidSL:                 "invalid primary SL",
	RejectInvalidTrafficClass:       "invalid primary traffic class",
	RejectInvalidHopLimit:           "invalid primary hop limit",
	RejectInvalidPacketRate:         "invalid primary packet rate",
	RejectInvalidAltGID:             "alternate remote port GID rejected",
	RejectInvalidAltLID:             "alternate remote port LID rejected",
	RejectInvalidAltSL:              "invalid alternate SL",
	RejectInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejectInvalidAltHopLimit:        "invalid alternate hop limit",
	RejectInvalidAltPacketRate:      "invalid alternate packet rate",
	RejectPortCMRedirect:            "port and CM redirection",
	RejectPortRedirect:              "port redirection not supported",
	RejectInvalidMTU:                "invalid path MTU",
	RejectInsufficientRespResources: "insufficient responder resources",
	RejectConsumer:                  "consumer reject",
	RejectInvalidRNRRetry:           "invalid RNR NAK retry count",
	RejectDuplicateLocalCommID:      "duplicate local communication ID",
	RejectInvalidClassVersion:       "unsupported class version",
	RejectInvalidFlowLabel:          "invalid primary flow label",
	RejectInvalidAltFlowLabel:       "invalid alternate flow label",
	RejectVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the reason's description, such as "consumer reject", or
// "RejectReason(n)" for a code with none.
func (r RejectReason) String() string { return string(r.appendName(nil)) }

func (r RejectReason) appendName(dst []byte) []byte {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return append(dst, rejectNames[r]...)
	}
	dst = append(dst, "RejectReason("...)
	return append(appendUint(dst, uint64(r)), ')')
}

// REP is a view of a ConnectReply (IBTA 12.6.8, Table 110 in release
// 1.4), the passive side's acceptance of a REQ:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Remote Communication ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local QPN                   |   Reserved    |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local EECN                  |   Reserved    |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Starting PSN                 |   Reserved    |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Resp. Res.   |  Init. Depth  | TgtAck  |FO |F| RNR |S| Resv  |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local CA GUID (8 bytes)                    |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (196 bytes)                     |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// TgtAck: target ACK delay, FO: failover accepted, F: end-to-end flow
// control, RNR: RNR retry count, S: SRQ.
type REP []byte

const (
	repLocalQKey      = 8
	repLocalQPN       = 12
	repLocalEECN      = 16
	repStartingPSN    = 20
	repResponderRes   = 24
	repInitiatorDepth = 25
	repTargetACKDelay = 26 // target ACK delay, failover accepted, F
	repRNRRetryCount  = 27 // RNR retry count, SRQ, reserved
	repLocalCAGUID    = 28
	repPrivateData    = 36
	repFailoverShift  = 1
	repRNRShift       = 5
	repSRQ            = 0x10
)

// REPFields holds every field of a REP, reserved bits included.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32 // UD and RD only; 0 for RC
	LocalQPN            uint32 // 24 bits
	Resv8a              uint8
	LocalEECN           uint32 // 24 bits, RD only
	Resv8b              uint8
	StartingPSN         wire.PSN
	Resv8c              uint8
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	Resv4               uint8
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID, the REQ's local one.
func (r REP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// LocalQKey returns the sender's Q_Key.
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[repLocalQKey:]) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return binary.BigEndian.Uint32(r[repLocalQPN:]) >> qpn24Shift }

// LocalEECN returns the sender's EE context number.
func (r REP) LocalEECN() uint32 { return binary.BigEndian.Uint32(r[repLocalEECN:]) >> qpn24Shift }

// StartingPSN returns the PSN the sender's first request will carry.
func (r REP) StartingPSN() wire.PSN {
	return wire.PSN(binary.BigEndian.Uint32(r[repStartingPSN:]) >> qpn24Shift)
}

// ResponderResources returns how many RDMA READs and atomics the sender
// accepts at once.
func (r REP) ResponderResources() uint8 { return r[repResponderRes] }

// InitiatorDepth returns how many RDMA READs and atomics the sender issues
// at once.
func (r REP) InitiatorDepth() uint8 { return r[repInitiatorDepth] }

// TargetACKDelay returns the 5-bit exponent of the longest time the sender
// takes to acknowledge a request.
func (r REP) TargetACKDelay() uint8 {
	return bitfield(r[repTargetACKDelay], reqTimeoutShift, cmTimeoutWidth)
}

// FailoverAccepted returns the 2-bit failover-accepted code (0: the
// alternate path is accepted).
func (r REP) FailoverAccepted() uint8 { return bitfield(r[repTargetACKDelay], repFailoverShift, 2) }

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REP) EndToEndFlowControl() bool { return r[repTargetACKDelay]&reqFlowControl != 0 }

// RNRRetryCount returns how often the receiver's QP may retry after an RNR
// NAK (7: without limit).
func (r REP) RNRRetryCount() uint8 {
	return bitfield(r[repRNRRetryCount], repRNRShift, retryCountWidth)
}

// SRQ returns whether the sender's QP uses a shared receive queue.
func (r REP) SRQ() bool { return r[repRNRRetryCount]&repSRQ != 0 }

// LocalCAGUID returns the sender's channel adapter GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[repLocalCAGUID:]) }

// PrivateData returns the private data.
func (r REP) PrivateData() []byte { return r[repPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID:         r.LocalCommID(),
		RemoteCommID:        r.RemoteCommID(),
		LocalQKey:           r.LocalQKey(),
		LocalQPN:            r.LocalQPN(),
		Resv8a:              r[repLocalQPN+3],
		LocalEECN:           r.LocalEECN(),
		Resv8b:              r[repLocalEECN+3],
		StartingPSN:         r.StartingPSN(),
		Resv8c:              r[repStartingPSN+3],
		ResponderResources:  r.ResponderResources(),
		InitiatorDepth:      r.InitiatorDepth(),
		TargetACKDelay:      r.TargetACKDelay(),
		FailoverAccepted:    r.FailoverAccepted(),
		EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount:       r.RNRRetryCount(),
		SRQ:                 r.SRQ(),
		Resv4:               bitfield(r[repRNRRetryCount], 0, 4),
		LocalCAGUID:         r.LocalCAGUID(),
		PrivateData:         [REPPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message. Values wider than their field are
// truncated to it.
func (r REP) Encode(f *REPFields) {
	be := binary.BigEndian
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	be.PutUint32(r[repLocalQKey:], f.LocalQKey)
	be.PutUint32(r[repLocalQPN:], f.LocalQPN<<qpn24Shift|uint32(f.Resv8a))
	be.PutUint32(r[repLocalEECN:], f.LocalEECN<<qpn24Shift|uint32(f.Resv8b))
	be.PutUint32(r[repStartingPSN:], uint32(f.StartingPSN)<<qpn24Shift|uint32(f.Resv8c))
	r[repResponderRes] = f.ResponderResources
	r[repInitiatorDepth] = f.InitiatorDepth
	r[repTargetACKDelay] = packBits(f.TargetACKDelay, reqTimeoutShift, cmTimeoutWidth) |
		packBits(f.FailoverAccepted, repFailoverShift, 2) | bit(f.EndToEndFlowControl, reqFlowControl)
	r[repRNRRetryCount] = packBits(f.RNRRetryCount, repRNRShift, retryCountWidth) | bit(f.SRQ, repSRQ) |
		packBits(f.Resv4, 0, 4)
	be.PutUint64(r[repLocalCAGUID:], f.LocalCAGUID)
	copy(r[repPrivateData:], f.PrivateData[:])
}

// RTU is a view of a ReadyToUse (IBTA 12.6.9, Table 111 in release 1.4),
// the active side's answer to a REP, after which both QPs may carry
// traffic:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Remote Communication ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (224 bytes)                     |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A DREP has the same layout.
type RTU []byte

const rtuPrivateData = 8

// RTUFields holds every field of an RTU.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (r RTU) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// PrivateData returns the private data.
func (r RTU) PrivateData() []byte { return r[rtuPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r RTU) Fields() RTUFields {
	return RTUFields{
		LocalCommID:  r.LocalCommID(),
		RemoteCommID: r.RemoteCommID(),
		PrivateData:  [RTUPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message.
func (r RTU) Encode(f *RTUFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	copy(r[rtuPrivateData:], f.PrivateData[:])
}

// DREP is a view of a DisconnectReply (IBTA 12.6.11, Table 113 in release
// 1.4), the answer to a DREQ. Its layout is the RTU's.
type DREP []byte

// DREPFields holds every field of a DREP.
type DREPFields RTUFields

// LocalCommID returns the sender's communication ID.
func (d DREP) LocalCommID() uint32 { return RTU(d).LocalCommID() }

// RemoteCommID returns the receiver's communication ID.
func (d DREP) RemoteCommID() uint32 { return RTU(d).RemoteCommID() }

// PrivateData returns the private data.
func (d DREP) PrivateData() []byte { return RTU(d).PrivateData() }

// Fields returns every field of the message.
func (d DREP) Fields() DREPFields { return DREPFields(RTU(d).Fields()) }

// Encode writes f into the message.
func (d DREP) Encode(f *DREPFields) { RTU(d).Encode((*RTUFields)(f)) }

// DREQ is a view of a DisconnectRequest (IBTA 12.6.10, Table 112 in
// release 1.4), sent by either side to close a connection:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local Communication ID                     |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Remote Communication ID                     |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Remote QPN/EECN                 |   Reserved    |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (220 bytes)                     |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DREQ []byte

const (
	dreqRemoteQPN   = 8
	dreqPrivateData = 12
)

// DREQFields holds every field of a DREQ, the reserved byte included.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: the receiver's QPN (or EECN for RD)
	Resv8        uint8
	PrivateData  [DREQPrivateDataSize]byte
}

// LocalCommID returns the sender's communication ID.
func (d DREQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(d[cmLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (d DREQ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(d[cmRemoteCommID:]) }

// RemoteQPN returns the receiver's QP number (EE context number for RD).
func (d DREQ) RemoteQPN() uint32 { return binary.BigEndian.Uint32(d[dreqRemoteQPN:]) >> qpn24Shift }

// PrivateData returns the private data.
func (d DREQ) PrivateData() []byte { return d[dreqPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (d DREQ) Fields() DREQFields {
	return DREQFields{
		LocalCommID:  d.LocalCommID(),
		RemoteCommID: d.RemoteCommID(),
		RemoteQPN:    d.RemoteQPN(),
		Resv8:        d[dreqRemoteQPN+3],
		PrivateData:  [DREQPrivateDataSize]byte(d.PrivateData()),
	}
}

// Encode writes f into the message; RemoteQPN is truncated to 24 bits.
func (d DREQ) Encode(f *DREQFields) {
	putCommIDs(d, f.LocalCommID, f.RemoteCommID)
	binary.BigEndian.PutUint32(d[dreqRemoteQPN:], f.RemoteQPN<<qpn24Shift|uint32(f.Resv8))
	copy(d[dreqPrivateData:], f.PrivateData[:])
}
