package ladder

import (
	"sync"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// Recorder draws the packets softnic devices trace (nic.Config.Trace) on a
// ladder, as they leave for the wire: what a device's fault injector did
// to a packet the ladder learns from the trace's note, so that a packet
// dropped is drawn lost, one duplicated twice, and one held back when it
// is released, with how long it was held (Packet.Delayed). It is safe for
// concurrent use: devices trace from several goroutines.
type Recorder struct {
	mu       sync.Mutex
	l        *Ladder
	received bool
	held     map[string]time.Time // packets held back, by their bytes, and when
	// OnAdd, if set, is called with each arrow drawn, with the recorder's
	// lock held: a caller that waits for what the ladder names.
	OnAdd func(*Arrow)
}

// maxHeld bounds the held-back packets a Recorder remembers.
const maxHeld = 1024

// NewRecorder returns a recorder drawing on l. With received, the packets
// the devices receive are drawn too: a device whose peers are elsewhere (a
// daemon) traces its peers' packets only as it receives them. Leave it off
// when the devices at both ends trace to the recorder, so that each packet
// is drawn once (as nic.PcapTrace does).
func NewRecorder(l *Ladder, received bool) *Recorder {
	return &Recorder{l: l, received: received, held: make(map[string]time.Time)}
}

// Trace is a nic.Config.Trace function.
func (r *Recorder) Trace(tp *nic.TracePacket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Packet{Time: tp.Time, Env: tp.Env, Data: tp.Data, ICRC: wire.ICRCOK, Note: tp.Note}
	copies := 1
	switch {
	case tp.Dir == nic.Received && !r.received:
		return
	case tp.Note == nic.NoteFaultDelayed:
		if len(r.held) == maxHeld {
			clear(r.held)
		}
		r.held[string(tp.Data)] = tp.Time
		return
	case tp.Note == nic.NoteFaultReleased:
		if sent, ok := r.held[string(tp.Data)]; ok {
			p.Delayed = tp.Time.Sub(sent)
			delete(r.held, string(tp.Data))
		}
		p.Note = ""
	case tp.Note == nic.NoteFaultDropped:
		p.Lost, p.Note = true, ""
	case tp.Note == nic.NoteFaultDuplicated:
		copies, p.Note = 2, ""
	}
	if tp.Env.Check(tp.Data) != nil {
		p.ICRC = wire.ICRCBad
	}
	for range copies {
		a := r.l.Add(&p)
		if r.OnAdd != nil {
			r.OnAdd(a)
		}
	}
}

// Do calls fn with the ladder, under the recorder's lock: to read or draw
// it while devices trace.
func (r *Recorder) Do(fn func(l *Ladder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r.l)
}
