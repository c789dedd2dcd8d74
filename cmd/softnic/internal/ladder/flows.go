package ladder

import (
	"net/netip"
	"time"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// A flow is the packets from one address to one QP at another: one
// direction of a conversation. The source port is left out of its key:
// rxe sends each QP's packets from a port made of the QP numbers, to 4791,
// while softnic sends from the port its device receives on.
type flowKey struct {
	src, dst netip.Addr
	dport    uint16
	dqp      uint32
}

type flow struct {
	key   flowKey
	sport uint16 // the source port last seen
	conv  *conv
	fromA bool // the conversation's A sends it
}

// conv is a conversation and what the ladder follows of it.
type conv struct {
	Conversation
	flows []*flow // one per direction seen, the A-to-B one first
	last  int     // the last arrow's Seq
	// streams[0] follows A's requests and B's responses to them,
	// streams[1] B's requests and A's responses.
	streams [2]stream
	mtu     int // the path MTU, from the payload of a First or Middle packet; 0 until one is seen
}

// conversation returns the conversation of the arrow's packet, making it
// (and the flow) if it is the first of its kind, and sets a.FromA.
func (l *Ladder) conversation(a *Arrow, decoded bool) *conv {
	key := flowKey{src: a.Src.Addr(), dst: a.Dst.Addr(), dport: a.Dst.Port()}
	if decoded {
		key.dqp = l.pkt.BTH.DestQP()
	}
	f := l.flows[key]
	if f == nil {
		f = &flow{key: key}
		if g := l.reverse(f, a, decoded); g != nil {
			f.conv, f.fromA = g.conv, !g.fromA
			g.conv.flows = append(g.conv.flows, f)
		} else {
			f.conv, f.fromA = l.newConv(f, decoded), true
		}
		l.flows[key] = f
		pair := [2]netip.Addr{key.src, key.dst}
		l.pairs[pair] = append(l.pairs[pair], f)
		dst := &f.conv.B
		if !f.fromA {
			dst = &f.conv.A
		}
		dst.Port, dst.QP, dst.QPKnown = key.dport, key.dqp, decoded
	}
	f.sport = a.Src.Port()
	a.FromA = f.fromA
	return f.conv
}

// newConv starts a conversation with flow f.
func (l *Ladder) newConv(f *flow, decoded bool) *conv {
	l.nextID++
	c := &conv{Conversation: Conversation{
		ID:         l.nextID,
		A:          Endpoint{Addr: f.key.src},
		B:          Endpoint{Addr: f.key.dst},
		ACKTimeout: l.opts.ACKTimeout,
	}}
	switch {
	case !decoded:
		c.Transport = "?"
	case f.key.dqp == wire.GSIQPN && l.pkt.DETH != nil:
		c.Transport = "CM"
	default:
		c.Transport = l.pkt.OpCode().Transport().String()
	}
	if c.Transport == "CM" {
		c.A.QP, c.A.QPKnown = wire.GSIQPN, true
	} else if qp, ok := l.senderQP(f, decoded); ok {
		c.A.QP, c.A.QPKnown = qp, true
	}
	if t, ok := l.cm.timeouts[endpointKey{f.key.dst, f.key.dqp}]; ok && c.ACKTimeout == 0 {
		c.ACKTimeout = t
	}
	c.flows = []*flow{f}
	l.convs = append(l.convs, c)
	return c
}

// senderQP returns the QP that sends flow f when the packet or the CM
// tells: a DETH's source QP, or the peer a CM ConnectReply named.
func (l *Ladder) senderQP(f *flow, decoded bool) (uint32, bool) {
	if decoded && l.pkt.DETH != nil {
		return l.pkt.DETH.SrcQP(), true
	}
	peer, ok := l.cm.peers[endpointKey{f.key.dst, f.key.dqp}]
	if !ok || peer.addr != f.key.src {
		return 0, false
	}
	return peer.qp, true
}

// reverse returns the flow in the other direction of f's conversation, if
// one was seen: the one the CM or a DETH names; else, of the flows from f's
// destination to its source that have no partner yet and whose ports fit,
// the one whose requests f's first packet answers, or the only one.
func (l *Ladder) reverse(f *flow, a *Arrow, decoded bool) *flow {
	var cands []*flow
	for _, g := range l.pairs[[2]netip.Addr{f.key.dst, f.key.src}] {
		if len(g.conv.flows) == 1 && g.conv.Transport != "?" && portsFit(f, a.Src.Port(), g) {
			cands = append(cands, g)
		}
	}
	if !decoded || len(cands) == 0 {
		return nil
	}
	if f.key.dqp == wire.GSIQPN && l.pkt.DETH != nil {
		for _, g := range cands {
			if g.key.dqp == wire.GSIQPN && g.conv.Transport == "CM" {
				return g
			}
		}
		return nil
	}
	if qp, ok := l.senderQP(f, decoded); ok {
		for _, g := range cands {
			if g.key.dqp == qp {
				return g
			}
		}
		return nil
	}
	if op := l.pkt.OpCode(); !op.IsRequest() {
		psn := l.pkt.BTH.PSN()
		for _, g := range cands {
			if s := &g.conv.streams[streamOf(g.fromA)]; s.sent(psn) {
				return g
			}
		}
	}
	if len(cands) == 1 && cands[0].key.dqp != wire.GSIQPN {
		return cands[0]
	}
	return nil
}

// portsFit reports whether flow f, whose packet came from port sport, can
// be the reverse of g: each side sends from the port it receives on
// (softnic), or receives on 4791 (rxe, which sends from a port of its own).
func portsFit(f *flow, sport uint16, g *flow) bool {
	return (sport == g.key.dport || g.key.dport == wire.UDPPort) &&
		(g.sport == f.key.dport || f.key.dport == wire.UDPPort)
}

// forget drops a flow of a forgotten conversation.
func (l *Ladder) forget(f *flow) {
	delete(l.flows, f.key)
	pair := [2]netip.Addr{f.key.src, f.key.dst}
	fs := l.pairs[pair]
	for i, g := range fs {
		if g == f {
			fs = append(fs[:i], fs[i+1:]...)
			break
		}
	}
	if len(fs) == 0 {
		delete(l.pairs, pair)
	} else {
		l.pairs[pair] = fs
	}
}

// endpointKey names a QP of a device by address.
type endpointKey struct {
	addr netip.Addr
	qp   uint32
}

// cmState is what the CM messages told: which QPs are connected to which,
// and the ACK timeout each connection asked for.
type cmState struct {
	reqs     map[uint32]cmReq              // ConnectRequests by the sender's communication ID
	peers    map[endpointKey]endpointKey   // both ways
	timeouts map[endpointKey]time.Duration // the ACK timeout of each connected QP
}

type cmReq struct {
	from       endpointKey
	ackTimeout time.Duration
}

// maxCM bounds what cmState remembers, for a ladder that runs for long.
const maxCM = 4096

// learn records what a CM message says of the connection it sets up.
func (s *cmState) learn(l *Ladder, a *Arrow, m *mad.MAD) {
	if s.reqs == nil || len(s.reqs) > maxCM || len(s.peers) > 2*maxCM {
		s.reqs = make(map[uint32]cmReq)
		s.peers = make(map[endpointKey]endpointKey)
		s.timeouts = make(map[endpointKey]time.Duration)
	}
	switch {
	case m.REQ != nil:
		t := ACKTimeout(m.REQ.PrimaryPath().LocalACKTimeout())
		s.reqs[m.REQ.LocalCommID()] = cmReq{from: endpointKey{a.Src.Addr(), m.REQ.LocalQPN()}, ackTimeout: t}
	case m.REP != nil:
		req, ok := s.reqs[m.REP.RemoteCommID()]
		if !ok {
			return
		}
		rep := endpointKey{a.Src.Addr(), m.REP.LocalQPN()}
		s.peers[req.from], s.peers[rep] = rep, req.from
		if req.ackTimeout > 0 && l.opts.ACKTimeout == 0 {
			s.timeouts[req.from], s.timeouts[rep] = req.ackTimeout, req.ackTimeout
		}
	}
}

// ACKTimeout returns the local ACK timeout of exponent exp, as a QP's
// attributes and a CM ConnectRequest give it: 4.096 µs × 2^exp, and 0 for
// exponent 0, which means none.
func ACKTimeout(exp uint8) time.Duration {
	if exp == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << min(exp, 31)
}
