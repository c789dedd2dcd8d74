package nic

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// This file is the connection manager's protocol: the communication
// management state machine of IBTA chapter 12 with rdma_cm's conventions on
// top, as Linux's ib_cm and rdma_cm run it (drivers/infiniband/core/cm.c
// and cma.c). Like package qp it does no I/O: MADs and time go in
// (cmEngine.receive, cmEngine.tick), MADs to send and QPs to flush come out
// in a cmOutput, and the driver (cm_gsi.go) carries them over QP1. Where
// softnic departs from Linux the code says so.

// Defaults and fixed values of the CM messages softnic sends, the ones
// Linux's rdma_cm sends on RoCE (compare ../shared/golden/rping.pcap).
const (
	// cmHiTID is the top half of the transaction IDs softnic starts. Linux
	// puts the number of its CM's MAD agent there (2 in rping.pcap) and the
	// local communication ID, as it lies in memory, in the bottom half.
	cmHiTID = 1
	// cmTargetACKDelay is the ACK delay a REP advertises: rxe's local CA
	// ACK delay, 4.096 µs × 2^15 ≈ 134 ms.
	cmTargetACKDelay = 15
	// cmMRAServiceTimeout is the most the MRA that answers a duplicate REQ
	// the application has not answered yet asks the requester to wait
	// (see mraServiceTimeout): rdma_cm's CMA_CM_MRA_SETTING, 4.096 µs ×
	// 2^24 ≈ 69 s.
	cmMRAServiceTimeout = 24
	// cmHopLimit is the REQ path's hop limit, Linux's for a RoCE route.
	cmHopLimit = 64
	// cmPermissiveLID stands in for the LIDs RoCE does not have.
	cmPermissiveLID = 0xFFFF
	// The rdma_cm source ports softnic picks for a REQ's CMA header:
	// Linux's default ip_local_port_range.
	cmFirstPort, cmLastPort = 32768, 60999
)

// A RoCEv2 peer receives on UDP port 4791 whatever port it sends from
// (Linux's rxe sends QP1's MADs from port 55410, and a connection's
// packets from a port made from its flow label); a softnic device sends
// from the port it receives on, which need not be 4791. So that answers
// reach both, softnic marks its CA GUID: a REQ with a softnic GUID is
// answered at its source port, any other at port 4791.
const (
	softnicGUIDMark  = 0x02736e // "sn", locally administered
	softnicGUIDShift = 40
	// eui64FFFE is what the middle of a GUID made from a MAC (EUI-64, as
	// rxe's are) holds; a softnic GUID never does, so no MAC-made GUID is
	// taken for one.
	eui64FFFE  = 0xFFFE
	eui64Shift = 24
)

// softnicGUID returns the CA GUID of the device at a: the mark, then a
// hash of the address.
func softnicGUID(a netip.AddrPort) uint64 {
	h := fnv.New64a()
	b, _ := a.MarshalBinary()
	h.Write(b)
	g := softnicGUIDMark<<softnicGUIDShift | h.Sum64()&(1<<softnicGUIDShift-1)
	if g>>eui64Shift&0xFFFF == eui64FFFE {
		g ^= 1 << eui64Shift
	}
	return g
}

// cmPeerAddr is where the CM answers a peer whose REQ came from src with
// CA GUID guid, and where the connection's packets go: src for a softnic
// peer, port 4791 of its address for any other.
func cmPeerAddr(src netip.AddrPort, guid uint64) netip.AddrPort {
	if guid>>softnicGUIDShift == softnicGUIDMark && guid>>eui64Shift&0xFFFF != eui64FFFE {
		return src
	}
	return netip.AddrPortFrom(src.Addr(), wire.UDPPort)
}

// cmTime converts a 5-bit IBTA time exponent (CM response timeouts, local
// ACK timeouts, service timeouts) to a duration: 4.096 µs × 2^exp.
func cmTime(exp uint8) time.Duration { return 4096 * time.Nanosecond << min(exp, 31) }

// cmTID returns the transaction ID of an exchange the side with local
// communication ID local starts (REQ, DREQ): Linux's, whose bottom half is
// the ID's bytes read in little-endian order.
func cmTID(local uint32) uint64 { return cmHiTID<<32 | uint64(bits.ReverseBytes32(local)) }

// cmFlowLabel is the flow label rdma_cm puts in a RoCE REQ's path, made
// from the rdma_cm source and destination ports.
func cmFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & (1<<20 - 1)
}

// cmState is the state of one communication, named after the IBTA's (and
// Linux's enum ib_cm_state). The MRA states are folded into their base
// states: softnic sends an MRA only for an unanswered REQ (cmReqRcvd) and
// extends its own wait when it receives one.
type cmState uint8

const (
	cmReqSent     cmState = iota + 1 // active: REQ sent, waiting for REP or REJ
	cmRepRcvd                        // active: REP received; the dialer readies its QP, then sends RTU
	cmReqRcvd                        // passive: REQ given to the listener, not answered yet
	cmRepSent                        // passive: REP sent, waiting for RTU
	cmEstablished                    // both sides may use their QPs
	cmDreqSent                       // DREQ sent, waiting for DREP
	cmTimewait                       // over; duplicates are still answered until the timer ends it
	cmGone                           // out of every table
)

var cmStateNames = [...]string{
	cmReqSent: "REQ_SENT", cmRepRcvd: "REP_RCVD", cmReqRcvd: "REQ_RCVD", cmRepSent: "REP_SENT",
	cmEstablished: "ESTABLISHED", cmDreqSent: "DREQ_SENT", cmTimewait: "TIMEWAIT", cmGone: "IDLE",
}

func (s cmState) String() string {
	if int(s) < len(cmStateNames) && cmStateNames[s] != "" {
		return cmStateNames[s]
	}
	return fmt.Sprintf("cmState(%d)", uint8(s))
}

