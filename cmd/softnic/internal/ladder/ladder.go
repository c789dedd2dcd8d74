// Package ladder draws RoCEv2 traffic as a sequence diagram, the ladder a
// teacher draws on a board: two columns per conversation (the pair of
// endpoints, an address and a QP each), each packet an arrow from one to
// the other with its opcode, PSN, MSN and size, and what went wrong named in
// words from what the packets show: retransmissions and why (a timeout, a
// PSN sequence error NAK, an implied NAK), duplicates, NAKs with their
// syndrome, RNR waits, ACKs that cover several requests, packets lost or
// with a bad ICRC.
//
// A Ladder is the model: Add feeds it packets one at a time, in the order
// they were seen, and it keeps the arrows, the conversations and the
// anomalies, so that a capture (softnic decode --ladder), a demo scenario
// and a running daemon's live page (softnic serve --http, through
// Options.Keep) build it the same way; a Recorder feeds it from devices'
// traces. WriteText and WriteHTML render it: lines for a terminal, or one
// self-contained page with an SVG drawing that needs no network to view.
//
// The package lives under cmd/softnic because its users are the command's
// decode, demo and serve. It reads packets with package wire; only the
// Recorder knows package nic, for its trace. Its judgements come from the
// packets alone, as a capture shows them, with what a capture cannot show
// given by the caller (Packet.Lost, Packet.Delayed, Options.ACKTimeout):
// they are explanations for people, not the transport's own state (package
// qp), and they may guess wrong where the capture misses packets or orders
// the two ends' packets otherwise than they happened.
package ladder

import (
	"net/netip"
	"time"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// Options tunes a Ladder.
type Options struct {
	// ACKTimeout is the requesters' local ACK timeout, if known: a
	// retransmission's wait is compared with it, and a resend well before
	// it with nothing to cause it is taken for a copy made on the way. 0
	// means unknown; a CM ConnectRequest in the capture then tells its
	// connection's (its primary path's local ACK timeout).
	ACKTimeout time.Duration
	// Keep bounds the arrows kept to the last Keep, for a live ladder of a
	// running device; the conversations of forgotten arrows are forgotten
	// too. 0 keeps every arrow.
	Keep int
}

// Packet is one RoCEv2 packet to draw.
type Packet struct {
	Time time.Time
	Env  wire.Envelope // addresses and ports
	Data []byte        // BTH through ICRC; Add does not keep it
	ICRC wire.ICRCStatus
	// Lost says that the packet never reached its receiver although it
	// was sent: a fault injector dropped it, as a softnic device's trace
	// reports. A capture cannot know it.
	Lost bool
	// Delayed is how long after it was sent the packet arrived, when the
	// caller knows it was held back on the way (a fault injector's delay):
	// the ladder then takes a packet that arrives after PSNs sent later for
	// the original, late, and not for a retransmission.
	Delayed time.Duration
	// Note is what the caller knows of the packet beyond its bytes, shown
	// with its arrow ("dropped: bad ICRC").
	Note string
}

// Endpoint is one side of a conversation: a device's address and one of
// its QPs.
type Endpoint struct {
	Addr netip.Addr `json:"addr"`
	// Port is the UDP port the endpoint receives on, 0 until a packet to
	// it was seen.
	Port uint16 `json:"port,omitempty"`
	// QP is the endpoint's QP number; QPKnown is false until a packet to
	// it, a CM message or a DETH names it.
	QP      uint32 `json:"qp"`
	QPKnown bool   `json:"qp_known"`
}

// Conversation is the traffic between two QPs: a connection, or the CM
// messages between two devices' QP1.
type Conversation struct {
	ID int `json:"id"`
	// A sent the conversation's first packet; B received it.
	A Endpoint `json:"a"`
	B Endpoint `json:"b"`
	// Transport is "RC", "UC", "UD" or "CM" (UD to and from QP1).
	Transport string `json:"transport"`
	Packets   int    `json:"packets"`
	// ACKTimeout is the local ACK timeout known for it: Options.ACKTimeout
	// or the one its CM ConnectRequest asked for; 0 if neither is known.
	ACKTimeout time.Duration `json:"ack_timeout,omitempty"`
}

// Arrow is one packet of the ladder.
type Arrow struct {
	Seq  int           `json:"seq"`  // 1 for the first packet added
	Time time.Duration `json:"time"` // since the first packet added
	Conv int           `json:"conv"` // the Conversation's ID
	// FromA tells the direction: from the conversation's A to its B.
	FromA bool           `json:"from_a"`
	Src   netip.AddrPort `json:"src"`
	Dst   netip.AddrPort `json:"dst"`
	// Label names the packet on its arrow: the opcode, PSN, MSN and
	// payload size, or the CM message.
	Label  string      `json:"label"`
	OpCode wire.OpCode `json:"opcode"`
	PSN    wire.PSN    `json:"psn"`
	// AETH tells whether the packet carries an AETH, with Syndrome and
	// MSN.
	AETH     bool            `json:"aeth"`
	Syndrome wire.Syndrome   `json:"syndrome,omitempty"`
	MSN      uint32          `json:"msn,omitempty"`
	Size     int             `json:"size"` // payload bytes
	ICRC     wire.ICRCStatus `json:"icrc"`
	Lost     bool            `json:"lost,omitempty"`
	Delayed  time.Duration   `json:"delayed,omitempty"`
	Note     string          `json:"note,omitempty"`
	// Err is why the packet did not decode; its other fields are then
	// the envelope's alone.
	Err       string    `json:"error,omitempty"`
	Anomalies []Anomaly `json:"anomalies,omitempty"`
}

// Kind is a kind of anomaly.
type Kind uint8

// The anomalies a ladder names.
const (
	// Retransmission: the requester sent a PSN again; Anomaly.Cause
	// says why.
	Retransmission Kind = iota + 1
	// Duplicate: a request the responder had already received (resent,
	// or copied on the way), or a response or ACK repeated for one.
	Duplicate
	// NAK: a NAK, with its syndrome.
	NAK
	// RNRWait: an RNR NAK, which has the requester wait its RNR timer.
	RNRWait
	// ImpliedNAK: a response or ACK that passes an outstanding READ or
	// atomic, whose response must have been lost: the requester resends
	// it.
	ImpliedNAK
	// Coalesced: one ACK covering several requests.
	Coalesced
	// OutOfSequence: a request that arrives after a gap in the PSNs, which
	// the responder answers with a PSN sequence error NAK.
	OutOfSequence
	// Missing: PSNs the requester skipped that the capture does not hold.
	Missing
	// Lost: a packet sent that never reached its receiver (Packet.Lost).
	Lost
	// BadICRC: a packet whose ICRC does not verify, which its receiver
	// drops.
	BadICRC
	// Undecodable: a datagram that does not decode as a RoCEv2 packet.
	Undecodable
)

var kindNames = [...]string{
	Retransmission: "retransmission",
	Duplicate:      "duplicate",
	NAK:            "NAK",
	RNRWait:        "RNR wait",
	ImpliedNAK:     "implied NAK",
	Coalesced:      "coalesced ACK",
	OutOfSequence:  "out of sequence",
	Missing:        "missing",
	Lost:           "lost",
	BadICRC:        "bad ICRC",
	Undecodable:    "undecodable",
}

// String returns the kind's name, as the ladder shows it.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "anomaly"
}

