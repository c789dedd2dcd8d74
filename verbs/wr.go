package verbs

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
)

// WROpcode is the operation of a send work request (ibv_wr_opcode).
type WROpcode uint8

const (
	WRWrite       WROpcode = iota + 1 // RDMA WRITE
	WRWriteImm                        // RDMA WRITE with immediate
	WRSend                            // SEND
	WRSendImm                         // SEND with immediate
	WRSendInv                         // SEND with invalidate
	WRRead                            // RDMA READ
	WRCompareSwap                     // ATOMIC compare and swap
	WRFetchAdd                        // ATOMIC fetch and add
	WRAtomicWrite                     // ATOMIC WRITE (8 bytes, IBTA 1.5)
	WRLocalInv                        // invalidate a local key (type-2 window)
	WRBindMW                          // bind a type-2 memory window
)

var wrOpcodeNames = [...]string{
	WRWrite: "RDMA_WRITE", WRWriteImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendImm: "SEND_WITH_IMM", WRSendInv: "SEND_WITH_INV", WRRead: "RDMA_READ",
	WRCompareSwap: "ATOMIC_CMP_AND_SWP", WRFetchAdd: "ATOMIC_FETCH_AND_ADD",
	WRAtomicWrite: "ATOMIC_WRITE", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) && wrOpcodeNames[o] != "" {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// IsWrite reports RDMA WRITE, with or without immediate.
func (o WROpcode) IsWrite() bool { return o == WRWrite || o == WRWriteImm }

// IsAtomic reports the operations that come back with an ATOMIC
// ACKNOWLEDGE carrying the original value.
func (o WROpcode) IsAtomic() bool { return o == WRCompareSwap || o == WRFetchAdd }

// IsReadOrAtomic reports the operations that take a responder resource:
// they are limited by max_rd_atomic, waited for by a FENCE, and complete
// only on their own response (an ACK that passes them is an implied NAK).
func (o WROpcode) IsReadOrAtomic() bool { return o == WRRead || o.IsAtomic() || o == WRAtomicWrite }

// IsLocal reports the operations that act on local keys and send nothing.
func (o WROpcode) IsLocal() bool { return o == WRLocalInv || o == WRBindMW }

// SendFlags are ibv_send_flags.
type SendFlags uint8

const (
	// Signaled asks for a completion even when the QP does not signal every WR.
	Signaled SendFlags = 1 << iota
	// Fence makes the WR wait until every earlier READ and ATOMIC has completed.
	Fence
	// Solicited sets the BTH solicited-event bit on the last packet.
	Solicited
	// Inline copies the data at post time (SendWR.Inline): the buffer may be
	// reused as soon as PostSend returns and needs no lkey.
	Inline
)

// SGE is a scatter/gather element: Length bytes at Addr in the region
// whose lkey is LKey (ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64 // returned in the completion (wr_id)
	Opcode WROpcode
	Flags  SendFlags
	SGL    []SGE
	// Inline is the data of an Inline WR, copied at post time; SGL is then
	// ignored.
	Inline []byte
	// Imm is the immediate data of WRITE/SEND with immediate, in host order.
	Imm uint32
	// InvalidateRKey is the rkey a SEND with invalidate invalidates at the
	// responder, and the key a LOCAL_INV invalidates locally.
	InvalidateRKey uint32
	// RemoteAddr and RKey address the remote memory of RDMA and ATOMIC operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare operand of compare-and-swap and the addend of
	// fetch-and-add; Swap is the swap operand (and the value of ATOMIC WRITE).
	CompareAdd uint64
	Swap       uint64
	// UD only: the destination's address, QPN and Q_Key (a Q_Key with the
	// high bit set means "use the QP's own Q_Key", as in the specification),
	// and the traffic class of the datagram's IP header (the address
	// handle's grh.traffic_class, as in Attr.TrafficClass).
	Dest         netip.AddrPort
	DestQPN      uint32
	QKey         uint32
	TrafficClass uint8
	// Bind describes a WRBindMW request.
	Bind *mr.BindRequest
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// WCStatus is the status of a work completion, named as ibv_wc_status.
type WCStatus uint8

const (
	Success WCStatus = iota
	LocLenErr
	LocQPOpErr
	LocEECOpErr
	LocProtErr
	WRFlushErr
	MWBindErr
	BadRespErr
	LocAccessErr
	RemInvReqErr
	RemAccessErr
	RemOpErr
	RetryExcErr
	RNRRetryExcErr
	LocRDDViolErr
	RemInvRDReqErr
	RemAbortErr
	InvEECNErr
	InvEECStateErr
	FatalErr
	RespTimeoutErr
	GeneralErr
)

var wcStatusNames = [...]struct{ name, text string }{
	Success:        {"SUCCESS", "success"},
	LocLenErr:      {"LOC_LEN_ERR", "local length error"},
	LocQPOpErr:     {"LOC_QP_OP_ERR", "local QP operation error"},
	LocEECOpErr:    {"LOC_EEC_OP_ERR", "local EE context operation error"},
	LocProtErr:     {"LOC_PROT_ERR", "local protection error"},
	WRFlushErr:     {"WR_FLUSH_ERR", "Work Request Flushed Error"},
	MWBindErr:      {"MW_BIND_ERR", "memory management operation error"},
	BadRespErr:     {"BAD_RESP_ERR", "bad response error"},
	LocAccessErr:   {"LOC_ACCESS_ERR", "local access error"},
	RemInvReqErr:   {"REM_INV_REQ_ERR", "remote invalid request error"},
	RemAccessErr:   {"REM_ACCESS_ERR", "remote access error"},
	RemOpErr:       {"REM_OP_ERR", "remote operation error"},
	RetryExcErr:    {"RETRY_EXC_ERR", "transport retry counter exceeded"},
	RNRRetryExcErr: {"RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
	LocRDDViolErr:  {"LOC_RDD_VIOL_ERR", "local RDD violation error"},
	RemInvRDReqErr: {"REM_INV_RD_REQ_ERR", "remote invalid RD request"},
	RemAbortErr:    {"REM_ABORT_ERR", "aborted error"},
	InvEECNErr:     {"INV_EECN_ERR", "invalid EE context number"},
	InvEECStateErr: {"INV_EEC_STATE_ERR", "invalid EE context state"},
	FatalErr:       {"FATAL_ERR", "fatal error"},
	RespTimeoutErr: {"RESP_TIMEOUT_ERR", "response timeout error"},
	GeneralErr:     {"GENERAL_ERR", "general error"},
}

// String returns the ibv_wc_status name without its IBV_WC_ prefix, e.g.
// "REM_ACCESS_ERR".
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].name
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Text returns what ibv_wc_status_str says of the status, e.g. "remote
// access error".
func (s WCStatus) Text() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].text
	}
	return "unknown"
}