// cmResult is the outcome of a handshake that a Dial or an Accept waits
// for: the REP (dialer), nothing (acceptor: the RTU came), or an error.
type cmResult struct {
	rep *wire.REPFields
	err error
}

// cmID is one communication (Linux's cm_id): one side of one connection
// attempt and, if it succeeds, of the connection.
type cmID struct {
	state  cmState
	active bool
	local  uint32         // our communication ID
	remote uint32         // the peer's, 0 until known
	tid    uint64         // transaction ID of our answers
	peer   netip.AddrPort // where the peer receives (see cmPeerAddr)
	port   uint16         // the rdma_cm port connected to
	// remoteSrc is where a passive communication's REQ came from: with
	// the requester's communication ID, it recognises duplicates.
	remoteSrc netip.AddrPort

	localQPN, remoteQPN uint32

	// timeout and retries govern the message we wait an answer for; the
	// timewait lasts one ACK timeout of the path, as in Linux.
	timeout    time.Duration
	retries    uint8
	ackTimeout uint8
	// msg is the REQ, REP or DREQ waiting for an answer, sent sends times;
	// in timewait after a reject it is the REJ, repeated to duplicates.
	msg      [wire.MADSize]byte
	sends    int
	rejected bool
	halfOpen bool   // counted in the engine's half-open requests
	timerSeq uint64 // the armed timer's sequence number; 0 when none is

	req     *wire.REQFields // passive: the REQ received
	expires qp.Time         // passive: when the request is dropped unless its handshake completed

	// result carries the one cmResult of the handshake; done closes when
	// an established connection ends, with err saying why; settled closes
	// once nothing we sent waits for an answer any more (timewait or gone).
	result  chan cmResult
	done    chan struct{}
	ended   bool
	err     error
	settled chan struct{}

	qp *QP // the driver's: flushed when the peer disconnects
}

// cmRemoteKey identifies a passive communication by the peer's
// communication ID and address, to recognise duplicate REQs.
type cmRemoteKey struct {
	comm uint32
	peer netip.AddrPort
}

// cmListener is the engine's side of a Listener: requests for port wait
// in backlog for the application.
type cmListener struct {
	port    uint16
	backlog chan *cmID
	closed  chan struct{}
}

// cmMAD is one MAD to send to QP1 at dst.
type cmMAD struct {
	dst netip.AddrPort
	mad [wire.MADSize]byte
}

// cmOutput is what one engine step asks the driver to do, in order: move
// the QPs of flush to the error state (their peer disconnected), then send
// mads.
type cmOutput struct {
	flush []*cmID
	mads  []cmMAD
}

// cmDialParams describe a connection to request.
type cmDialParams struct {
	peer    netip.AddrPort // the remote device
	src     netip.Addr     // our address toward it
	port    uint16         // the rdma_cm port
	qpn     uint32
	psn     wire.PSN
	mtu     wire.MTU
	srq     bool   // the QP takes its receive WRs from an SRQ
	private []byte // at most wire.CMAPrivateDataSize bytes

	responderResources, initiatorDepth uint8
	retryCount, rnrRetryCount          uint8
	ackTimeout, cmTimeout, cmRetries   uint8
}

// cmAcceptParams describe the answer to a REQ.
type cmAcceptParams struct {
	qpn     uint32
	psn     wire.PSN
	srq     bool
	private []byte // at most wire.REPPrivateDataSize bytes

	responderResources, initiatorDepth, rnrRetryCount uint8
}

// cmEngine holds every communication of one device. It is not safe for
// concurrent use: the driver serialises calls.
type cmEngine struct {
	guid      uint64 // the local CA GUID in REQs and REPs
	lim       CMLimits
	rng       *rand.Rand
	cnt       *devCounters
	ids       map[uint32]*cmID
	remotes   map[cmRemoteKey]*cmID
	listeners map[uint16]*cmListener
	timers    cmTimers
	timerSeq  uint64 // the last timer sequence number handed out
	closed    bool

	// The requests held before their handshake completes (half-open), in
	// all and by source (cmSourceKey).
	halfOpen   int
	halfOpenBy map[netip.Prefix]int
}

// newCMEngine returns an engine; lim must have its defaults filled in
// (CMLimits.withDefaults).
func newCMEngine(guid uint64, lim CMLimits, rng *rand.Rand, cnt *devCounters) *cmEngine {
	return &cmEngine{
		guid: guid, lim: lim, rng: rng, cnt: cnt,
		ids:        make(map[uint32]*cmID),
		remotes:    make(map[cmRemoteKey]*cmID),
		listeners:  make(map[uint16]*cmListener),
		halfOpenBy: make(map[netip.Prefix]int),
	}
}

// CMLimits bound what the connection manager holds for the connection
// requests it receives, whatever the requesters ask for, so that no
// requester (or address spoofing one) can hold a device's resources for
// long, lock other requesters out, or have it send more than it receives.
// Zero fields take the defaults noted.
type CMLimits struct {
	// HalfOpen bounds the requests held before their handshake completes,
	// waiting for the application's answer or for the requester's
	// ReadyToUse (default 256); HalfOpenPerSource those from one IPv4
	// address or IPv6 /64 (default 32). A REQ beyond either is rejected,
	// reason "no resources" (cm_rejected_busy; the dialer's error is
	// errors.Is ErrAgain).
	HalfOpen, HalfOpenPerSource int
	// Handshake bounds how long a request is held before its handshake
	// completes (default 20 s), however long the REQ's CM response timeout
	// and retries would have the device wait (rdma_cm's defaults: 69 s; a
	// REQ may ask for days): then the request is dropped and the QP made
	// for it destroyed (cm_handshake_timeouts).
	Handshake time.Duration
}

