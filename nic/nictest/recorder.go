package nictest

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// Packet is one packet a recorded device sent or received, decoded.
type Packet struct {
	Time time.Time
	// Device names the device that traced it: "A" or "B" of a Pair, the
	// daemon's of a Daemon.
	Device string
	Dir    nic.Direction
	Env    wire.Envelope
	// Note is what the device did with it beyond the ordinary, as
	// nic.TracePacket.Note: nic.NoteFaultDropped, "dropped: bad ICRC" …
	Note string
	// Bytes is the packet, BTH through ICRC; Decoded is false if wire
	// could not decode it (and the fields below are zero then).
	Bytes   []byte
	Decoded bool
	OpCode  wire.OpCode
	DestQP  uint32
	PSN     wire.PSN
	// Syndrome is the AETH's, if the opcode carries one (HasAETH).
	Syndrome wire.Syndrome
	HasAETH  bool
}

// IsNAK reports whether the packet is a NAK with code, a NAK of any code
// if code is negative.
func (p *Packet) IsNAK(code int) bool {
	return p.HasAETH && p.Syndrome.Type() == wire.AckTypeNak && (code < 0 || p.Syndrome.NakCode() == wire.NakCode(code))
}

// IsRNRNAK reports whether the packet is an RNR NAK.
func (p *Packet) IsRNRNAK() bool { return p.HasAETH && p.Syndrome.Type() == wire.AckTypeRNRNak }

// String is the packet in one line: who traced it, the direction, the
// note and the summary of package wire (with a CM MAD's, package
// wire/mad).
func (p *Packet) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", p.Device, p.Dir)
	var w wire.Packet
	if p.Decoded && w.Decode(p.Bytes) == nil {
		b.WriteByte(' ')
		b.Write(mad.AppendPacketSummary(nil, &w))
	} else {
		fmt.Fprintf(&b, " undecodable (%d bytes)", len(p.Bytes))
	}
	if p.Note != "" {
		fmt.Fprintf(&b, " [%s]", p.Note)
	}
	return b.String()
}

// Recorder keeps the packets devices send and receive, from their traces
// (nic.Config.Trace), for a test to look at and assert on. It keeps the
// last Limit packets. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	limit   int
	pkts    []Packet
	base    int           // packets recorded before pkts[0]
	dropped int           // packets forgotten past the limit
	changed chan struct{} // closed and replaced on each packet
}

// DefaultRecordLimit is how many packets a Recorder keeps unless
// Options.RecordLimit says otherwise.
const DefaultRecordLimit = 1 << 16

// NewRecorder returns a recorder that keeps the last limit packets
// (DefaultRecordLimit if limit is 0).
func NewRecorder(limit int) *Recorder {
	if limit <= 0 {
		limit = DefaultRecordLimit
	}
	return &Recorder{limit: limit, changed: make(chan struct{})}
}

// Trace returns a function for nic.Config.Trace that records the packets
// of a device under the name device, then passes them to next, if set.
func (r *Recorder) Trace(device string, next func(*nic.TracePacket)) func(*nic.TracePacket) {
	return func(tp *nic.TracePacket) {
		r.record(device, tp)
		if next != nil {
			next(tp)
		}
	}
}

func (r *Recorder) record(device string, tp *nic.TracePacket) {
	p := Packet{Time: tp.Time, Device: device, Dir: tp.Dir, Env: tp.Env, Note: tp.Note, Bytes: append([]byte(nil), tp.Data...)}
	var w wire.Packet
	if w.Decode(p.Bytes) == nil {
		p.Decoded, p.OpCode, p.DestQP, p.PSN = true, w.OpCode(), w.BTH.DestQP(), w.BTH.PSN()
		if w.AETH != nil {
			p.HasAETH, p.Syndrome = true, w.AETH.Syndrome()
		}
	}
	r.mu.Lock()
	if len(r.pkts) == r.limit {
		n := copy(r.pkts, r.pkts[r.limit/2:])
		r.dropped += len(r.pkts) - n
		r.base += len(r.pkts) - n
		r.pkts = r.pkts[:n]
	}
	r.pkts = append(r.pkts, p)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Packets returns the packets recorded, in the order the devices traced
// them.
func (r *Recorder) Packets() []Packet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Packet(nil), r.pkts...)
}

