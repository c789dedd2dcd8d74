package embedded

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/guard"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/wire"
)

// Config is what an embedded device is opened with: the fields of
// nic.Config that concern it, which package nic documents, with the
// defaults of the address, the logger, the faults and the access limits
// set.
type Config struct {
	Addr        netip.AddrPort
	MTU         int // 0 is 4096
	Logger      *slog.Logger
	Faults      *netem.Faults
	SendHook    func(pkt []byte) SendAction
	Trace       func(*TracePacket)
	UDP         udp.Options
	MaxQPs      int // 0 is 16384
	RecoverIPID bool
	CM          cm.Limits
	// Access is the R_Key guard's configuration but for the functions the
	// device gives it (Now, Source, OnHold).
	Access   guard.Config
	BusyPoll time.Duration
	WaitSpin time.Duration // 0 is DefaultWaitSpin
}

// DefaultWaitSpin is Config.WaitSpin's default (nic.DefaultWaitSpin).
const DefaultWaitSpin = 50 * time.Microsecond

// SendAction is what Config.SendHook wants done with a packet
// (nic.SendAction).
type SendAction uint8

// The SendActions, as package nic documents them.
const (
	SendPass SendAction = iota
	SendDrop
	SendDuplicate
)

// FaultInjector decides the fate of each packet a device sends
// (nic.FaultInjector).
type FaultInjector interface {
	Decide(pkt []byte) netem.Fate
}

// Direction says whether a traced packet was sent or received
// (nic.Direction).
type Direction uint8

// The Directions.
const (
	Sent Direction = iota + 1
	Received
)

func (d Direction) String() string {
	if d == Sent {
		return "sent"
	}
	return "received"
}

// TracePacket is one packet seen by a device, for Config.Trace
// (nic.TracePacket).
type TracePacket struct {
	Time time.Time
	Dir  Direction
	Env  wire.Envelope // the datagram's addresses and ports
	Data []byte        // the RoCEv2 packet, BTH through ICRC; valid only during the call
	// Note says what the device did with it beyond the ordinary: "dropped:
	// bad ICRC", "delayed by the fault injector", ...
	Note string
}

// The TracePacket.Notes of the fault injector's doings, as package nic
// documents them.
const (
	NoteFaultDropped    = "dropped by the fault injector"
	NoteFaultDuplicated = "duplicated by the fault injector"
	NoteFaultDelayed    = "delayed by the fault injector"
	NoteFaultReleased   = "released by the fault injector"
)

// DevCounter names a counter of what the device itself drops or injects
// (nic.DevCounter; package nic documents each).
type DevCounter int

// The DevCounters.
const (
	BadICRC DevCounter = iota
	ICRCIPIDRecovered
	ICRCIPIDVerified
	Malformed
	UnknownQP
	AccessHolds
	FaultDropped
	FaultDuplicated
	FaultCorrupted
	FaultDelayed
	CMTxMsgs
	CMTxRetries
	CMRxMsgs
	CMRxDuplicates
	CMRxDropped
	CMEstablished
	CMDisconnected
	CMRejectedBusy
	CMHandshakeTimeouts
	CMRejectsDropped
	PathMTUExceeded
	SendBatches
	McastDropped
	numDevCounters
)

var devCounterNames = [numDevCounters]string{
	"bad_icrc", "icrc_ipid_recovered", "icrc_ipid_verified", "malformed", "unknown_qp", "access_holds", "fault_dropped", "fault_duplicated",
	"fault_corrupted", "fault_delayed", "cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs",
	"cm_rx_duplicates", "cm_rx_dropped", "cm_established", "cm_disconnected",
	"cm_rejected_busy", "cm_handshake_timeouts", "cm_rejects_dropped", "path_mtu_exceeded", "send_batches",
	"mcast_dropped",
}

func (c DevCounter) String() string { return devCounterNames[c] }

// cmCounters are the device's counters of the connection manager engine's
// counts (cm.Output.Counts).
var cmCounters = [cm.NumCounters]DevCounter{
	cm.TxMsgs: CMTxMsgs, cm.TxRetries: CMTxRetries, cm.RxMsgs: CMRxMsgs, cm.RxDuplicates: CMRxDuplicates,
	cm.RxDropped: CMRxDropped, cm.Connected: CMEstablished, cm.Disconnected: CMDisconnected,
	cm.RejectedBusy: CMRejectedBusy, cm.HandshakeTimeouts: CMHandshakeTimeouts, cm.RejectsDropped: CMRejectsDropped,
}

// DevCounters counts, per DevCounter.
type DevCounters struct{ v [numDevCounters]atomic.Uint64 }

// Inc counts one more k.
func (c *DevCounters) Inc(k DevCounter) { c.v[k].Add(1) }

// AddCM adds the connection manager engine's counts.
func (c *DevCounters) AddCM(counts *cm.Counts) {
	for k, n := range counts {
		if n != 0 {
			c.v[cmCounters[k]].Add(n)
		}
	}
}

// Each calls fn with each counter's name and value, in DevCounter order.
func (c *DevCounters) Each(fn func(name string, v uint64)) {
	for k := range c.v {
		fn(devCounterNames[k], c.v[k].Load())
	}
}