// Defaults of CMLimits.
const (
	cmDefaultHalfOpen          = 256
	cmDefaultHalfOpenPerSource = 32
	cmDefaultHandshake         = 20 * time.Second
)

func (l CMLimits) withDefaults() CMLimits {
	l.HalfOpen = cmp.Or(l.HalfOpen, cmDefaultHalfOpen)
	l.HalfOpenPerSource = cmp.Or(l.HalfOpenPerSource, cmDefaultHalfOpenPerSource)
	l.Handshake = cmp.Or(l.Handshake, cmDefaultHandshake)
	return l
}

func (l CMLimits) check() error {
	if l.HalfOpen < 0 || l.HalfOpenPerSource < 0 || l.Handshake < 0 {
		return fmt.Errorf("CM limits %+v: negative: %w", l, ErrInvalid)
	}
	return nil
}

// cmMaxHonouredTimeout is the largest time exponent the engine takes from
// a peer's REQ for its own waits and for the QP it makes: 4.096 µs × 2^20
// ≈ 4.3 s, rdma_cm's CM response timeout. A REQ may carry 31 (2.4 hours),
// which would hold a DREQ's retries, a timewait or a QP's retransmission
// timer (and the QP with it) for days.
const cmMaxHonouredTimeout = 20

// cmSourceKey is what the half-open limit per source counts by: the IPv4
// address, or the IPv6 /64 (a host has a whole /64 to send from).
func cmSourceKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// randomPSN returns a random starting PSN, as Linux draws one per
// connection.
func (e *cmEngine) randomPSN() wire.PSN { return wire.PSN(e.rng.Uint32()) & wire.PSNMask }

// newID returns a communication with a fresh random local communication
// ID (Linux's are random-looking too), not yet in any table.
func (e *cmEngine) newID(active bool, peer netip.AddrPort, port uint16) *cmID {
	id := &cmID{
		active: active, peer: peer, port: port,
		result: make(chan cmResult, 1), done: make(chan struct{}), settled: make(chan struct{}),
	}
	for id.local == 0 || e.ids[id.local] != nil {
		id.local = e.rng.Uint32()
	}
	return id
}

// send encodes f and queues it for dst. The headers built here always
// encode.
func (e *cmEngine) send(out *cmOutput, dst netip.AddrPort, f *wire.MADFields) []byte {
	out.mads = append(out.mads, cmMAD{dst: dst})
	m := &out.mads[len(out.mads)-1]
	if _, err := f.Encode(m.mad[:]); err != nil {
		out.mads = out.mads[:len(out.mads)-1]
		return nil
	}
	e.cnt.inc(CMTxMsgs)
	return m.mad[:]
}

// sendAwaited sends the message id waits an answer for and arms its
// retransmission timer.
func (e *cmEngine) sendAwaited(now qp.Time, id *cmID, f *wire.MADFields, out *cmOutput) {
	copy(id.msg[:], e.send(out, id.peer, f))
	id.sends = 1
	e.arm(id, now.Add(id.timeout))
}

// resend sends id.msg again.
func (e *cmEngine) resend(id *cmID, out *cmOutput) {
	out.mads = append(out.mads, cmMAD{dst: id.peer, mad: id.msg})
	e.cnt.inc(CMTxMsgs)
}

// connect starts a connection: it sends the REQ, with rdma_cm's header
// before the private data, and returns the communication, in REQ_SENT.
func (e *cmEngine) connect(now qp.Time, p *cmDialParams, out *cmOutput) (*cmID, error) {
	if e.closed {
		return nil, ErrClosed
	}
	id := e.newID(true, p.peer, p.port)
	id.tid = cmTID(id.local)
	id.localQPN = p.qpn
	// Linux waits twice the packet lifetime plus the peer's CM response
	// time; the path's ACK timeout is twice its packet lifetime.
	id.timeout = cmTime(p.cmTimeout) + cmTime(p.ackTimeout)
	id.retries, id.ackTimeout = p.cmRetries, p.ackTimeout
	srcPort := uint16(cmFirstPort + e.rng.IntN(cmLastPort-cmFirstPort+1))
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrConnectRequest, id.tid)}
	f.REQ = wire.REQFields{
		LocalCommID:             id.local,
		ServiceID:               wire.RDMACMServiceID(wire.PortSpaceTCP, p.port),
		LocalCAGUID:             e.guid,
		LocalQPN:                p.qpn,
		ResponderResources:      p.responderResources,
		InitiatorDepth:          p.initiatorDepth,
		RemoteCMResponseTimeout: p.cmTimeout,
		StartingPSN:             p.psn,
		LocalCMResponseTimeout:  p.cmTimeout,
		RetryCount:              p.retryCount,
		PKey:                    0xFFFF,
		PathMTU:                 p.mtu,
		RNRRetryCount:           p.rnrRetryCount,
		MaxCMRetries:            p.cmRetries,
		SRQ:                     p.srq,
		PrimaryPath: wire.CMPathFields{
			LocalLID:        cmPermissiveLID,
			RemoteLID:       cmPermissiveLID,
			LocalGID:        wire.GIDFromAddr(p.src),
			RemoteGID:       wire.GIDFromAddr(p.peer.Addr()),
			FlowLabel:       cmFlowLabel(srcPort, p.port),
			HopLimit:        cmHopLimit,
			LocalACKTimeout: p.ackTimeout,
		},
	}
	cma := wire.NewCMAHeader(netip.AddrPortFrom(p.src, srcPort), p.peer.Addr())
	wire.CMAHeader(f.REQ.PrivateData[:wire.CMAHeaderSize]).Encode(&cma)
	copy(f.REQ.PrivateData[wire.CMAHeaderSize:], p.private)
	e.ids[id.local] = id
	id.state = cmReqSent
	e.sendAwaited(now, id, &f, out)
	return id, nil
}

