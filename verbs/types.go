package verbs

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/wire"
)

// Type is the transport service of a QP.
type Type uint8

const (
	RC Type = iota + 1 // reliable connected
	UC                 // unreliable connected
	UD                 // unreliable datagram
)

func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// State is a QP state of the IBTA state machine (ibv_qp_state).
type State uint8

const (
	Reset State = iota
	Init
	RTR // ready to receive
	RTS // ready to send
	SQD // send queue drained
	SQE // send queue error (UC, UD)
	Err
)

// TakesSends reports whether a QP in state s takes send WRs: in RTS, and
// in SQD, SQE and ERR, where they wait or are flushed.
func (s State) TakesSends() bool { return s == RTS || s == SQD || s == SQE || s == Err }

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// AttrMask selects the fields of [Attr] that a [QP.Modify] call sets, like
// ibv_qp_attr_mask.
type AttrMask uint32

const (
	AttrState AttrMask = 1 << iota
	AttrAccessFlags
	AttrPKey
	AttrQKey
	AttrRemote // the address vector: the peer's IP address and UDP port
	AttrPathMTU
	AttrTimeout
	AttrRetryCnt
	AttrRNRRetry
	AttrRQPSN
	AttrMaxRdAtomic
	AttrMinRNRTimer
	AttrSQPSN
	AttrMaxDestRdAtomic
	AttrDestQPN
)

// Attr holds the QP attributes of ibv_qp_attr that an RoCEv2 QP uses.
type Attr struct {
	State State
	// AccessFlags grants the remote operations the responder executes:
	// mr.RemoteWrite, mr.RemoteRead, mr.RemoteAtomic.
	AccessFlags mr.Access
	PKey        uint16 // BTH partition key; 0xFFFF, the default partition, if never set
	QKey        uint32 // UD: the Q_Key datagrams must carry
	// Remote is the peer's IP address and UDP port (the address vector).
	Remote netip.AddrPort
	// TrafficClass is the address vector's traffic class
	// (grh.traffic_class), set with Remote: the IP header's DSCP (upper six
	// bits) and ECN (lower two) of every packet the QP sends its peer, as
	// rxe puts it in the IPv4 TOS or IPv6 Traffic Class. 0 by default.
	TrafficClass uint8
	PathMTU      int // 256, 512, 1024, 2048 or 4096 bytes
	// Timeout is the local ACK timeout exponent: 4.096 µs × 2^Timeout, 0 = infinite.
	Timeout uint8
	// RetryCnt is how many times a request is retransmitted after an ACK
	// timeout, a PSN sequence error NAK or a lost response before the WR
	// fails with RETRY_EXC_ERR; the count starts again whenever the peer
	// acknowledges something new. 7 retries forever, as rxe does (the IBTA
	// and mlx5 count seven): a lossy link never fails a QP that is still
	// making progress, and a dead peer needs a lower count to be noticed.
	RetryCnt uint8
	// RNRRetry is how many times a request is retried after an RNR NAK;
	// 7 means forever.
	RNRRetry uint8
	// MinRNRTimer is the 5-bit RNR timer code this QP's responder puts in
	// its RNR NAKs (see wire.RNRTimerMicros).
	MinRNRTimer     uint8
	RQPSN           wire.PSN // the responder's expected PSN
	SQPSN           wire.PSN // the requester's first PSN
	MaxRdAtomic     uint8    // READ/ATOMIC requests outstanding as requester (initiator depth)
	MaxDestRdAtomic uint8    // READ/ATOMIC requests accepted as responder (responder resources)
	DestQPN         uint32
}

// PayloadMTU returns the payload one packet of a QP of type t carries with
// attributes a: the path MTU or, for a UD QP that has none (it never
// negotiates one), the largest.
func (a *Attr) PayloadMTU(t Type) uint32 {
	if a.PathMTU == 0 && t == UD {
		return 4096
	}
	return uint32(a.PathMTU)
}

// SRQAttr holds a shared receive queue's attributes (ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int // max_wr: the receive work requests the SRQ holds
	MaxSGE int // max_sge: the SGEs of one work request; fixed at creation
	// Limit is srq_limit, the low watermark: while it is above 0 the SRQ is
	// armed, and the first time the work requests it holds drop below it,
	// it raises one SRQ limit event (IBV_EVENT_SRQ_LIMIT_REACHED) and is
	// disarmed, back to 0.
	Limit int
}

// SRQAttrMask selects the fields of [SRQAttr] that a modify of an SRQ
// sets, like ibv_srq_attr_mask.
type SRQAttrMask uint8

const (
	SRQMaxWR SRQAttrMask = 1 << iota // IBV_SRQ_MAX_WR: resize the SRQ
	SRQLimit                         // IBV_SRQ_LIMIT: arm (or, with 0, disarm) the limit
)