// MarshalText returns the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Cause is why a requester resent a packet.
type Cause uint8

// The causes of a retransmission.
const (
	// CauseTimeout: no ACK came within the ACK timeout.
	CauseTimeout Cause = iota + 1
	// CauseNAK: a PSN sequence error NAK asked for a resend from its PSN.
	CauseNAK
	// CauseImpliedNAK: a later response passed an outstanding READ or
	// atomic.
	CauseImpliedNAK
	// CauseRNR: an RNR NAK, and its timer ran out.
	CauseRNR
)

var causeNames = [...]string{CauseTimeout: "timeout", CauseNAK: "NAK", CauseImpliedNAK: "implied NAK", CauseRNR: "RNR NAK"}

// String returns the cause's name.
func (c Cause) String() string {
	if int(c) < len(causeNames) && causeNames[c] != "" {
		return causeNames[c]
	}
	return ""
}

// MarshalText returns the cause's name.
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// Anomaly is something a ladder names about one arrow.
type Anomaly struct {
	Kind  Kind     `json:"kind"`
	Cause Cause    `json:"cause,omitempty"` // of a Retransmission
	Seq   int      `json:"seq"`             // the arrow
	PSN   wire.PSN `json:"psn"`             // the PSN it is about
	Text  string   `json:"text"`            // in words
}

// Ladder is the model of a ladder diagram. It is not safe for concurrent
// use.
type Ladder struct {
	opts   Options
	start  time.Time
	seq    int
	arrows []Arrow // the kept ones, oldest first
	convs  []*conv // the kept ones, by ID
	nextID int
	flows  map[flowKey]*flow
	pairs  map[[2]netip.Addr][]*flow // flows by source and destination address
	cm     cmState
	totals [len(kindNames)]int
	pkt    wire.Packet
	mad    mad.MAD
}

// New returns an empty ladder.
func New(o Options) *Ladder {
	return &Ladder{
		opts:  o,
		flows: make(map[flowKey]*flow),
		pairs: make(map[[2]netip.Addr][]*flow),
	}
}