// establish answers the REP of id, whose QP is now ready, with an RTU.
func (e *cmEngine) establish(id *cmID, out *cmOutput) error {
	if id.state != cmRepRcvd {
		return e.handshakeError(id)
	}
	e.sendRTU(id, out)
	id.state = cmEstablished
	e.cnt.inc(CMEstablished)
	return nil
}

// handshakeError is why a handshake step cannot be taken on id.
func (e *cmEngine) handshakeError(id *cmID) error {
	switch {
	case id.err != nil:
		return id.err
	case e.closed:
		return ErrClosed
	}
	return fmt.Errorf("connection with %v is %s: %w", id.peer, id.state, ErrInvalid)
}

func (e *cmEngine) sendRTU(id *cmID, out *cmOutput) {
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrReadyToUse, id.tid)}
	f.RTU = wire.RTUFields{LocalCommID: id.local, RemoteCommID: id.remote}
	e.send(out, id.peer, &f)
}

// accept answers the REQ of id with a REP; the caller's QP is in RTS.
func (e *cmEngine) accept(now qp.Time, id *cmID, p *cmAcceptParams, out *cmOutput) error {
	if id.state != cmReqRcvd {
		return e.handshakeError(id)
	}
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrConnectReply, id.tid)}
	f.REP = wire.REPFields{
		LocalCommID:        id.local,
		RemoteCommID:       id.remote,
		LocalQPN:           p.qpn,
		StartingPSN:        p.psn,
		ResponderResources: p.responderResources,
		InitiatorDepth:     p.initiatorDepth,
		TargetACKDelay:     cmTargetACKDelay,
		RNRRetryCount:      p.rnrRetryCount,
		SRQ:                p.srq,
		LocalCAGUID:        e.guid,
	}
	copy(f.REP.PrivateData[:], p.private)
	id.localQPN = p.qpn
	id.state = cmRepSent
	// The REP goes once: it is sent again only in answer to a repeated
	// REQ, so that a requester gets no more from us than it sends until
	// its RTU (or its first packet on the QP) shows it receives what we
	// send: a REQ from a spoofed address brings that address one REP, not
	// 1 + the REQ's max CM retries of them. (Linux resends the REP on its
	// own timer, and drops repeated REQs.) The timer armed when the REQ
	// came bounds the wait for the RTU.
	copy(id.msg[:], e.send(out, id.peer, &f))
	id.sends = 1
	return nil
}

// reject refuses the REQ of id with reason and private data. Linux
// forgets a rejected REQ at once, so that a duplicate reaches the listener
// again; softnic keeps it for a timewait and repeats the REJ instead.
func (e *cmEngine) reject(now qp.Time, id *cmID, reason wire.RejectReason, private []byte, out *cmOutput) error {
	if id.state != cmReqRcvd {
		return e.handshakeError(id)
	}
	e.sendREJ(id, wire.CMMessageREQ, reason, nil, private, out)
	id.err = fmt.Errorf("connection request from %v was rejected: %w", id.peer, ErrInvalid)
	id.rejected = true
	e.enterTimewait(now, id)
	return nil
}

// sendREJ rejects message msg of id's exchange; in timewait the REJ is
// what duplicates get.
func (e *cmEngine) sendREJ(id *cmID, msg wire.CMMessage, reason wire.RejectReason, ari, private []byte, out *cmOutput) {
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrConnectReject, id.tid)}
	f.REJ = wire.REJFields{
		LocalCommID:     id.local,
		RemoteCommID:    id.remote,
		MessageRejected: msg,
		ARILength:       uint8(len(ari)),
		Reason:          reason,
	}
	copy(f.REJ.ARI[:], ari)
	copy(f.REJ.PrivateData[:], private)
	copy(id.msg[:], e.send(out, id.peer, &f))
}

// abort ends a handshake the local side gives up (the dialer's context
// ended, a QP could not be readied), telling the peer as Linux does when
// such a cm_id is destroyed: REJ "timeout" with our CA GUID while the REQ
// is unanswered, REJ "consumer reject" after a REP.
func (e *cmEngine) abort(now qp.Time, id *cmID, out *cmOutput) {
	switch id.state {
	case cmReqSent:
		var guid [8]byte
		binary.BigEndian.PutUint64(guid[:], e.guid)
		e.sendREJ(id, wire.CMMessageOther, wire.RejectTimeout, guid[:], nil, out)
		e.remove(id)
	case cmRepRcvd:
		e.sendREJ(id, wire.CMMessageREP, wire.RejectConsumer, nil, nil, out)
		e.remove(id)
	case cmReqRcvd:
		e.reject(now, id, wire.RejectConsumer, nil, out)
	case cmRepSent:
		e.sendREJ(id, wire.CMMessageOther, wire.RejectConsumer, nil, nil, out)
		e.enterTimewait(now, id)
	case cmEstablished:
		e.disconnect(now, id, out)
	}
}

// disconnect starts the disconnection of an established connection: DREQ,
// retransmitted until a DREP comes. It reports whether it sent one.
func (e *cmEngine) disconnect(now qp.Time, id *cmID, out *cmOutput) bool {
	if id.state != cmEstablished {
		return false
	}
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrDisconnectRequest, cmTID(id.local))}
	f.DREQ = wire.DREQFields{LocalCommID: id.local, RemoteCommID: id.remote, RemoteQPN: id.remoteQPN}
	id.state = cmDreqSent
	e.end(id, nil)
	e.sendAwaited(now, id, &f, out)
	return true
}

// end records why id's connection ended and closes its done channel; the
// first reason stays.
func (e *cmEngine) end(id *cmID, err error) {
	if id.ended {
		return
	}
	id.ended, id.err = true, err
	close(id.done)
}

