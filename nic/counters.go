package nic

import (
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/verbs"
)

// DevCounter names a counter of what the device itself drops or injects,
// beside the transport counters of package qp.
type DevCounter = embedded.DevCounter

const (
	BadICRC           DevCounter = embedded.BadICRC           // packets whose ICRC did not verify
	ICRCIPIDRecovered DevCounter = embedded.ICRCIPIDRecovered // IPv4 packets accepted with a recovered IP identification (Config.RecoverIPID)
	ICRCIPIDVerified  DevCounter = embedded.ICRCIPIDVerified  // IPv4 packets whose ICRC verified with the identification a raw socket saw them carry (udp.Options.IPIDs)
	Malformed         DevCounter = embedded.Malformed         // packets that did not decode (wire.Packet.Decode)
	UnknownQP         DevCounter = embedded.UnknownQP         // packets for a QP number the device does not have
	AccessHolds       DevCounter = embedded.AccessHolds       // times a source was held back for failing too many R_Key checks (held_access counts its dropped requests)
	FaultDropped      DevCounter = embedded.FaultDropped      // packets the fault injector dropped
	FaultDuplicated   DevCounter = embedded.FaultDuplicated   // packets the fault injector sent twice
	FaultCorrupted    DevCounter = embedded.FaultCorrupted    // packets the fault injector corrupted
	FaultDelayed      DevCounter = embedded.FaultDelayed      // packets the fault injector held back
	// The connection manager's counts, named after Linux's ib_cm counter
	// groups (cm_tx_msgs, cm_tx_retries, cm_rx_msgs, cm_rx_duplicates) and
	// summed over the message types.
	CMTxMsgs       DevCounter = embedded.CMTxMsgs       // CM MADs sent, retransmissions included
	CMTxRetries    DevCounter = embedded.CMTxRetries    // CM MADs sent again after a timeout
	CMRxMsgs       DevCounter = embedded.CMRxMsgs       // CM MADs received
	CMRxDuplicates DevCounter = embedded.CMRxDuplicates // CM MADs received again (a retransmission or a stale message), answered from state
	CMRxDropped    DevCounter = embedded.CMRxDropped    // CM MADs that fit no connection or do not decode, or REQs beyond a listener's backlog
	CMEstablished  DevCounter = embedded.CMEstablished  // connections that reached the established state
	CMDisconnected DevCounter = embedded.CMDisconnected // established connections that ended (DREQ, REJ or DREQ timeout)
	// The limits on connection requests (CMLimits).
	CMRejectedBusy      DevCounter = embedded.CMRejectedBusy      // REQs refused beyond the half-open limits (REJ "no resources", or dropped past the REJ rate)
	CMHandshakeTimeouts DevCounter = embedded.CMHandshakeTimeouts // requests dropped whose handshake did not complete in time (no RTU: the requester gave up, or never sent the REQ)
	CMRejectsDropped    DevCounter = embedded.CMRejectsDropped    // REQs dropped unanswered: their source had spent its REJs (cm.Limits.RejectRate)
	PathMTUExceeded     DevCounter = embedded.PathMTUExceeded     // packets the kernel refused as larger than the route carries (EMSGSIZE): the path MTU toward that peer is lowered
	SendBatches         DevCounter = embedded.SendBatches         // batches of packets handed to the socket, each in one sendmmsg (sent_pkts over it: how many a system call carries)
	McastDropped        DevCounter = embedded.McastDropped        // packets for the multicast QPN to a group no QP of the device is attached to
)

// CounterValue is one named counter and its value, as Counters lists them;
// qp.CounterID and DevCounter name the counters it reports (package
// verbs's).
type CounterValue = verbs.CounterValue

// Counters returns every counter of the device: the transport's, named as
// rxe's hw_counters, then the device's drop and fault counts.
func (d *Device) Counters() []CounterValue { return d.prov.Counters() }

// Counter returns the value of one counter by name, and whether it exists.
func (d *Device) Counter(name string) (uint64, bool) {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
