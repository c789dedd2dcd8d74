package nic

import (
	"sync"

	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/wire"
)

// Direction says whether a traced packet was sent or received.
type Direction = embedded.Direction

const (
	Sent     Direction = embedded.Sent
	Received Direction = embedded.Received
)

// TracePacket is one packet seen by a device, for Config.Trace: when,
// which way, the datagram's addresses, the packet (valid only during the
// call) and what the device did with it beyond the ordinary.
type TracePacket = embedded.TracePacket

// PcapTrace returns a Trace function that writes packets to w as a
// capture shows them: every packet the device sends (except those the
// fault injector dropped, which never reached the wire, and those it held
// back, which it writes when they are released) and, with
// received, every packet it receives, dropped ones included. Leave
// received off when the devices at both ends write to one w, so that each
// packet is captured once. onErr, if set, hears of the first write error;
// later packets are still attempted.
func PcapTrace(w *wire.PcapWriter, received bool, onErr func(error)) func(*TracePacket) {
	var once sync.Once
	return func(p *TracePacket) {
		if p.Dir == Sent && (p.Note == NoteFaultDropped || p.Note == NoteFaultDelayed) || p.Dir == Received && !received {
			return
		}
		if err := w.WritePacket(p.Time, &p.Env, p.Data); err != nil && onErr != nil {
			once.Do(func() { onErr(err) })
		}
	}
}

// SendAction is what Config.SendHook wants done with a packet.
type SendAction = embedded.SendAction

const (
	SendPass      SendAction = embedded.SendPass      // send it (through the fault injector, if any)
	SendDrop      SendAction = embedded.SendDrop      // lose it
	SendDuplicate SendAction = embedded.SendDuplicate // send it twice
)

// FaultInjector decides the fate of each packet a device sends: a
// netem.Injector (what Config.Faults makes), or a test's own that switches
// faults on and off as it runs (package nictest). The device calls Decide
// for one packet at a time, so it needs no lock of its own; it must not
// keep or modify pkt.
type FaultInjector = embedded.FaultInjector

// The TracePacket.Notes of what the fault injector did to a packet sent.
const (
	// NoteFaultDropped: dropped before it reached the socket; a trace of
	// both ends shows it never arrived.
	NoteFaultDropped = embedded.NoteFaultDropped
	// NoteFaultDuplicated: sent twice (it is traced once).
	NoteFaultDuplicated = embedded.NoteFaultDuplicated
	// NoteFaultDelayed: held back; it is traced again, with
	// NoteFaultReleased, when it goes to the socket.
	NoteFaultDelayed = embedded.NoteFaultDelayed
	// NoteFaultReleased: held back (NoteFaultDelayed), it goes to the
	// socket at last, after packets sent later: a reordering.
	NoteFaultReleased = embedded.NoteFaultReleased
)