// finish delivers the handshake's result to its waiter.
func (e *cmEngine) finish(id *cmID, r cmResult) {
	select {
	case id.result <- r:
	default:
	}
}

// enterTimewait moves id to TIMEWAIT for one ACK timeout of its path.
func (e *cmEngine) enterTimewait(now qp.Time, id *cmID) {
	if id.state == cmEstablished || id.state == cmDreqSent {
		e.cnt.inc(CMDisconnected)
	}
	e.settleHalfOpen(id)
	id.state = cmTimewait
	e.settle(id)
	e.arm(id, now.Add(cmTime(id.ackTimeout)))
}

// remove takes id out of every table.
func (e *cmEngine) remove(id *cmID) {
	if e.ids[id.local] == id {
		delete(e.ids, id.local)
	}
	key := cmRemoteKey{id.remote, id.remoteSrc}
	if e.remotes[key] == id {
		delete(e.remotes, key)
	}
	e.settleHalfOpen(id)
	id.state = cmGone
	id.timerSeq = 0
	e.settle(id)
}

// admit counts a new half-open request from src, unless the limits are
// reached: then it reports false.
func (e *cmEngine) admit(id *cmID, src netip.Addr) bool {
	key := cmSourceKey(src)
	if e.halfOpen >= e.lim.HalfOpen || e.halfOpenBy[key] >= e.lim.HalfOpenPerSource {
		return false
	}
	e.halfOpen++
	e.halfOpenBy[key]++
	id.halfOpen = true
	return true
}

// settleHalfOpen stops counting id among the half-open requests: its
// handshake completed or ended.
func (e *cmEngine) settleHalfOpen(id *cmID) {
	if !id.halfOpen {
		return
	}
	id.halfOpen = false
	e.halfOpen--
	key := cmSourceKey(id.remoteSrc.Addr())
	if e.halfOpenBy[key]--; e.halfOpenBy[key] <= 0 {
		delete(e.halfOpenBy, key)
	}
}

func (e *cmEngine) settle(id *cmID) {
	select {
	case <-id.settled:
	default:
		close(id.settled)
	}
}

// lookup finds the communication a MAD from src names by our local
// communication ID. Only the address is compared: a peer need not send
// from the port it receives on (see cmPeerAddr).
func (e *cmEngine) lookup(local uint32, src netip.AddrPort) *cmID {
	if id := e.ids[local]; id != nil && id.peer.Addr() == src.Addr() {
		return id
	}
	return nil
}

// receive handles one CM MAD from the QP1 at src; mtu is the largest path
// MTU toward src, which a REQ may ask for.
func (e *cmEngine) receive(now qp.Time, src netip.AddrPort, mtu wire.MTU, m *wire.MAD, out *cmOutput) {
	e.cnt.inc(CMRxMsgs)
	if e.closed {
		e.cnt.inc(CMRxDropped)
		return
	}
	switch m.AttrID() {
	case wire.AttrConnectRequest:
		e.receiveREQ(now, src, mtu, m, out)
	case wire.AttrConnectReply:
		e.receiveREP(src, m.REP, out)
	case wire.AttrReadyToUse:
		e.receiveRTU(src, m.RTU)
	case wire.AttrConnectReject:
		e.receiveREJ(now, src, m.REJ, out)
	case wire.AttrMsgRcptAck:
		e.receiveMRA(now, src, m.MRA)
	case wire.AttrDisconnectRequest:
		e.receiveDREQ(now, src, m, out)
	case wire.AttrDisconnectReply:
		e.receiveDREP(now, src, m.DREP)
	}
}

// issueREJ rejects a REQ that gets no communication of its own, as
// Linux's cm_issue_rej does: our communication ID 0, the REQ's transaction
// ID.
func (e *cmEngine) issueREJ(src netip.AddrPort, m *wire.MAD, reason wire.RejectReason, ari []byte, out *cmOutput) {
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrConnectReject, m.Header.TransactionID())}
	f.REJ = wire.REJFields{
		RemoteCommID:    m.REQ.LocalCommID(),
		MessageRejected: wire.CMMessageREQ,
		ARILength:       uint8(len(ari)),
		Reason:          reason,
	}
	copy(f.REJ.ARI[:], ari)
	e.send(out, cmPeerAddr(src, m.REQ.LocalCAGUID()), &f)
}

