package cm

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire/mad"
)

// Service ID resolution (SIDR, IBTA 12.11), rdma_cm's UDP port space: the
// active side resolves a port of a peer to the UD QP that serves it
// (Resolve: SIDR_REQ, resent on its timer until the SIDR_REP comes); the
// passive side queues the SIDR_REQ for the UD listener of the port
// (ListenUD) and answers it with the application's QP and Q_Key
// (AcceptUD) or a refusal (Reject). There is no connection: the SIDR_REP
// ends the exchange on both sides. A resolution is an ID like a
// connection's, in states of its own (SidrReqSent, SidrReqRcvd), which no
// connection message finds.
//
// As with REQs, a refusal decided from the SIDR_REQ alone costs one
// rate-limited SIDR_REP at most, the requests held wait within the
// half-open limits (a SIDR_REQ beyond them is dropped, and its requester
// tries again on its own timer), and an answered request is kept a while
// (Limits.Handshake) so that a repeated SIDR_REQ gets the same answer
// again, where Linux would hand it to the listener a second time.

// RDMAUDPQKey is the Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY),
// the one its UD QPs take and its SIDR_REPs carry.
const RDMAUDPQKey = 0x01234567

// A SIDR_REQ carries no CA GUID to tell a softnic requester from another
// (see peerAddr), so softnic marks its own in the reserved field after the
// P_Key, which receivers ignore: a marked SIDR_REQ is answered at its
// source port, any other at port 4791.
const sidrMark = 0x736e // "sn"

// sidrPeer is where the SIDR_REP to a SIDR_REQ from src with reserved
// field resv goes.
func sidrPeer(src netip.AddrPort, resv uint16) netip.AddrPort {
	if resv == sidrMark {
		return src
	}
	return peerAddr(src, 0)
}

// ResolveParams describe a service ID resolution to request.
type ResolveParams struct {
	Peer netip.AddrPort // the remote device
	Src  netip.Addr     // our address toward it
	Port uint16         // the rdma_cm port
	// PortSpace is Port's: mad.PortSpaceUDP (also when 0) or
	// mad.PortSpaceIB, whose UD QPs are resolved the same way.
	PortSpace mad.PortSpace
	Private   []byte // at most mad.SIDRCMAPrivateDataSize bytes
	// CMTimeout is how long each SIDR_REQ waits for its SIDR_REP (4.096 µs
	// × 2^CMTimeout), CMRetries how often it is sent again.
	CMTimeout, CMRetries uint8
}

// SIDRCMAPrivateDataSize is the private data a SIDR_REQ carries after
// rdma_cm's header.
const SIDRCMAPrivateDataSize = mad.SIDRREQPrivateDataSize - mad.CMAHeaderSize

// SIDRREQ returns the SIDR_REQ a passive resolution received, nil for
// others.
func (id *ID) SIDRREQ() *mad.SIDRREQFields { return id.sidrReq }

// SIDRREP returns the SIDR_REP an active resolution received, nil before.
func (id *ID) SIDRREP() *mad.SIDRREPFields { return id.sidrRep }

// IsResolution reports whether id is a service ID resolution, not a
// connection.
func (id *ID) IsResolution() bool { return id.sidr }

// SIDRError is a service ID resolution refused by the peer's SIDR_REP,
// as Resolve's driver returns it.
type SIDRError struct {
	Addr netip.AddrPort // the device that answered
	Port uint16         // the rdma_cm port resolved
	// PortSpace is Port's, UDP or IB (0, from a daemon of before it:
	// UDP).
	PortSpace mad.PortSpace
	Status    mad.SIDRStatus // the SIDR_REP's status
	// PrivateData is the SIDR_REP's private data, the whole field.
	PrivateData []byte
}

func (e *SIDRError) Error() string {
	s := fmt.Sprintf("service ID resolution of %v port %d refused: %v", e.Addr, e.Port, e.Status)
	if e.Status == mad.SIDRUnsupported {
		s += fmt.Sprintf(" (nothing listens on %v port %d)", cmp.Or(e.PortSpace, mad.PortSpaceUDP), e.Port)
	}
	return s
}

// Is reports ErrConnRefused for the status "service ID not supported":
// nothing listens on the port.
func (e *SIDRError) Is(target error) bool {
	return target == ErrConnRefused && e.Status == mad.SIDRUnsupported
}

