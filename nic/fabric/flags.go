package fabric

import (
	"fmt"
	"strings"

	"github.com/softnic/softnic/mr"
)

// Flags are libfabric's flags, one 64-bit space as in libfabric, with its
// values: the access bits of a registration (fi_mr_attr.access), the
// flags of a registration call (fi_mr_reg's flags), of an RMA call
// (ReadMsg, WriteMsg) and of a completion (Completion.Flags). Each call
// takes the bits that apply to it and refuses the others.
type Flags uint64

// The flags of fi_mr(3), kfi_rma(3) and kfi_cq(3).
const (
	FIMsg          Flags = 1 << 1  // FI_MSG: a completion of a message (a receive)
	FIRMA          Flags = 1 << 2  // FI_RMA: a completion of an RMA operation
	FIRead         Flags = 1 << 8  // FI_READ: access: result buffer of local RMA reads and atomics; completion: an RMA read completed
	FIWrite        Flags = 1 << 9  // FI_WRITE: access: source buffer of local RMA writes and atomics; completion: an RMA write completed
	FIRecv         Flags = 1 << 10 // FI_RECV: access: receive buffer; completion: a receive completed
	FISend         Flags = 1 << 11 // FI_SEND: access: send buffer
	FIRemoteRead   Flags = 1 << 12 // FI_REMOTE_READ: access: source of a peer's RMA read
	FIRemoteWrite  Flags = 1 << 13 // FI_REMOTE_WRITE: access: target of a peer's RMA write or atomic; completion: a peer's RMA write arrived
	FIRemoteCQData Flags = 1 << 17 // FI_REMOTE_CQ_DATA: send Data with a write; Completion.Data is valid
	FIMore         Flags = 1 << 18 // FI_MORE: more calls follow at once; send nothing yet
	FIFence        Flags = 1 << 21 // FI_FENCE: start only when earlier operations have completed
	FICompletion   Flags = 1 << 24 // FI_COMPLETION: report the operation's success
	FIInject       Flags = 1 << 25 // FI_INJECT: the buffer may be reused when the call returns
	FIRMAPmem      Flags = 1 << 49 // FI_RMA_PMEM: registration: the memory is persistent
	FIRMAEvent     Flags = 1 << 56 // FI_RMA_EVENT: registration: the region will be bound to a counter
)

// What each call takes.
const (
	// accessFlags are a registration's access bits.
	accessFlags = FIRead | FIWrite | FIRecv | FISend | FIRemoteRead | FIRemoteWrite
	// regFlags are the flags of a registration call.
	regFlags = FIRMAPmem | FIRMAEvent
	// readMsgFlags and writeMsgFlags are the flags ReadMsg and WriteMsg
	// accept: KFI_INJECT and KFI_REMOTE_CQ_DATA apply to writes only
	// (kfi_rma(3)).
	readMsgFlags  = FICompletion | FIMore | FIFence
	writeMsgFlags = readMsgFlags | FIInject | FIRemoteCQData
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{FIMsg, "MSG"}, {FIRMA, "RMA"}, {FIRead, "READ"}, {FIWrite, "WRITE"}, {FIRecv, "RECV"},
	{FISend, "SEND"}, {FIRemoteRead, "REMOTE_READ"}, {FIRemoteWrite, "REMOTE_WRITE"},
	{FIRemoteCQData, "REMOTE_CQ_DATA"}, {FIMore, "MORE"}, {FIFence, "FENCE"},
	{FICompletion, "COMPLETION"}, {FIInject, "INJECT"}, {FIRMAPmem, "RMA_PMEM"}, {FIRMAEvent, "RMA_EVENT"},
}

// String names the flags set, like "RMA|WRITE"; unknown bits are shown in
// hexadecimal.
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	for _, n := range flagNames {
		if f&n.f != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.name)
			f &^= n.f
		}
	}
	if f != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint64(f))
	}
	return b.String()
}

// verbs maps fi_mr access bits onto region access as libfabric's verbs
// provider does: FI_REMOTE_WRITE covers writes and atomics and needs local
// write; FI_READ and FI_RECV buffers are written by the NIC; FI_SEND and
// FI_WRITE need only local read, which every region has.
func (f Flags) verbs() mr.Access {
	var v mr.Access
	if f&FIRemoteRead != 0 {
		v |= mr.RemoteRead
	}
	if f&FIRemoteWrite != 0 {
		v |= mr.RemoteWrite | mr.RemoteAtomic | mr.LocalWrite
	}
	if f&(FIRead|FIRecv) != 0 {
		v |= mr.LocalWrite
	}
	return v
}