func (e *cmEngine) receiveREQ(now qp.Time, src netip.AddrPort, mtu wire.MTU, m *wire.MAD, out *cmOutput) {
	r := m.REQ
	if id := e.remotes[cmRemoteKey{r.LocalCommID(), src}]; id != nil {
		e.cnt.inc(CMRxDuplicates)
		e.duplicateREQ(now, id, out)
		return
	}
	ps, port, ok := r.ServiceID().RDMACM()
	l := e.listeners[port]
	if !ok || ps != wire.PortSpaceTCP || l == nil {
		e.issueREJ(src, m, wire.RejectInvalidServiceID, nil, out)
		return
	}
	if want := r.PathMTU(); want.Bytes() == 0 || want > mtu {
		// Linux takes the REQ's MTU whatever its own; softnic refuses a
		// larger one than its path toward the requester carries and names
		// that in the first ARI byte, from which a softnic dialer retries
		// with it: the connection gets the smaller of both sides' MTUs.
		e.issueREJ(src, m, wire.RejectInvalidMTU, []byte{byte(mtu)}, out)
		return
	}
	if _, err := wire.DecodeCMAHeader(r.PrivateData()); err != nil || r.TransportServiceType() != 0 {
		// rdma_cm's listener fails a REQ without its header or for
		// another transport than RC, and Linux's CM then rejects it as
		// the consumer.
		e.issueREJ(src, m, wire.RejectConsumer, nil, out)
		return
	}
	req := r.Fields()
	id := e.newID(false, cmPeerAddr(src, req.LocalCAGUID), port)
	if !e.admit(id, src.Addr()) {
		e.cnt.inc(CMRejectedBusy)
		e.issueREJ(src, m, wire.RejectNoResources, nil, out)
		return
	}
	id.remote, id.tid, id.req = req.LocalCommID, m.Header.TransactionID(), &req
	id.remoteQPN = req.LocalQPN
	id.remoteSrc = src
	// The DREQ's wait and the timewait come from the requester's
	// timeouts, as in Linux, within what the device honours.
	id.ackTimeout = min(req.PrimaryPath.LocalACKTimeout, cmMaxHonouredTimeout)
	id.timeout = cmTime(min(req.LocalCMResponseTimeout, cmMaxHonouredTimeout)) + cmTime(id.ackTimeout)
	id.retries = req.MaxCMRetries
	id.state = cmReqRcvd
	select {
	case l.backlog <- id:
	default:
		// A full backlog drops the REQ without a REJ, as Linux does when
		// the listener has no room (ENOMEM): the requester retries.
		e.settleHalfOpen(id)
		e.cnt.inc(CMRxDropped)
		return
	}
	e.ids[id.local] = id
	e.remotes[cmRemoteKey{id.remote, src}] = id
	id.expires = now.Add(e.handshakeTime(&req))
	e.arm(id, id.expires)
}

// handshakeTime is how long the request req may take to complete its
// handshake: as long as the requester keeps trying (each REQ it sends again
// brings the REP again) and then answers, within CMLimits.Handshake.
func (e *cmEngine) handshakeTime(req *wire.REQFields) time.Duration {
	try := cmTime(req.RemoteCMResponseTimeout) + cmTime(req.PrimaryPath.LocalACKTimeout)
	span := time.Duration(req.MaxCMRetries+1)*try + cmTime(req.LocalCMResponseTimeout)
	return min(span, e.lim.Handshake)
}

// duplicateREQ answers a REQ that is already known.
func (e *cmEngine) duplicateREQ(now qp.Time, id *cmID, out *cmOutput) {
	switch id.state {
	case cmReqRcvd:
		// rdma_cm marks an unanswered REQ with a delayed MRA; a duplicate
		// gets the MRA, so that the requester waits longer.
		f := wire.MADFields{Header: wire.CMHeader(wire.AttrMsgRcptAck, id.tid)}
		f.MRA = wire.MRAFields{
			LocalCommID: id.local, RemoteCommID: id.remote,
			MessageMRAed: wire.CMMessageREQ, ServiceTimeout: mraServiceTimeout(now, id),
		}
		e.send(out, id.peer, &f)
	case cmRepSent:
		// The REP was lost: send it again at once. (Linux drops the
		// duplicate and leaves the REP to its own retransmission timer.)
		e.resend(id, out)
	case cmTimewait:
		if id.rejected {
			e.resend(id, out)
			return
		}
		e.sendREJ(id, wire.CMMessageOther, wire.RejectStaleConnection, nil, nil, out)
	}
}

// mraServiceTimeout is the service timeout of an MRA for the pending
// request id: rdma_cm's, unless the request is dropped sooner. After the
// MRA the requester waits the service timeout and its ACK timeout, then
// sends the REQ again; that REQ must still find the request, for only a
// repeated REQ brings a lost REP again (see accept). An MRA asking for
// more than the request's time left would leave such a requester waiting
// for a REP that never comes (69 s, where the request is held 20 s).
func mraServiceTimeout(now qp.Time, id *cmID) uint8 {
	left := id.expires.Sub(now) - cmTime(id.req.PrimaryPath.LocalACKTimeout)
	exp := uint8(cmMRAServiceTimeout)
	for exp > 0 && cmTime(exp) > left {
		exp--
	}
	return exp
}

func (e *cmEngine) receiveREP(src netip.AddrPort, r wire.REP, out *cmOutput) {
	id := e.lookup(r.RemoteCommID(), src)
	switch {
	case id == nil:
		e.cnt.inc(CMRxDropped) // Linux drops a REP it has no communication for
	case id.state == cmReqSent:
		rep := r.Fields()
		id.remote, id.remoteQPN = rep.LocalCommID, rep.LocalQPN
		id.state = cmRepRcvd
		id.timerSeq = 0
		e.finish(id, cmResult{rep: &rep})
	case id.remote != r.LocalCommID():
		e.cnt.inc(CMRxDropped)
	case id.state == cmEstablished:
		// The RTU was lost: the peer is still waiting for it.
		e.cnt.inc(CMRxDuplicates)
		e.sendRTU(id, out)
	default:
		e.cnt.inc(CMRxDuplicates)
	}
}

func (e *cmEngine) receiveRTU(src netip.AddrPort, r wire.RTU) {
	id := e.lookup(r.RemoteCommID(), src)
	switch {
	case id == nil || id.remote != r.LocalCommID():
		e.cnt.inc(CMRxDropped)
	case id.state == cmRepSent:
		e.established(id)
	default:
		e.cnt.inc(CMRxDuplicates)
	}
}

// established completes the passive handshake of id.
func (e *cmEngine) established(id *cmID) {
	e.settleHalfOpen(id)
	id.state = cmEstablished
	id.timerSeq = 0
	e.cnt.inc(CMEstablished)
	e.finish(id, cmResult{})
}

// commEstablished is the QP of id receiving its first request before the
// RTU came (the RTU was lost, or overtaken): the requester has the REP,
// and the connection is established, as Linux's CM takes the QP's
// communication-established event (IB_EVENT_COMM_EST, ib_cm_notify).
func (e *cmEngine) commEstablished(id *cmID) {
	if id.state == cmRepSent {
		e.established(id)
	}
}

