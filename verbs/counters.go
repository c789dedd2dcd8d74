package verbs

import "sync/atomic"

// CounterID names one of the device counters. The first ones carry the names
// of rxe's hw_counters (rdma statistic); the rest count what softnic drops
// for reasons rxe does not count.
type CounterID int

const (
	SentPkts            CounterID = iota // packets handed to the network (counted by the NIC)
	RcvdPkts                             // packets delivered to a QP (counted by the NIC)
	DuplicateRequest                     // responder: request with a PSN already executed
	OutOfSeqRequest                      // responder: request ahead of the expected PSN (NAKed once)
	RcvdRNRErr                           // requester: RNR NAKs received
	SendRNRErr                           // responder: RNR NAKs sent
	RcvdSeqErr                           // requester: PSN sequence error NAKs received
	AckDeferred                          // responder: ACKs folded into a later coalesced ACK
	RetryExceededErr                     // requester: WRs failed with RETRY_EXC_ERR
	RetryRNRExceededErr                  // requester: WRs failed with RNR_RETRY_EXC_ERR
	CompleterRetryErr                    // requester: go-back-N retries started
	SendErr                              // packets that could not be built or sent
	RdmaSends                            // requester: SEND WRs completed, with success or an error but a flush (rxe's rdma_sends)
	RdmaRecvs                            // responder: receive WRs completed successfully, SENDs and WRITEs with immediate (rxe's rdma_recvs)
	SentBytes                            // bytes of the packets in sent_pkts, BTH through ICRC (counted by the NIC)
	RcvdBytes                            // bytes of the packets in rcvd_pkts, BTH through ICRC (counted by the NIC)
	RetransmittedPkts                    // request packets sent again by go-back-N
	GhostAck                             // responses for PSNs never sent, dropped
	DuplicateResponse                    // responses for PSNs already completed, dropped
	BadRequest                           // requests NAKed as invalid (opcode sequence, length, access)
	RemoteAccessErr                      // requests NAKed with remote access error
	WrongQPState                         // packets for a QP in a state that cannot take them
	WrongTransport                       // packets whose opcode does not fit the QP type
	BadQKey                              // UD datagrams with the wrong Q_Key
	UCDroppedMsgs                        // UC messages dropped after a PSN gap or without a receive WR
	UDDropped                            // UD datagrams dropped for want of a receive WR
	WrongSource                          // RC/UC packets from another address than the QP's peer (or, on one device, another QP)
	BadPKey                              // packets of another partition (P_Key)
	HeldAccess                           // requests needing an R_Key check dropped unanswered: their peer is held back (Guard)
	numCounters
)

var counterNames = [numCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
	"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "rdma_sends", "rdma_recvs",
	"sent_bytes", "rcvd_bytes", "retransmitted_pkts",
	"ghost_ack", "duplicate_response", "bad_request", "remote_access_err",
	"wrong_qp_state", "wrong_transport", "bad_qkey", "uc_dropped_msgs", "ud_dropped",
	"wrong_source", "bad_pkey", "held_access",
}

func (c CounterID) String() string {
	if c >= 0 && c < numCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Counters is a set of device counters shared by the QPs of a NIC. The zero
// value is ready; all methods are safe for concurrent use.
type Counters struct {
	v [numCounters]atomic.Uint64
}

// Add adds n to counter c.
func (cs *Counters) Add(c CounterID, n uint64) {
	if cs != nil {
		cs.v[c].Add(n)
	}
}

func (cs *Counters) Inc(c CounterID) { cs.Add(c, 1) }

// Get returns the value of counter c.
func (cs *Counters) Get(c CounterID) uint64 { return cs.v[c].Load() }

// Each calls fn with every counter's name and value, in a fixed order.
func (cs *Counters) Each(fn func(name string, value uint64)) {
	for c := CounterID(0); c < numCounters; c++ {
		fn(counterNames[c], cs.v[c].Load())
	}
}

// Traffic counts what one QP sent and received over its life, for per-QP
// statistics (softnic serve --metrics). Packets and bytes are RoCEv2
// packets, BTH through ICRC. Unlike the device's Counters it is a plain
// struct: the QP's owner, who serializes its steps, reads it with Traffic.
type Traffic struct {
	SentPkts, SentBytes uint64 // packets Transmit built: requests, responses and retransmissions
	RcvdPkts, RcvdBytes uint64 // packets handed to Receive, dropped ones included
	SentMsgs            uint64 // send WRs completed successfully
	RcvdMsgs            uint64 // requests the responder completed (each moves the MSN on) and UD datagrams delivered
}

// CounterValue is one named counter and its value, as a device lists them
// (nic.Device.Counters): CounterID names the transport's, and a device
// names its own beside them.
type CounterValue struct {
	Name  string
	Value uint64
}
