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

// PcapTrace returns a Trace function that writes every packet to w (sent
// packets the fault injector dropped are left out: they never reached the
// wire). Several devices may share one writer.
func PcapTrace(w *wire.PcapWriter) func(*TracePacket) {
	var mu sync.Mutex
	var errOnce sync.Once
	return func(p *TracePacket) {
		if p.Dir == Sent && p.Note == "dropped by the fault injector" {
			return
		}
		if p.Dir == Received {
			return // each packet is captured once, as it leaves its sender
		}
		mu.Lock()
		err := w.WritePacket(p.Time, &p.Env, p.Data)
		mu.Unlock()
		if err != nil {
			errOnce.Do(func() {})
		}
	}
}