// RejectError is a connection attempt refused by the peer's REJ, as Dial
// returns it.
type RejectError struct {
	Addr   netip.AddrPort    // the device that rejected
	Port   uint16            // the rdma_cm port connected to
	Reason wire.RejectReason // the REJ's reason
	ARI    []byte            // its additional reject information, ARI-length bytes
	// PrivateData is the REJ's private data: the whole field, since the
	// wire carries no length (as rdma_cm delivers it).
	PrivateData []byte
}

func (e *RejectError) Error() string {
	s := fmt.Sprintf("connection to %v port %d rejected: %v", e.Addr, e.Port, e.Reason)
	if e.Reason == wire.RejectInvalidServiceID {
		s += fmt.Sprintf(" (nothing listens on port %d)", e.Port)
	}
	return s
}

// Is reports ErrConnRefused for a REJ with reason "invalid service ID":
// nothing listens on the port, as a TCP RST says; and ErrAgain for "no
// resources": the peer holds as many requests as it takes (CMLimits), and
// a later try may get in.
func (e *RejectError) Is(target error) bool {
	return target == ErrConnRefused && e.Reason == wire.RejectInvalidServiceID ||
		target == ErrAgain && e.Reason == wire.RejectNoResources
}

func (e *cmEngine) receiveREJ(now qp.Time, src netip.AddrPort, r wire.REJ, out *cmOutput) {
	id := e.lookup(r.RemoteCommID(), src)
	if id == nil && r.Reason() == wire.RejectTimeout {
		// A requester that gives up before it has our communication ID
		// names itself only: find it by its own ID, as Linux does (by the
		// CA GUID in the ARI and that ID).
		id = e.remotes[cmRemoteKey{r.LocalCommID(), src}]
	}
	if id == nil || r.MessageRejected() != wire.CMMessageREQ && id.remote != 0 && id.remote != r.LocalCommID() {
		e.cnt.inc(CMRxDropped)
		return
	}
	if !id.active {
		// The requester gave up: it rejects our REP, or its REQ before the
		// application answered.
		err := fmt.Errorf("connection request from %v withdrawn (REJ: %v): %w", id.peer, r.Reason(), ErrConnReset)
		switch id.state {
		case cmReqRcvd, cmRepSent:
			id.err = err
			e.remove(id)
			e.finish(id, cmResult{err: err})
			return
		}
	}
	rerr := &RejectError{
		Addr: id.peer, Port: id.port, Reason: r.Reason(),
		ARI:         append([]byte(nil), r.ARI()[:min(int(r.ARILength()), wire.REJARISize)]...),
		PrivateData: append([]byte(nil), r.PrivateData()...),
	}
	switch id.state {
	case cmReqSent:
		id.err = rerr
		e.remove(id)
		e.finish(id, cmResult{err: rerr})
	case cmRepRcvd:
		id.err = rerr
		e.enterTimewait(now, id)
	case cmEstablished, cmDreqSent:
		e.end(id, fmt.Errorf("%v: %w", rerr, ErrConnReset))
		e.enterTimewait(now, id)
		out.flush = append(out.flush, id)
	default:
		e.cnt.inc(CMRxDuplicates)
	}
}

func (e *cmEngine) receiveMRA(now qp.Time, src netip.AddrPort, m wire.MRA) {
	id := e.lookup(m.RemoteCommID(), src)
	switch {
	case id == nil:
		e.cnt.inc(CMRxDropped)
	case id.state == cmReqSent && m.MessageMRAed() == wire.CMMessageREQ,
		id.state == cmRepSent && m.MessageMRAed() == wire.CMMessageREP:
		// The peer needs longer: wait its service timeout on top of the
		// path's ACK timeout before sending again, as Linux does.
		e.arm(id, now.Add(cmTime(m.ServiceTimeout())+cmTime(id.ackTimeout)))
	default:
		e.cnt.inc(CMRxDuplicates)
	}
}

func (e *cmEngine) receiveDREQ(now qp.Time, src netip.AddrPort, m *wire.MAD, out *cmOutput) {
	d := m.DREQ
	id := e.lookup(d.RemoteCommID(), src)
	if id == nil || id.remote != d.LocalCommID() {
		// Linux answers a DREQ it knows nothing of with a DREP, so that
		// the peer stops asking.
		e.cnt.inc(CMRxDuplicates)
		f := wire.MADFields{Header: wire.CMHeader(wire.AttrDisconnectReply, m.Header.TransactionID())}
		f.DREP = wire.DREPFields{LocalCommID: d.RemoteCommID(), RemoteCommID: d.LocalCommID()}
		e.send(out, src, &f)
		return
	}
	if d.RemoteQPN() != id.localQPN {
		e.cnt.inc(CMRxDropped)
		return
	}
	id.tid = m.Header.TransactionID()
	switch id.state {
	case cmEstablished, cmRepSent, cmDreqSent:
		prev := id.state
		e.sendDREP(id, out)
		e.enterTimewait(now, id)
		switch prev {
		case cmEstablished:
			e.end(id, fmt.Errorf("%v disconnected: %w", id.peer, ErrConnReset))
			out.flush = append(out.flush, id)
		case cmRepSent:
			id.err = fmt.Errorf("%v disconnected before ReadyToUse: %w", id.peer, ErrConnReset)
			e.finish(id, cmResult{err: id.err})
		}
	case cmTimewait:
		e.cnt.inc(CMRxDuplicates)
		e.sendDREP(id, out)
	default:
		e.cnt.inc(CMRxDropped)
	}
}