// ListenUD registers a listener for port of rdma_cm's port space ps, UDP
// or IB, with room for backlog unanswered SIDR_REQs. It and a Listen of
// the same port number in another port space are two listeners; in the
// IB port space, which carries both, they are one port.
func (e *Engine) ListenUD(ps mad.PortSpace, port uint16, backlog int) (*Listener, error) {
	if ps != mad.PortSpaceUDP && ps != mad.PortSpaceIB {
		return nil, fmt.Errorf("resolutions are taken in the UDP and IB port spaces, not %v: %w", ps, mr.ErrInvalid)
	}
	return e.listen(ps, port, backlog, true)
}

// UD reports whether the listener takes SIDR_REQs (ListenUD).
func (l *Listener) UD() bool { return l.ud }

// Resolve starts a service ID resolution: it sends the SIDR_REQ, with
// rdma_cm's header before the private data, and returns the resolution,
// in SIDR_REQ_SENT. Its outcome is EventResolved (ID.SIDRREP) or
// EventFailed: a *SIDRError, or ErrTimedOut after every retry.
func (e *Engine) Resolve(now qp.Time, p *ResolveParams, out *Output) (*ID, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if err := checkPrivate("SIDR_REQ", p.Private, SIDRCMAPrivateDataSize); err != nil {
		return nil, err
	}
	ps := cmp.Or(p.PortSpace, mad.PortSpaceUDP)
	if ps != mad.PortSpaceUDP && ps != mad.PortSpaceIB {
		return nil, fmt.Errorf("resolutions are made in the UDP and IB port spaces, not %v: %w", ps, mr.ErrInvalid)
	}
	id := e.newID(true, p.Peer, ps, p.Port)
	id.sidr = true
	id.tid = tidOf(id.local)
	id.timeout, id.retries = Duration(p.CMTimeout), p.CMRetries
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrServiceIDResReq, id.tid)}
	f.SIDRREQ = mad.SIDRREQFields{
		RequestID: id.local, PKey: 0xFFFF, Resv16: sidrMark,
		ServiceID: mad.RDMACMServiceID(ps, p.Port),
	}
	srcPort := uint16(firstPort + e.rng.IntN(lastPort-firstPort+1))
	cma := mad.NewCMAHeader(netip.AddrPortFrom(p.Src, srcPort), p.Peer.Addr())
	mad.CMAHeader(f.SIDRREQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
	copy(f.SIDRREQ.PrivateData[mad.CMAHeaderSize:], p.Private)
	e.ids[id.local] = id
	id.state = SidrReqSent
	e.sendAwaited(now, id, &f, out)
	return id, nil
}

func (e *Engine) receiveSIDRREP(src netip.AddrPort, r mad.SIDRREP, out *Output) {
	id := e.ids[r.RequestID()]
	if id == nil || !id.sidr || !id.active || id.state != SidrReqSent || id.peer.Addr() != src.Addr() {
		out.count(RxDropped) // a late duplicate, or no resolution of ours
		return
	}
	rep := r.Fields()
	id.sidrRep = &rep
	var err error
	if rep.Status != mad.SIDRSuccess {
		err = &SIDRError{Addr: id.peer, Port: id.port, PortSpace: id.ps, Status: rep.Status, PrivateData: slices.Clone(rep.PrivateData[:])}
		id.err = err
	}
	e.remove(id, out)
	e.finish(id, err, out)
}

