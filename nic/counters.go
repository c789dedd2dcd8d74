package nic

import (
	"sync/atomic"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/verbs"
)

// DevCounter names a counter of what the device itself drops or injects,
// beside the transport counters of package qp.
type DevCounter int

const (
	BadICRC           DevCounter = iota // packets whose ICRC did not verify
	ICRCIPIDRecovered                   // IPv4 packets accepted with a recovered IP identification (Config.RecoverIPID)
	ICRCIPIDVerified                    // IPv4 packets whose ICRC verified with the identification a raw socket saw them carry (udp.Options.IPIDs)
	Malformed                           // packets that did not decode (wire.Packet.Decode)
	UnknownQP                           // packets for a QP number the device does not have
	AccessHolds                         // times a source was held back for failing too many R_Key checks (held_access counts its dropped requests)
	FaultDropped                        // packets the fault injector dropped
	FaultDuplicated                     // packets the fault injector sent twice
	FaultCorrupted                      // packets the fault injector corrupted
	FaultDelayed                        // packets the fault injector held back
	// The connection manager's counts, named after Linux's ib_cm counter
	// groups (cm_tx_msgs, cm_tx_retries, cm_rx_msgs, cm_rx_duplicates) and
	// summed over the message types.
	CMTxMsgs       // CM MADs sent, retransmissions included
	CMTxRetries    // CM MADs sent again after a timeout
	CMRxMsgs       // CM MADs received
	CMRxDuplicates // CM MADs received again (a retransmission or a stale message), answered from state
	CMRxDropped    // CM MADs that fit no connection or do not decode, or REQs beyond a listener's backlog
	CMEstablished  // connections that reached the established state
	CMDisconnected // established connections that ended (DREQ, REJ or DREQ timeout)
	// The limits on connection requests (CMLimits).
	CMRejectedBusy      // REQs refused beyond the half-open limits (REJ "no resources", or dropped past the REJ rate)
	CMHandshakeTimeouts // requests dropped whose handshake did not complete in time (no RTU: the requester gave up, or never sent the REQ)
	CMRejectsDropped    // REQs dropped unanswered: their source had spent its REJs (cm.Limits.RejectRate)
	PathMTUExceeded     // packets the kernel refused as larger than the route carries (EMSGSIZE): the path MTU toward that peer is lowered
	numDevCounters
)

var devCounterNames = [numDevCounters]string{
	"bad_icrc", "icrc_ipid_recovered", "icrc_ipid_verified", "malformed", "unknown_qp", "access_holds", "fault_dropped", "fault_duplicated",
	"fault_corrupted", "fault_delayed", "cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs",
	"cm_rx_duplicates", "cm_rx_dropped", "cm_established", "cm_disconnected",
	"cm_rejected_busy", "cm_handshake_timeouts", "cm_rejects_dropped", "path_mtu_exceeded",
}

func (c DevCounter) String() string { return devCounterNames[c] }

// cmCounters are the device's counters of the connection manager engine's
// counts (cm.Output.Counts).
var cmCounters = [cm.NumCounters]DevCounter{
	cm.TxMsgs: CMTxMsgs, cm.TxRetries: CMTxRetries, cm.RxMsgs: CMRxMsgs, cm.RxDuplicates: CMRxDuplicates,
	cm.RxDropped: CMRxDropped, cm.Connected: CMEstablished, cm.Disconnected: CMDisconnected,
	cm.RejectedBusy: CMRejectedBusy, cm.HandshakeTimeouts: CMHandshakeTimeouts, cm.RejectsDropped: CMRejectsDropped,
}

type devCounters struct{ v [numDevCounters]atomic.Uint64 }

func (c *devCounters) inc(k DevCounter) { c.v[k].Add(1) }

// CounterValue is one named counter and its value, as Counters lists them;
// qp.CounterID and DevCounter name the counters it reports (package
// verbs's).
type CounterValue = verbs.CounterValue

// Counters returns every counter of the device: the transport's, named as
// rxe's hw_counters, then the device's drop and fault counts.
func (d *Device) Counters() []CounterValue { return d.prov.Counters() }

func (d *embeddedDevice) Counters() []CounterValue {
	var out []CounterValue
	d.qpc.Each(func(name string, v uint64) { out = append(out, CounterValue{Name: name, Value: v}) })
	for k := DevCounter(0); k < numDevCounters; k++ {
		out = append(out, CounterValue{Name: devCounterNames[k], Value: d.devc.v[k].Load()})
	}
	return out
}

// Counter returns the value of one counter by name, and whether it exists.
func (d *Device) Counter(name string) (uint64, bool) {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