func (e *cmEngine) sendDREP(id *cmID, out *cmOutput) {
	f := wire.MADFields{Header: wire.CMHeader(wire.AttrDisconnectReply, id.tid)}
	f.DREP = wire.DREPFields{LocalCommID: id.local, RemoteCommID: id.remote}
	e.send(out, id.peer, &f)
}

func (e *cmEngine) receiveDREP(now qp.Time, src netip.AddrPort, d wire.DREP) {
	id := e.lookup(d.RemoteCommID(), src)
	switch {
	case id == nil || id.remote != d.LocalCommID():
		e.cnt.inc(CMRxDropped)
	case id.state == cmDreqSent:
		e.enterTimewait(now, id)
	default:
		e.cnt.inc(CMRxDuplicates)
	}
}

// expire handles the timer of id.
func (e *cmEngine) expire(now qp.Time, id *cmID, out *cmOutput) {
	switch id.state {
	case cmReqRcvd, cmRepSent:
		// The handshake took longer than handshakeTime: the application
		// did not answer, or the requester not with an RTU (it gave up, or
		// never was: a REQ from a spoofed address). Dropped without a
		// word: a REJ would be a second message to an address that never
		// showed it receives.
		e.cnt.inc(CMHandshakeTimeouts)
		what := "no answer from the application"
		if id.state == cmRepSent {
			what = "no ReadyToUse after the ConnectReply"
		}
		id.err = fmt.Errorf("connection from %v: %s in time: %w", id.peer, what, ErrTimedOut)
		e.remove(id)
		e.finish(id, cmResult{err: id.err})
	case cmReqSent, cmDreqSent:
		if id.sends <= int(id.retries) {
			e.resend(id, out)
			e.cnt.inc(CMTxRetries)
			id.sends++
			e.arm(id, now.Add(id.timeout))
			return
		}
		if id.state == cmDreqSent {
			e.enterTimewait(now, id) // Linux, too, gives up on the DREP
			return
		}
		id.err = fmt.Errorf("connection to %v port %d: no reply to %d ConnectRequests: %w", id.peer, id.port, id.sends, ErrTimedOut)
		e.remove(id)
		e.finish(id, cmResult{err: id.err})
	case cmTimewait:
		e.remove(id)
	}
}

// listen registers a listener for rdma_cm TCP port with room for backlog
// unanswered requests.
func (e *cmEngine) listen(port uint16, backlog int) (*cmListener, error) {
	switch {
	case e.closed:
		return nil, ErrClosed
	case e.listeners[port] != nil:
		return nil, fmt.Errorf("port %d is already listened on (EADDRINUSE): %w", port, ErrBusy)
	}
	l := &cmListener{port: port, backlog: make(chan *cmID, backlog), closed: make(chan struct{})}
	e.listeners[port] = l
	return l, nil
}

// unlisten closes l and rejects the requests in its backlog, as Linux
// rejects (consumer reject) the pending requests of a destroyed listener.
func (e *cmEngine) unlisten(now qp.Time, l *cmListener, out *cmOutput) {
	if e.listeners[l.port] != l {
		return
	}
	delete(e.listeners, l.port)
	close(l.closed)
	for {
		select {
		case id := <-l.backlog:
			e.reject(now, id, wire.RejectConsumer, nil, out)
		default:
			return
		}
	}
}

// shutdown ends everything when the device closes: established
// connections get one DREQ (not waited for), handshakes are aborted, and
// every waiter is told ErrClosed.
func (e *cmEngine) shutdown(now qp.Time, out *cmOutput) {
	for _, l := range e.listeners {
		e.unlisten(now, l, out)
	}
	e.closed = true
	for _, id := range e.ids {
		e.abort(now, id, out)
		e.end(id, ErrClosed)
		if id.err == nil {
			id.err = ErrClosed
		}
		e.finish(id, cmResult{err: ErrClosed})
		e.remove(id)
	}
	e.timers = nil
}

// arm (re)starts id's timer.
func (e *cmEngine) arm(id *cmID, at qp.Time) {
	e.timerSeq++
	id.timerSeq = e.timerSeq
	heap.Push(&e.timers, cmTimer{at: at, local: id.local, seq: id.timerSeq})
}

// deadline returns when the engine next needs a tick, if ever.
func (e *cmEngine) deadline() (qp.Time, bool) {
	for len(e.timers) > 0 {
		t := e.timers[0]
		if e.armed(t) != nil {
			return t.at, true
		}
		heap.Pop(&e.timers) // stopped or re-armed since
	}
	return 0, false
}

// tick runs the timers due at now.
func (e *cmEngine) tick(now qp.Time, out *cmOutput) {
	for len(e.timers) > 0 && e.timers[0].at <= now {
		t := heap.Pop(&e.timers).(cmTimer)
		if id := e.armed(t); id != nil {
			id.timerSeq = 0
			e.expire(now, id, out)
		}
	}
}

// armed returns the communication whose timer t is, unless the timer was
// stopped or re-armed since, or the communication is gone.
func (e *cmEngine) armed(t cmTimer) *cmID {
	if id := e.ids[t.local]; id != nil && id.timerSeq == t.seq {
		return id
	}
	return nil
}

// cmTimer is one armed timer of the communication with local ID local; it
// is stale once that communication's timerSeq moved on. It names the
// communication rather than points at it, so that a stale timer keeps
// nothing of a communication that is gone (its QP least of all) alive.
type cmTimer struct {
	at    qp.Time
	local uint32
	seq   uint64
}

type cmTimers []cmTimer

func (h cmTimers) Len() int           { return len(h) }
func (h cmTimers) Less(i, j int) bool { return h[i].at < h[j].at }
func (h cmTimers) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cmTimers) Push(x any)        { *h = append(*h, x.(cmTimer)) }
func (h *cmTimers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = cmTimer{}
	*h = old[:len(old)-1]
	return t
}
