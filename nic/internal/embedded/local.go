package embedded

import (
	"net/netip"

	"github.com/softnic/softnic/nic/internal/guard"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// QPs of one device talk to each other through the device's own socket:
// a packet to the device's address comes back to its reader like any
// other. The transport checks that a connected QP's packets come from its
// peer's IP address, as rxe does, but every QP of the device shares that
// address, so that check alone would let any QP of the device (another
// process's, in a daemon) write into a QP connected elsewhere. The device
// knows better: it built the packet, so it knows which of its QPs sent it.
//
//   - When it sends: a packet from an RC or UC QP connected to this device
//     goes out only if the QP it is for is connected to the sender, and is
//     dropped otherwise (counted as wrong_source).
//   - When it receives: a QP connected to a QP of this device takes
//     packets only from the device's own UDP port, which no other program
//     on the host can send from while the device holds it (and the kernel
//     drops a packet from the network that claims one of the host's own
//     addresses as its source).
//
// A QP connected to another host still takes whatever comes from that
// host's address, as on any RoCE network (see the README's security model).

// peerLocal marks, in QP.peer, a QP connected to a QP of its own device.
const peerLocal = 1 << 31

// notePeerLocked records the QP's connection in q.peer after a Modify.
func (q *QP) notePeerLocked() {
	a := q.qp.Attr()
	p := uint32(0)
	if q.qp.Type() != verbs.UD && a.Remote.IsValid() && a.DestQPN != 0 {
		p = a.DestQPN
		if q.dev.isSelf(a.Remote) {
			p |= peerLocal
		}
	}
	q.peer.Store(p)
}

// isSelf reports whether a is this device's own address: its address and
// port, or with a wildcard bind its port on a loopback address or on an
// address the kernel routes to from that address itself (one of the
// host's).
func (d *Device) isSelf(a netip.AddrPort) bool {
	ip, local := a.Addr().Unmap(), d.local.Addr().Unmap()
	switch {
	case a.Port() != d.local.Port():
		return false
	case ip == local:
		return true
	case !local.IsUnspecified():
		return false
	}
	return ip.IsLoopback() || d.sourceFor(netip.AddrPortFrom(ip, a.Port())).Addr() == ip
}

// sendsToPeer reports whether pkt, which q is about to send, may go: a
// packet from a QP connected to this device must be for the QP connected
// to it. A refused packet is counted and traced.
func (d *Device) sendsToPeer(q *QP, pkt []byte, env *wire.Envelope) bool {
	if q.peer.Load()&peerLocal == 0 {
		return true
	}
	dq := d.lookup(wire.BTH(pkt).DestQP())
	switch {
	case dq == nil:
		d.devc.Inc(UnknownQP)
	case dq.peer.Load() != peerLocal|q.num:
		d.qpc.Add(verbs.WrongSource, 1)
	default:
		return true
	}
	d.trace(Sent, env, pkt, noteNotPeer)
	return false
}

// noteNotPeer is the trace note of a packet the device refused to send
// from one of its QPs to another that is not connected to it.
const noteNotPeer = "dropped: not for the QP connected to its sender"

// fromOwnPort reports whether a packet from src may reach q: a QP
// connected to a QP of this device takes packets from the device's own
// port only.
func (d *Device) fromOwnPort(q *QP, src netip.AddrPort) bool {
	return q.peer.Load()&peerLocal == 0 || src.Port() == d.local.Port()
}

// guardSource returns the source of the requests QP qpn receives from its
// peer (see package nic/internal/guard).
func (d *Device) guardSource(qpn uint32, peer netip.AddrPort) guard.Source {
	src := guard.Source{IP: peer.Addr().As16()}
	q := d.lookup(qpn)
	if q == nil {
		return src
	}
	p := q.peer.Load()
	if p&peerLocal == 0 {
		return src
	}
	src.Owner = 1
	if s := d.lookup(p &^ peerLocal); s != nil && s.queues != nil {
		src.Owner = 2 + s.queues.Owner()
	}
	return src
}
