package mad

import (
	"encoding/binary"
)

// Service ID Resolution (SIDR, IBTA 12.11) is how the active side of an
// unreliable datagram service learns the QP that serves a service ID: it
// sends a SIDR_REQ, and the passive side answers with a SIDR_REP naming
// the QP and its Q_Key, or why it has none. rdma_cm's UDP port space
// (RDMA_PS_UDP) runs on it: the SIDR_REQ carries the service ID of the
// port and, at the start of its private data, rdma_cm's CMAHeader with the
// IP addresses, as a REQ does.
const (
	SIDRREQPrivateDataSize = 216
	SIDRREPPrivateDataSize = 136
	// SIDRClassPortInfoSize is the length of a SIDR_REP's additional
	// information: the ClassPortInfo of a redirection.
	SIDRClassPortInfoSize = 72
)

// SIDRREQ is a view of a ServiceIDResReq (IBTA 12.11.1, Table 119 in
// release 1.4):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             P_Key             |           Reserved            |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      ServiceID (8 bytes)                      |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (216 bytes)                     |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The request ID names the request for the requester, as a REQ's local
// communication ID does; the SIDR_REP repeats it. The accessors do not
// check the length; MAD.Decode does.
type SIDRREQ []byte

const (
	sidrReqRequestID   = 0
	sidrReqPKey        = 4
	sidrReqResv16      = 6
	sidrReqServiceID   = 8
	sidrReqPrivateData = 16
)

// SIDRREQFields holds every field of a SIDR_REQ, the reserved one
// included.
type SIDRREQFields struct {
	RequestID   uint32
	PKey        uint16
	Resv16      uint16
	ServiceID   ServiceID
	PrivateData [SIDRREQPrivateDataSize]byte
}

// RequestID returns the requester's ID of the request.
func (r SIDRREQ) RequestID() uint32 { return binary.BigEndian.Uint32(r[sidrReqRequestID:]) }

// PKey returns the partition key.
func (r SIDRREQ) PKey() uint16 { return binary.BigEndian.Uint16(r[sidrReqPKey:]) }

// ServiceID returns the service to resolve.
func (r SIDRREQ) ServiceID() ServiceID {
	return ServiceID(binary.BigEndian.Uint64(r[sidrReqServiceID:]))
}

