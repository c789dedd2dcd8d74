package nic

import (
	"sync"
	"time"

	"github.com/softnic/softnic/wire"
)

// Direction says whether a traced packet was sent or received.
type Direction uint8

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

// TracePacket is one packet seen by a device, for Config.Trace.
type TracePacket struct {
	Time time.Time
	Dir  Direction
	Env  wire.Envelope // the datagram's addresses and ports
	Data []byte        // the RoCEv2 packet, BTH through ICRC; valid only during the call
	// Note says what the device did with it beyond the ordinary: "dropped:
	// bad ICRC", "delayed by the fault injector", ...
	Note string
}

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