// Forgotten returns how many packets were recorded beyond the limit and
// forgotten, the oldest first.
func (r *Recorder) Forgotten() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Reset forgets every packet.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.base += len(r.pkts)
	r.pkts, r.dropped = nil, 0
	r.mu.Unlock()
}

// Find returns the packets recorded that match, in order. match may use
// the recorder.
func (r *Recorder) Find(match func(*Packet) bool) []Packet {
	var out []Packet
	for _, p := range r.Packets() {
		if match(&p) {
			out = append(out, p)
		}
	}
	return out
}

// Wait returns the first packet kept that matches, waiting for it until
// ctx ends. match may use the recorder.
func (r *Recorder) Wait(ctx context.Context, match func(*Packet) bool) (Packet, error) {
	seen := 0 // packets looked at, counted as base is
	for {
		r.mu.Lock()
		seen = max(seen, r.base)
		news := append([]Packet(nil), r.pkts[seen-r.base:]...)
		changed := r.changed
		r.mu.Unlock()
		for i := range news {
			seen++
			if match(&news[i]) {
				return news[i], nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Packet{}, fmt.Errorf("nictest: no such packet recorded: %w", ctx.Err())
		}
	}
}

// Sent returns the packets devices sent (the fault injector's drops
// included; its releases of held-back packets not, being no new sends).
func Sent(p *Packet) bool { return p.Dir == nic.Sent && p.Note != nic.NoteFaultReleased }

// Retransmitted returns the request packets sent again: each sending of a
// PSN by one device to one QP, after its first. A copy the fault
// injector makes (a duplicate, a release of a held-back packet) is not a
// retransmission; a packet it dropped was sent.
func (r *Recorder) Retransmitted() []Packet {
	type key struct {
		from string
		dst  netip.AddrPort
		qp   uint32
		psn  wire.PSN
	}
	seen := make(map[key]bool)
	return r.Find(func(p *Packet) bool {
		if !Sent(p) || !p.Decoded || !p.OpCode.IsRequest() {
			return false
		}
		k := key{from: p.Device, dst: p.Env.Dst, qp: p.DestQP, psn: p.PSN}
		again := seen[k]
		seen[k] = true
		return again
	})
}

// ExpectNAK fails t unless a device sent a NAK with code; it logs the
// packets recorded if none did.
func (r *Recorder) ExpectNAK(t testing.TB, code wire.NakCode) {
	t.Helper()
	if len(r.Find(func(p *Packet) bool { return Sent(p) && p.IsNAK(int(code)) })) == 0 {
		t.Errorf("nictest: no NAK(%v) was sent; the packets:\n%s", code, r)
	}
}

// ExpectRetransmitted fails t unless the request of psn was sent again (see
// Retransmitted); it logs the packets recorded if not.
func (r *Recorder) ExpectRetransmitted(t testing.TB, psn wire.PSN) {
	t.Helper()
	for _, p := range r.Retransmitted() {
		if p.PSN == psn {
			return
		}
	}
	t.Errorf("nictest: PSN %v was not retransmitted; the packets:\n%s", psn, r)
}

// ExpectNone fails t if a packet recorded matches, naming it.
func (r *Recorder) ExpectNone(t testing.TB, what string, match func(*Packet) bool) {
	t.Helper()
	for _, p := range r.Find(match) {
		t.Errorf("nictest: unexpected %s: %v", what, &p)
	}
}

// String lists the packets recorded, one a line.
func (r *Recorder) String() string {
	var b strings.Builder
	for _, p := range r.Packets() {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}