// PrivateData returns the private data.
func (r SIDRREQ) PrivateData() []byte { return r[sidrReqPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{
		RequestID:   r.RequestID(),
		PKey:        r.PKey(),
		Resv16:      binary.BigEndian.Uint16(r[sidrReqResv16:]),
		ServiceID:   r.ServiceID(),
		PrivateData: [SIDRREQPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message.
func (r SIDRREQ) Encode(f *SIDRREQFields) {
	be := binary.BigEndian
	be.PutUint32(r[sidrReqRequestID:], f.RequestID)
	be.PutUint16(r[sidrReqPKey:], f.PKey)
	be.PutUint16(r[sidrReqResv16:], f.Resv16)
	be.PutUint64(r[sidrReqServiceID:], uint64(f.ServiceID))
	copy(r[sidrReqPrivateData:], f.PrivateData[:])
}

// SIDRREP is a view of a ServiceIDResReqResp (IBTA 12.11.2, Table 120 in
// release 1.4), the answer to a SIDR_REQ:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Status     |  AddInfoLen   |           Reserved            |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      QPN                      |   Reserved    |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      ServiceID (8 bytes)                      |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              ClassPortInfo (72 bytes, redirection)            |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (136 bytes)                     |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// AddInfoLen: how many bytes of the ClassPortInfo are meaningful. Linux
// leaves the two reserved fields zero (testdata/udaddy_rxe.pcap); it
// would put its enhanced connection establishment's vendor ID there only
// with ECE, which softnic does not offer, and softnic keeps them zero.
type SIDRREP []byte

const (
	sidrRepRequestID   = 0
	sidrRepStatus      = 4
	sidrRepAddInfoLen  = 5
	sidrRepResv16      = 6
	sidrRepQPN         = 8
	sidrRepServiceID   = 12
	sidrRepQKey        = 20
	sidrRepClassPort   = 24
	sidrRepPrivateData = sidrRepClassPort + SIDRClassPortInfoSize
)

// SIDRREPFields holds every field of a SIDR_REP, reserved ones included.
type SIDRREPFields struct {
	RequestID     uint32
	Status        SIDRStatus
	AddInfoLength uint8
	Resv16        uint16
	QPN           uint32 // 24 bits
	Resv8         uint8
	ServiceID     ServiceID
	QKey          uint32
	ClassPortInfo [SIDRClassPortInfoSize]byte
	PrivateData   [SIDRREPPrivateDataSize]byte
}

// RequestID returns the ID of the request answered, the SIDR_REQ's.
func (r SIDRREP) RequestID() uint32 { return binary.BigEndian.Uint32(r[sidrRepRequestID:]) }

// Status returns the outcome of the resolution.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[sidrRepStatus]) }

// AddInfoLength returns how many bytes of the ClassPortInfo are
// meaningful.
func (r SIDRREP) AddInfoLength() uint8 { return r[sidrRepAddInfoLen] }

// QPN returns the QP that serves the service ID.
func (r SIDRREP) QPN() uint32 { return binary.BigEndian.Uint32(r[sidrRepQPN:]) >> qpn24Shift }

// ServiceID returns the service ID resolved.
func (r SIDRREP) ServiceID() ServiceID {
	return ServiceID(binary.BigEndian.Uint64(r[sidrRepServiceID:]))
}

// QKey returns the Q_Key of the QP.
func (r SIDRREP) QKey() uint32 { return binary.BigEndian.Uint32(r[sidrRepQKey:]) }

// ClassPortInfo returns the whole additional information field; its first
// AddInfoLength bytes are meaningful.
func (r SIDRREP) ClassPortInfo() []byte {
	return r[sidrRepClassPort:sidrRepPrivateData:sidrRepPrivateData]
}

// PrivateData returns the private data.
func (r SIDRREP) PrivateData() []byte { return r[sidrRepPrivateData:CMDataSize:CMDataSize] }

// Fields returns every field of the message.
func (r SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{
		RequestID:     r.RequestID(),
		Status:        r.Status(),
		AddInfoLength: r.AddInfoLength(),
		Resv16:        binary.BigEndian.Uint16(r[sidrRepResv16:]),
		QPN:           r.QPN(),
		Resv8:         r[sidrRepQPN+3],
		ServiceID:     r.ServiceID(),
		QKey:          r.QKey(),
		ClassPortInfo: [SIDRClassPortInfoSize]byte(r.ClassPortInfo()),
		PrivateData:   [SIDRREPPrivateDataSize]byte(r.PrivateData()),
	}
}

// Encode writes f into the message; QPN is truncated to 24 bits.
func (r SIDRREP) Encode(f *SIDRREPFields) {
	be := binary.BigEndian
	be.PutUint32(r[sidrRepRequestID:], f.RequestID)
	r[sidrRepStatus] = byte(f.Status)
	r[sidrRepAddInfoLen] = f.AddInfoLength
	be.PutUint16(r[sidrRepResv16:], f.Resv16)
	be.PutUint32(r[sidrRepQPN:], f.QPN<<qpn24Shift|uint32(f.Resv8))
	be.PutUint64(r[sidrRepServiceID:], uint64(f.ServiceID))
	be.PutUint32(r[sidrRepQKey:], f.QKey)
	copy(r[sidrRepClassPort:], f.ClassPortInfo[:])
	copy(r[sidrRepPrivateData:], f.PrivateData[:])
}

// SIDRStatus is the status of a SIDR_REP (IBTA 12.11.2; Linux's enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// The SIDR_REP statuses. rdma_cm answers SIDRUnsupported when nothing
// listens on the port, SIDRReject when the application rejects.
const (
	SIDRSuccess            SIDRStatus = 0 // the QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // the service ID is not supported
	SIDRReject             SIDRStatus = 2 // the service rejected the request
	SIDRNoQP               SIDRStatus = 3 // no QP is available
	SIDRRedirect           SIDRStatus = 4 // ask the port of the ClassPortInfo
	SIDRUnsupportedVersion SIDRStatus = 5 // the class version is not supported
)

var sidrStatusNames = [...]string{
	SIDRSuccess:            "success",
	SIDRUnsupported:        "service ID not supported",
	SIDRReject:             "rejected by the service",
	SIDRNoQP:               "no QP available",
	SIDRRedirect:           "redirect",
	SIDRUnsupportedVersion: "unsupported class version",
}

// String returns the status's description, such as "rejected by the
// service", or "SIDRStatus(n)".
func (s SIDRStatus) String() string { return string(s.appendName(nil)) }

func (s SIDRStatus) appendName(dst []byte) []byte {
	if int(s) < len(sidrStatusNames) {
		return append(dst, sidrStatusNames[s]...)
	}
	dst = append(dst, "SIDRStatus("...)
	return append(appendUint(dst, uint64(s)), ')')
}