// Add draws p as the next arrow and returns it (valid until the next call
// to Add).
func (l *Ladder) Add(p *Packet) *Arrow {
	if l.seq == 0 {
		l.start = p.Time
	}
	l.seq++
	a := Arrow{
		Seq:     l.seq,
		Time:    p.Time.Sub(l.start),
		Src:     p.Env.Src,
		Dst:     p.Env.Dst,
		ICRC:    p.ICRC,
		Lost:    p.Lost,
		Delayed: p.Delayed,
		Note:    p.Note,
	}
	err := l.pkt.Decode(p.Data)
	if err != nil {
		a.Err = err.Error()
		a.Label = "undecodable " + itoa(len(p.Data)) + "-byte datagram"
	} else {
		a.OpCode = l.pkt.OpCode()
		a.PSN = l.pkt.BTH.PSN()
		a.Size = len(l.pkt.Payload)
		if l.pkt.AETH != nil {
			a.AETH, a.Syndrome, a.MSN = true, l.pkt.AETH.Syndrome(), l.pkt.AETH.MSN()
		}
	}
	c := l.conversation(&a, err == nil)
	a.Conv = c.ID
	c.Packets++
	c.last = a.Seq
	switch {
	case err != nil:
		a.note(Undecodable, 0, a.PSN, "undecodable: "+a.Err)
	case a.isCM(&l.pkt, &l.mad):
		a.Label = cmLabel(&l.mad)
		l.cm.learn(l, &a, &l.mad)
	default:
		a.Label = label(&a)
		if a.OpCode.Transport() == wire.TransportRC {
			c.rc(&a, &l.pkt)
		}
	}
	if a.Lost {
		a.note(Lost, 0, a.PSN, "lost: sent, but never reached "+a.Dst.Addr().String())
	}
	if a.ICRC == wire.ICRCBad && err == nil {
		a.note(BadICRC, 0, a.PSN, "bad ICRC: "+a.Dst.Addr().String()+" drops it")
	}
	for _, an := range a.Anomalies {
		l.totals[an.Kind]++
	}
	l.arrows = append(l.arrows, a)
	l.trim()
	return &l.arrows[len(l.arrows)-1]
}

// note adds an anomaly to the arrow.
func (a *Arrow) note(k Kind, cause Cause, psn wire.PSN, text string) {
	a.Anomalies = append(a.Anomalies, Anomaly{Kind: k, Cause: cause, Seq: a.Seq, PSN: psn, Text: text})
}

// isCM reports whether the packet is a CM MAD to QP1, decoding it into m.
func (a *Arrow) isCM(p *wire.Packet, m *mad.MAD) bool {
	return p.DETH != nil && p.BTH.DestQP() == wire.GSIQPN && m.Decode(p.Payload) == nil
}

// trim forgets the oldest arrows beyond Options.Keep, and the
// conversations none of the kept arrows belong to.
func (l *Ladder) trim() {
	keep := l.opts.Keep
	if keep <= 0 || len(l.arrows) < keep+keep/4+1 {
		return
	}
	drop := len(l.arrows) - keep
	l.arrows = append(l.arrows[:0], l.arrows[drop:]...)
	first := l.arrows[0].Seq
	kept := l.convs[:0]
	for _, c := range l.convs {
		if c.last >= first {
			kept = append(kept, c)
			continue
		}
		for _, f := range c.flows {
			l.forget(f)
		}
	}
	clear(l.convs[len(kept):])
	l.convs = kept
}

// Arrows returns the arrows kept, oldest first.
func (l *Ladder) Arrows() []Arrow {
	from := 0
	if k := l.opts.Keep; k > 0 && len(l.arrows) > k {
		from = len(l.arrows) - k
	}
	return l.arrows[from:]
}

// Since returns the arrows kept after the one numbered seq: what a live
// view has not shown yet.
func (l *Ladder) Since(seq int) []Arrow {
	as := l.Arrows()
	for i := range as {
		if as[i].Seq > seq {
			return as[i:]
		}
	}
	return nil
}

// Conversations returns the conversations of the arrows kept, in the order
// they started.
func (l *Ladder) Conversations() []Conversation {
	cs := make([]Conversation, len(l.convs))
	for i, c := range l.convs {
		cs[i] = c.Conversation
	}
	return cs
}

// Anomalies returns the anomalies of the arrows kept, in arrow order.
func (l *Ladder) Anomalies() []Anomaly {
	var as []Anomaly
	for _, a := range l.Arrows() {
		as = append(as, a.Anomalies...)
	}
	return as
}

// Total returns how many anomalies of kind k the ladder has named since
// it started, forgotten arrows included.
func (l *Ladder) Total(k Kind) int {
	if int(k) >= len(l.totals) {
		return 0
	}
	return l.totals[k]
}

// Packets returns how many packets the ladder has been given.
func (l *Ladder) Packets() int { return l.seq }