func (e *Engine) receiveSIDRREQ(now qp.Time, src netip.AddrPort, m *mad.MAD, out *Output) {
	r := m.SIDRREQ
	key := remoteKey{r.RequestID(), src}
	if id := e.sidrs[key]; id != nil {
		out.count(RxDuplicates)
		if id.state == Timewait {
			e.resend(id, out) // the same answer again
		}
		return
	}
	ps, port, ok := r.ServiceID().RDMACM()
	l := e.listeners[listenKey{ps, port}]
	if !ok || l == nil || !l.ud || l.held {
		e.issueSIDRREP(now, src, m, mad.SIDRUnsupported, out)
		return
	}
	if _, err := mad.DecodeCMAHeader(r.PrivateData()); err != nil {
		// rdma_cm's listener fails a SIDR_REQ without its header, and
		// Linux's CM then rejects it.
		e.issueSIDRREP(now, src, m, mad.SIDRReject, out)
		return
	}
	if e.full(src.Addr()) {
		out.count(RejectedBusy)
		return
	}
	if len(l.backlog) >= l.max {
		out.count(RxDropped)
		return
	}
	req := r.Fields()
	id := e.newID(false, sidrPeer(src, req.Resv16), ps, port)
	id.sidr = true
	e.admit(id, src.Addr())
	id.remote, id.tid, id.sidrReq, id.remoteSrc = req.RequestID, m.Header.TransactionID(), &req, src
	id.state = SidrReqRcvd
	id.queued = true
	l.backlog = append(l.backlog, id)
	e.ids[id.local] = id
	e.sidrs[key] = id
	id.expires = now.Add(e.lim.Handshake)
	e.arm(id, id.expires)
	out.Events = append(out.Events, Event{Type: EventRequest, ID: id, Listener: l})
}

// issueSIDRREP refuses a SIDR_REQ that gets no resolution of its own, or
// drops it, counted, if its source has spent its refusals (mayReject).
func (e *Engine) issueSIDRREP(now qp.Time, src netip.AddrPort, m *mad.MAD, status mad.SIDRStatus, out *Output) {
	if !e.mayReject(now, src.Addr()) {
		out.count(RejectsDropped)
		return
	}
	r := m.SIDRREQ
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrServiceIDResReqResp, m.Header.TransactionID())}
	f.SIDRREP = mad.SIDRREPFields{RequestID: r.RequestID(), Status: status, ServiceID: r.ServiceID()}
	e.send(out, sidrPeer(src, r.Fields().Resv16), 0, &f)
}

// AcceptUD answers the SIDR_REQ of id with a SIDR_REP naming the UD QP
// qpn and its Q_Key qkey, and private data (at most
// mad.SIDRREPPrivateDataSize bytes).
func (e *Engine) AcceptUD(now qp.Time, id *ID, qpn, qkey uint32, private []byte, out *Output) error {
	if !id.sidr || id.state != SidrReqRcvd {
		return e.handshakeError(id)
	}
	if err := checkPrivate("SIDR_REP", private, mad.SIDRREPPrivateDataSize); err != nil {
		return err
	}
	id.localQPN = qpn
	e.answerSIDR(now, id, mad.SIDRSuccess, qpn, qkey, private, out)
	return nil
}

// rejectSIDR refuses the SIDR_REQ of id: "rejected by the service" for a
// consumer reject (rdma_reject), "no QP" when none could be made.
func (e *Engine) rejectSIDR(now qp.Time, id *ID, reason mad.RejectReason, private []byte, out *Output) error {
	if id.state != SidrReqRcvd {
		return e.handshakeError(id)
	}
	if err := checkPrivate("SIDR_REP", private, mad.SIDRREPPrivateDataSize); err != nil {
		return err
	}
	status := mad.SIDRReject
	if reason == mad.RejectNoQP {
		status = mad.SIDRNoQP
	}
	e.answerSIDR(now, id, status, 0, 0, private, out)
	id.err = fmt.Errorf("service ID resolution from %v was rejected: %w", id.peer, mr.ErrInvalid)
	id.rejected = true
	return nil
}

// answerSIDR sends id's SIDR_REP and keeps it, in timewait, for repeated
// SIDR_REQs.
func (e *Engine) answerSIDR(now qp.Time, id *ID, status mad.SIDRStatus, qpn, qkey uint32, private []byte, out *Output) {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrServiceIDResReqResp, id.tid)}
	f.SIDRREP = mad.SIDRREPFields{
		RequestID: id.remote, Status: status, QPN: qpn, QKey: qkey,
		ServiceID: mad.RDMACMServiceID(id.ps, id.port),
	}
	copy(f.SIDRREP.PrivateData[:], private)
	copy(id.msg[:], e.send(out, id.peer, id.tclass, &f))
	id.finished = true // answered: nothing waits for an outcome
	e.settleHalfOpen(id)
	e.dequeue(id)
	id.state = Timewait
	e.settle(id, out)
	e.arm(id, now.Add(e.lim.Handshake))
}