// WCOpcode is the operation a work completion reports (ibv_wc_opcode).
type WCOpcode uint8

const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCCompareSwap
	WCFetchAdd
	WCBindMW
	WCLocalInv
	WCAtomicWrite
	WCRecv         // a SEND arrived
	WCRecvWriteImm // an RDMA WRITE with immediate arrived
)

var wcOpcodeNames = [...]string{
	WCSend: "SEND", WCWrite: "RDMA_WRITE", WCRead: "RDMA_READ", WCCompareSwap: "COMP_SWAP",
	WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV",
	WCAtomicWrite: "ATOMIC_WRITE", WCRecv: "RECV", WCRecvWriteImm: "RECV_RDMA_WITH_IMM",
}

func (o WCOpcode) String() string {
	if int(o) < len(wcOpcodeNames) {
		return wcOpcodeNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCOpcodeOf returns the opcode of the completion of a send WR of opcode o.
func WCOpcodeOf(o WROpcode) WCOpcode {
	switch o {
	case WRWrite, WRWriteImm:
		return WCWrite
	case WRRead:
		return WCRead
	case WRCompareSwap:
		return WCCompareSwap
	case WRFetchAdd:
		return WCFetchAdd
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// WCFlags are ibv_wc_flags, and WCSolicited.
type WCFlags uint8

const (
	WCWithImm WCFlags = 1 << iota // Imm is valid
	WCWithInv                     // InvalidatedRKey is valid
	WCGRH                         // a UD receive: the first 40 bytes of the buffer hold the GRH / IP header
	// WCSolicited marks the receive completion of a message whose sender
	// asked for a solicited event (SendFlags' Solicited, the BTH's SE
	// bit): a CQ armed for solicited completions only wakes for it
	// (nic.CQ.Notify). ibv_wc_flags has no such bit.
	WCSolicited
)

// WakesSolicited reports whether wc wakes a CQ armed for solicited
// completions only: a solicited one, or one in error, as the IBTA has it.
func (wc *WC) WakesSolicited() bool { return wc.Flags&WCSolicited != 0 || wc.Status != Success }

// WC is a work completion (ibv_wc).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32
	QPN     uint32
	Imm     uint32
	// InvalidatedRKey is the rkey a SEND with invalidate invalidated.
	InvalidatedRKey uint32
	// UD receives: the sender's QPN and address.
	SrcQPN uint32
	Src    netip.AddrPort
}

func (wc *WC) String() string {
	return fmt.Sprintf("wr_id=%d %s %s len=%d qp=%#x", wc.ID, wc.Opcode, wc.Status, wc.ByteLen, wc.QPN)
}
