package cm

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// Errors of the connection manager, for errors.Is; package nic re-exports
// them.
var (
	// ErrClosed is returned by calls on a closed device (the engine was
	// shut down) or destroyed object.
	ErrClosed = errors.New("softnic: device closed")
	// ErrConnRefused (ECONNREFUSED): nothing listens on the rdma_cm port
	// dialed (the peer's REJ says "invalid service ID"; see RejectError).
	ErrConnRefused = errors.New("connection refused (ECONNREFUSED)")
	// ErrTimedOut (ETIMEDOUT): the peer did not answer a connection
	// manager message after every retry, or a connection's QP exhausted
	// its transport retries.
	ErrTimedOut = errors.New("connection timed out (ETIMEDOUT)")
	// ErrConnReset (ECONNRESET): the peer disconnected (DREQ) or gave up
	// the connection (REJ).
	ErrConnReset = errors.New("connection reset by peer (ECONNRESET)")
)

// Defaults and fixed values of the CM messages softnic sends, the ones
// Linux's rdma_cm sends on RoCE (compare ../shared/golden/rping.pcap).
const (
	// hiTID is the top half of the transaction IDs softnic starts. Linux
	// puts the number of its CM's MAD agent there (2 in rping.pcap) and the
	// local communication ID, as it lies in memory, in the bottom half.
	hiTID = 1
	// TargetACKDelay is the ACK delay a REP advertises: rxe's local CA
	// ACK delay, 4.096 µs × 2^15 ≈ 134 ms.
	TargetACKDelay = 15
	// MRAServiceTimeout is the most the MRA that answers a duplicate REQ
	// the application has not answered yet asks the requester to wait
	// (see mraServiceTimeout): rdma_cm's CMA_CM_MRA_SETTING, 4.096 µs ×
	// 2^24 ≈ 69 s.
	MRAServiceTimeout = 24
	// hopLimit is the REQ path's hop limit, Linux's for a RoCE route.
	hopLimit = 64
	// permissiveLID stands in for the LIDs RoCE does not have.
	permissiveLID = 0xFFFF
	// The rdma_cm ports softnic picks, for a REQ's CMA header and for a
	// listener of port 0: Linux's default ip_local_port_range.
	firstPort, lastPort = 32768, 60999
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

// GUID returns the CA GUID of the softnic device at a: the mark, then a
// hash of the address.
func GUID(a netip.AddrPort) uint64 {
	h := fnv.New64a()
	b, _ := a.MarshalBinary()
	h.Write(b)
	g := softnicGUIDMark<<softnicGUIDShift | h.Sum64()&(1<<softnicGUIDShift-1)
	if g>>eui64Shift&0xFFFF == eui64FFFE {
		g ^= 1 << eui64Shift
	}
	return g
}

// peerAddr is where the CM answers a peer whose REQ came from src with
// CA GUID guid, and where the connection's packets go: src for a softnic
// peer, port 4791 of its address for any other.
func peerAddr(src netip.AddrPort, guid uint64) netip.AddrPort {
	if guid>>softnicGUIDShift == softnicGUIDMark && guid>>eui64Shift&0xFFFF != eui64FFFE {
		return src
	}
	return netip.AddrPortFrom(src.Addr(), wire.UDPPort)
}

// Duration converts a 5-bit IBTA time exponent (CM response timeouts,
// local ACK timeouts, service timeouts) to a duration: 4.096 µs × 2^exp.
func Duration(exp uint8) time.Duration { return 4096 * time.Nanosecond << min(exp, 31) }

// tidOf returns the transaction ID of an exchange the side with local
// communication ID local starts (REQ, DREQ): Linux's, whose bottom half is
// the ID's bytes read in little-endian order.
func tidOf(local uint32) uint64 { return hiTID<<32 | uint64(bits.ReverseBytes32(local)) }

// flowLabel is the flow label rdma_cm puts in a RoCE REQ's path, made
// from the rdma_cm source and destination ports.
func flowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & (1<<20 - 1)
}

// State is the state of one communication, named after the IBTA's (and
// Linux's enum ib_cm_state). The MRA states are folded into their base
// states: softnic sends an MRA only for an unanswered REQ (ReqRcvd) and
// extends its own wait when it receives one.
type State uint8

const (
	ReqSent     State = iota + 1 // active: REQ sent, waiting for REP or REJ
	RepRcvd                      // active: REP received; the dialer readies its QP, then calls Establish
	ReqRcvd                      // passive: REQ queued for the listener, not answered yet
	RepSent                      // passive: REP sent, waiting for RTU
	Established                  // both sides may use their QPs
	DreqSent                     // DREQ sent, waiting for DREP
	Timewait                     // over; duplicates are still answered until the timer ends it
	Gone                         // out of every table
	SidrReqSent                  // active: SIDR_REQ sent, waiting for the SIDR_REP (sidr.go)
	SidrReqRcvd                  // passive: SIDR_REQ queued for the listener, not answered yet
)

var stateNames = [...]string{
	ReqSent: "REQ_SENT", RepRcvd: "REP_RCVD", ReqRcvd: "REQ_RCVD", RepSent: "REP_SENT",
	Established: "ESTABLISHED", DreqSent: "DREQ_SENT", Timewait: "TIMEWAIT", Gone: "IDLE",
	SidrReqSent: "SIDR_REQ_SENT", SidrReqRcvd: "SIDR_REQ_RCVD",
}

func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ID is one communication (Linux's cm_id): one side of one connection
// attempt and, if it succeeds, of the connection. Its fields change only
// in the engine's calls; read it under the lock that serialises them.
type ID struct {
	state  State
	active bool
	local  uint32         // our communication ID
	remote uint32         // the peer's, 0 until known
	tid    uint64         // transaction ID of our answers
	peer   netip.AddrPort // where the peer receives (see peerAddr)
	ps     mad.PortSpace  // the rdma_cm port space of port
	port   uint16         // the rdma_cm port connected to
	// remoteSrc is where a passive communication's REQ came from: with
	// the requester's communication ID, it recognises duplicates.
	remoteSrc netip.AddrPort

	localQPN, remoteQPN uint32
	tclass              uint8 // the path's traffic class, of the QPs and this communication's MADs

	// timeout and retries govern the message we wait an answer for; the
	// timewait lasts one ACK timeout of the path, as in Linux.
	timeout    time.Duration
	retries    uint8
	ackTimeout uint8
	// msg is the REQ, REP or DREQ waiting for an answer, sent sends times;
	// in timewait after a reject it is the REJ, repeated to duplicates.
	msg      [mad.MADSize]byte
	sends    int
	rejected bool
	halfOpen bool    // counted in the engine's half-open requests
	queued   bool    // in its listener's backlog
	timerSeq uint64  // the armed timer's sequence number; 0 when none is
	timerAt  qp.Time // when the armed timer is due

	req     *mad.REQFields // passive: the REQ received
	expires qp.Time        // passive: when the request is dropped unless its handshake completed
	rep     *mad.REPFields // active: the REP received

	// sidr marks a service ID resolution (sidr.go): the SIDR_REQ received
	// (passive) or the SIDR_REP (active).
	sidr    bool
	sidrReq *mad.SIDRREQFields
	sidrRep *mad.SIDRREPFields

	// What the driver has been told (Output.Events), each once: the
	// handshake's outcome, the connection's end, and that nothing waits
	// for an answer any more. err is why it failed or ended.
	finished, ended, settled bool
	err                      error

	// Context is the driver's, as ib_cm_id's context is the consumer's:
	// what it keeps for the communication (the goroutines' wait, the QP).
	// The engine never looks at it.
	Context any
}

// State returns the communication's state.
func (id *ID) State() State { return id.state }

// Peer returns where the peer receives: its device's address and UDP port.
func (id *ID) Peer() netip.AddrPort { return id.peer }

// Port returns the rdma_cm port the communication connects to.
func (id *ID) Port() uint16 { return id.port }

// PortSpace returns the rdma_cm port space of Port.
func (id *ID) PortSpace() mad.PortSpace { return id.ps }

// Err returns why the handshake failed or the connection ended, nil
// before (or after a local disconnect).
func (id *ID) Err() error { return id.err }

// REQ returns the connection request a passive communication received.
func (id *ID) REQ() *mad.REQFields { return id.req }

// REP returns the reply an active communication received, nil before.
func (id *ID) REP() *mad.REPFields { return id.rep }

// remoteKey identifies a passive communication by the peer's
// communication ID (or SIDR request ID) and address, to recognise
// duplicate REQs (and SIDR_REQs).
type remoteKey struct {
	comm uint32
	peer netip.AddrPort
}

// Listener is the engine's side of an rdma_cm listener: requests for its
// port wait in its backlog until the driver takes them (NextRequest).
type Listener struct {
	port    uint16
	ps      mad.PortSpace
	ud      bool // it takes SIDR_REQs (ListenUD), not REQs
	held    bool // it holds its port and takes no request yet (Hold)
	max     int  // the backlog's room
	backlog []*ID
	// Context is the driver's: the engine never looks at it.
	Context any
}

// Port returns the rdma_cm port the listener takes requests for.
func (l *Listener) Port() uint16 { return l.port }

// PortSpace returns the rdma_cm port space of Port.
func (l *Listener) PortSpace() mad.PortSpace { return l.ps }

// Backlog returns how many requests wait in the listener's backlog.
func (l *Listener) Backlog() int { return len(l.backlog) }

// MAD is one MAD to send to QP1 at Dst.
type MAD struct {
	Dst netip.AddrPort
	// TrafficClass is the IP traffic class to send with: the path's of the
	// communication (DialParams.TrafficClass, a REQ's primary path), as
	// Linux's CM sends on the path's address vector; 0 for others.
	TrafficClass uint8
	MAD          [mad.MADSize]byte
}

// EventType says what an Event tells the driver.
type EventType uint8

const (
	// EventRequest: a request waits in Listener's backlog (NextRequest).
	EventRequest EventType = iota + 1
	// EventReply: the dialer's REP came (ID.REP); it readies its QP and
	// calls Establish, or Abort.
	EventReply
	// EventEstablished: the acceptor's handshake completed, by the RTU or
	// by the QP's first request (CommEstablished).
	EventEstablished
	// EventFailed: the handshake failed; Err says why.
	EventFailed
	// EventEnded: an established connection ended; Err says why, nil when
	// the local side disconnected.
	EventEnded
	// EventSettled: nothing the engine sent for the communication waits
	// for an answer any more (it is in timewait, or gone): a local
	// disconnect is complete.
	EventSettled
	// EventListenerClosed: Listener takes no more requests (Unlisten,
	// Shutdown); those it held were rejected.
	EventListenerClosed
	// EventResolved: the SIDR_REP of a resolution came with a QP
	// (ID.SIDRREP); one with another status is EventFailed.
	EventResolved
)

var eventNames = [...]string{
	EventRequest: "request", EventReply: "reply", EventEstablished: "established",
	EventFailed: "failed", EventEnded: "ended", EventSettled: "settled", EventListenerClosed: "listener closed",
	EventResolved: "resolved",
}

func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is something a waiting goroutine of the driver must learn.
type Event struct {
	Type     EventType
	ID       *ID
	Listener *Listener // EventRequest (where the request waits), EventListenerClosed
	Err      error     // EventFailed, EventEnded
}

// CounterID names a count of the engine, after Linux's ib_cm counter groups
// (cm_tx_msgs, cm_tx_retries, cm_rx_msgs, cm_rx_duplicates) summed over
// the message types, and the limits' counts.
type CounterID uint8

const (
	TxMsgs            CounterID = iota // CM MADs sent, retransmissions included
	TxRetries                          // CM MADs sent again after a timeout
	RxMsgs                             // CM MADs received
	RxDuplicates                       // CM MADs received again (a retransmission or a stale message), answered from state
	RxDropped                          // CM MADs that fit no connection, or REQs beyond a listener's backlog
	Connected                          // connections that reached the established state
	Disconnected                       // established connections that ended (DREQ, REJ or DREQ timeout)
	RejectedBusy                       // REQs refused beyond the half-open limits (REJ "no resources", or dropped: RejectsDropped); SIDR_REQs beyond them are dropped
	HandshakeTimeouts                  // requests dropped whose handshake did not complete in time
	RejectsDropped                     // REQs dropped unanswered: their source had spent its REJs (Limits.RejectRate)
	NumCounters
)

var counterNames = [NumCounters]string{
	"cm_tx_msgs", "cm_tx_retries", "cm_rx_msgs", "cm_rx_duplicates", "cm_rx_dropped",
	"cm_established", "cm_disconnected", "cm_rejected_busy", "cm_handshake_timeouts",
	"cm_rejects_dropped",
}

// String returns the counter's name, as package nic's Device.Counters
// names it.
func (c CounterID) String() string {
	if c < NumCounters {
		return counterNames[c]
	}
	return fmt.Sprintf("Counter(%d)", uint8(c))
}

// Counts holds one count per Counter.
type Counts [NumCounters]uint64

// Output is what the engine's calls ask the driver to do, in order: tell
// the goroutines that wait (Events), move the QPs of Flush to the error
// state (their peer disconnected), then send MADs. Counts are what the
// calls counted. The calls append to an Output; the driver takes it and
// starts a new one.
type Output struct {
	Events []Event
	Flush  []*ID
	MADs   []MAD
	Counts Counts
}

func (o *Output) count(c CounterID) { o.Counts[c]++ }

func (o *Output) event(t EventType, id *ID, err error) {
	o.Events = append(o.Events, Event{Type: t, ID: id, Err: err})
}

// DialParams describe a connection to request.
type DialParams struct {
	Peer netip.AddrPort // the remote device
	Src  netip.Addr     // our address toward it
	Port uint16         // the rdma_cm port
	// PortSpace is Port's: mad.PortSpaceTCP (also when 0) or
	// mad.PortSpaceIB, whose RC connections are made the same way.
	PortSpace mad.PortSpace
	QPN       uint32
	PSN       wire.PSN
	MTU       wire.MTU
	SRQ       bool   // the QP takes its receive WRs from an SRQ
	Private   []byte // at most mad.CMAPrivateDataSize bytes

	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	ACKTimeout, CMTimeout, CMRetries   uint8
	// TrafficClass is the path's, the IP traffic class both QPs send with.
	TrafficClass uint8
}

// AcceptParams describe the answer to a REQ.
type AcceptParams struct {
	QPN     uint32
	PSN     wire.PSN
	SRQ     bool
	Private []byte // at most mad.REPPrivateDataSize bytes

	ResponderResources, InitiatorDepth, RNRRetryCount uint8
}

// Engine holds every communication of one device. It is not safe for
// concurrent use: the driver serialises calls.
type Engine struct {
	guid    uint64 // the local CA GUID in REQs and REPs
	lim     Limits
	rng     *rand.Rand
	ids     map[uint32]*ID
	remotes map[remoteKey]*ID
	// listeners are by port space and port: one port space's port is one
	// listener's, of connections or of resolutions (ListenUD).
	listeners map[listenKey]*Listener
	// The resolutions' passive side (sidr.go): the SIDR_REQs received by
	// request ID and source.
	sidrs    map[remoteKey]*ID
	timers   timerHeap
	timerSeq uint64 // the last timer sequence number handed out
	closed   bool

	// The requests held before their handshake completes (half-open), in
	// all and by source (sourceKey).
	halfOpen   int
	halfOpenBy map[netip.Prefix]int

	// rejects are the sources' budgets of REJs (mayReject), a slot each
	// by a hash of their sourceKey with rejectSeed.
	rejects    [rejectSlots]qp.Time
	rejectSeed uint64
}

// New returns an engine whose REQs and REPs carry the CA GUID guid, which
// draws its communication IDs, PSNs and ports from rng; zero fields of
// lim take their defaults.
func New(guid uint64, lim Limits, rng *rand.Rand) *Engine {
	return &Engine{
		guid: guid, lim: lim.WithDefaults(), rng: rng,
		ids:        make(map[uint32]*ID),
		remotes:    make(map[remoteKey]*ID),
		listeners:  make(map[listenKey]*Listener),
		halfOpenBy: make(map[netip.Prefix]int),
		sidrs:      make(map[remoteKey]*ID),
		rejectSeed: rng.Uint64(),
	}
}

// GUID returns the CA GUID the engine's messages carry.
func (e *Engine) GUID() uint64 { return e.guid }

// Limits bound what the connection manager holds for the connection
// requests it receives, whatever the requesters ask for, so that no
// requester (or address spoofing one) can hold a device's resources for
// long, lock other requesters out, or have it send more than it receives.
// Zero fields take the defaults noted.
type Limits struct {
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
	// RejectRate bounds the REJs that answer the REQs of one source (an
	// IPv4 address or IPv6 /64, as for HalfOpenPerSource), whatever the
	// reason: RejectBurst at once (default 32), then RejectRate a second
	// (default 100). A REQ beyond is dropped unanswered and counted
	// (cm_rejects_dropped), as a real CM drops what it has no room for,
	// and its requester tries again on its own timer. A storm of REQs from
	// one source then costs the device their reception and nothing more,
	// and an address a storm is spoofed from is sent no more than the
	// rate. (The engine keeps rejectSlots budgets: sources whose hashes
	// meet share one.)
	RejectRate, RejectBurst int
}

// Defaults of Limits.
const (
	DefaultHalfOpen          = 256
	DefaultHalfOpenPerSource = 32
	DefaultHandshake         = 20 * time.Second
	DefaultRejectRate        = 100
	DefaultRejectBurst       = 32
)

// WithDefaults returns l with its zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	l.HalfOpen = cmp.Or(l.HalfOpen, DefaultHalfOpen)
	l.HalfOpenPerSource = cmp.Or(l.HalfOpenPerSource, DefaultHalfOpenPerSource)
	l.Handshake = cmp.Or(l.Handshake, DefaultHandshake)
	l.RejectRate = cmp.Or(l.RejectRate, DefaultRejectRate)
	l.RejectBurst = cmp.Or(l.RejectBurst, DefaultRejectBurst)
	return l
}

// Check returns an error wrapping mr.ErrInvalid (EINVAL) if a limit is
// negative.
func (l Limits) Check() error {
	if l.HalfOpen < 0 || l.HalfOpenPerSource < 0 || l.Handshake < 0 || l.RejectRate < 0 || l.RejectBurst < 0 {
		return fmt.Errorf("CM limits %+v: negative: %w", l, mr.ErrInvalid)
	}
	return nil
}

// MaxHonouredTimeout is the largest time exponent the engine takes from
// a peer's REQ for its own waits and for the QP it makes: 4.096 µs × 2^20
// ≈ 4.3 s, rdma_cm's CM response timeout. A REQ may carry 31 (2.4 hours),
// which would hold a DREQ's retries, a timewait or a QP's retransmission
// timer (and the QP with it) for days.
const MaxHonouredTimeout = 20

// sourceKey is what the half-open limit per source counts by: the IPv4
// address, or the IPv6 /64 (a host has a whole /64 to send from).
func sourceKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// rejectSlots is how many budgets of REJs (Limits.RejectRate) an engine
// keeps: 8 KiB, whatever the number of sources.
const rejectSlots = 1024

// mayReject reports whether a REJ may answer a REQ from src at now, and
// if so spends it from the budget of src's slot: the slot holds when the
// budget is whole again (the generic cell rate algorithm), each REJ moving
// it one interval of the rate on, and a REJ is allowed while that is at
// most RejectBurst-1 intervals ahead.
func (e *Engine) mayReject(now qp.Time, src netip.Addr) bool {
	interval := time.Second / time.Duration(e.lim.RejectRate)
	key := sourceKey(src)
	a := key.Addr().As16()
	h := e.rejectSeed
	for _, b := range a { // FNV-1a from the seed
		h = (h ^ uint64(b)) * 0x100000001b3
	}
	slot := &e.rejects[h%rejectSlots]
	full := max(*slot, now)
	if full.Sub(now) > time.Duration(e.lim.RejectBurst-1)*interval {
		return false
	}
	*slot = full.Add(interval)
	return true
}

// RandomPSN returns a random starting PSN, as Linux draws one per
// connection.
func (e *Engine) RandomPSN() wire.PSN { return wire.PSN(e.rng.Uint32()) & wire.PSNMask }

// newID returns a communication with a fresh random local communication
// ID (Linux's are random-looking too), not yet in any table.
func (e *Engine) newID(active bool, peer netip.AddrPort, ps mad.PortSpace, port uint16) *ID {
	id := &ID{active: active, peer: peer, ps: ps, port: port}
	for id.local == 0 || e.ids[id.local] != nil {
		id.local = e.rng.Uint32()
	}
	return id
}

// send encodes f and queues it for dst, with traffic class tclass. The
// headers built here always encode.
func (e *Engine) send(out *Output, dst netip.AddrPort, tclass uint8, f *mad.MADFields) []byte {
	out.MADs = append(out.MADs, MAD{Dst: dst, TrafficClass: tclass})
	m := &out.MADs[len(out.MADs)-1]
	if _, err := f.Encode(m.MAD[:]); err != nil {
		out.MADs = out.MADs[:len(out.MADs)-1]
		return nil
	}
	out.count(TxMsgs)
	return m.MAD[:]
}

// sendAwaited sends the message id waits an answer for and arms its
// retransmission timer.
func (e *Engine) sendAwaited(now qp.Time, id *ID, f *mad.MADFields, out *Output) {
	copy(id.msg[:], e.send(out, id.peer, id.tclass, f))
	id.sends = 1
	e.arm(id, now.Add(id.timeout))
}

// resend sends id.msg again.
func (e *Engine) resend(id *ID, out *Output) {
	out.MADs = append(out.MADs, MAD{Dst: id.peer, TrafficClass: id.tclass, MAD: id.msg})
	out.count(TxMsgs)
}

// Connect starts a connection: it sends the REQ, with rdma_cm's header
// before the private data, and returns the communication, in REQ_SENT.
// Private data longer than the REQ carries after that header is an error
// wrapping mr.ErrInvalid, as for Accept and Reject.
func (e *Engine) Connect(now qp.Time, p *DialParams, out *Output) (*ID, error) {
	if e.closed {
		return nil, ErrClosed
	}
	if err := checkPrivate("REQ", p.Private, mad.CMAPrivateDataSize); err != nil {
		return nil, err
	}
	ps := cmp.Or(p.PortSpace, mad.PortSpaceTCP)
	if ps != mad.PortSpaceTCP && ps != mad.PortSpaceIB {
		return nil, fmt.Errorf("connections are made in the TCP and IB port spaces, not %v: %w", ps, mr.ErrInvalid)
	}
	id := e.newID(true, p.Peer, ps, p.Port)
	id.tid = tidOf(id.local)
	id.localQPN, id.tclass = p.QPN, p.TrafficClass
	// Linux waits twice the packet lifetime plus the peer's CM response
	// time; the path's ACK timeout is twice its packet lifetime.
	id.timeout = Duration(p.CMTimeout) + Duration(p.ACKTimeout)
	id.retries, id.ackTimeout = p.CMRetries, p.ACKTimeout
	srcPort := uint16(firstPort + e.rng.IntN(lastPort-firstPort+1))
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, id.tid)}
	f.REQ = mad.REQFields{
		LocalCommID:             id.local,
		ServiceID:               mad.RDMACMServiceID(ps, p.Port),
		LocalCAGUID:             e.guid,
		LocalQPN:                p.QPN,
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: p.CMTimeout,
		StartingPSN:             p.PSN,
		LocalCMResponseTimeout:  p.CMTimeout,
		RetryCount:              p.RetryCount,
		PKey:                    0xFFFF,
		PathMTU:                 p.MTU,
		RNRRetryCount:           p.RNRRetryCount,
		MaxCMRetries:            p.CMRetries,
		SRQ:                     p.SRQ,
		PrimaryPath: mad.CMPathFields{
			LocalLID:        permissiveLID,
			RemoteLID:       permissiveLID,
			LocalGID:        wire.GIDFromAddr(p.Src),
			RemoteGID:       wire.GIDFromAddr(p.Peer.Addr()),
			FlowLabel:       flowLabel(srcPort, p.Port),
			TrafficClass:    p.TrafficClass,
			HopLimit:        hopLimit,
			LocalACKTimeout: p.ACKTimeout,
		},
	}
	cma := mad.NewCMAHeader(netip.AddrPortFrom(p.Src, srcPort), p.Peer.Addr())
	mad.CMAHeader(f.REQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
	copy(f.REQ.PrivateData[mad.CMAHeaderSize:], p.Private)
	e.ids[id.local] = id
	id.state = ReqSent
	e.sendAwaited(now, id, &f, out)
	return id, nil
}

// Establish answers the REP of id, whose QP is now ready, with an RTU.
func (e *Engine) Establish(id *ID, out *Output) error {
	if id.state != RepRcvd {
		return e.handshakeError(id)
	}
	e.sendRTU(id, out)
	id.state = Established
	out.count(Connected)
	return nil
}

// checkPrivate returns an error wrapping mr.ErrInvalid if private data
// is longer than the max bytes a msg carries: it would be cut short.
func checkPrivate(msg string, private []byte, max int) error {
	if len(private) > max {
		return fmt.Errorf("%d bytes of private data, a %s carries %d: %w", len(private), msg, max, mr.ErrInvalid)
	}
	return nil
}

// handshakeError is why a handshake step cannot be taken on id.
func (e *Engine) handshakeError(id *ID) error {
	switch {
	case id.err != nil:
		return id.err
	case e.closed:
		return ErrClosed
	}
	return fmt.Errorf("connection with %v is %s: %w", id.peer, id.state, mr.ErrInvalid)
}

func (e *Engine) sendRTU(id *ID, out *Output) {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrReadyToUse, id.tid)}
	f.RTU = mad.RTUFields{LocalCommID: id.local, RemoteCommID: id.remote}
	e.send(out, id.peer, id.tclass, &f)
}

// Accept answers the REQ of id with a REP; the caller's QP is in RTS.
func (e *Engine) Accept(now qp.Time, id *ID, p *AcceptParams, out *Output) error {
	if id.state != ReqRcvd {
		return e.handshakeError(id)
	}
	if err := checkPrivate("REP", p.Private, mad.REPPrivateDataSize); err != nil {
		return err
	}
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectReply, id.tid)}
	f.REP = mad.REPFields{
		LocalCommID:        id.local,
		RemoteCommID:       id.remote,
		LocalQPN:           p.QPN,
		StartingPSN:        p.PSN,
		ResponderResources: p.ResponderResources,
		InitiatorDepth:     p.InitiatorDepth,
		TargetACKDelay:     TargetACKDelay,
		RNRRetryCount:      p.RNRRetryCount,
		SRQ:                p.SRQ,
		LocalCAGUID:        e.guid,
	}
	copy(f.REP.PrivateData[:], p.Private)
	id.localQPN = p.QPN
	id.state = RepSent
	// The REP goes once: it is sent again only in answer to a repeated
	// REQ, so that a requester gets no more from us than it sends until
	// its RTU (or its first packet on the QP) shows it receives what we
	// send: a REQ from a spoofed address brings that address one REP, not
	// 1 + the REQ's max CM retries of them. (Linux resends the REP on its
	// own timer, and drops repeated REQs.) The timer armed when the REQ
	// came bounds the wait for the RTU.
	copy(id.msg[:], e.send(out, id.peer, id.tclass, &f))
	id.sends = 1
	return nil
}

// Reject refuses the REQ of id with reason and private data (at most
// mad.REJPrivateDataSize bytes). Linux forgets a rejected REQ at once, so
// that a duplicate reaches the listener again; softnic keeps it for a
// timewait and repeats the REJ instead. A resolution's SIDR_REQ is
// refused with a SIDR_REP (at most mad.SIDRREPPrivateDataSize bytes of
// private data; see rejectSIDR).
func (e *Engine) Reject(now qp.Time, id *ID, reason mad.RejectReason, private []byte, out *Output) error {
	if id.sidr {
		return e.rejectSIDR(now, id, reason, private, out)
	}
	if id.state != ReqRcvd {
		return e.handshakeError(id)
	}
	if err := checkPrivate("REJ", private, mad.REJPrivateDataSize); err != nil {
		return err
	}
	e.sendREJ(id, mad.CMMessageREQ, reason, nil, private, out)
	id.err = fmt.Errorf("connection request from %v was rejected: %w", id.peer, mr.ErrInvalid)
	id.rejected = true
	e.enterTimewait(now, id, out)
	return nil
}

// sendREJ rejects message msg of id's exchange; in timewait the REJ is
// what duplicates get.
func (e *Engine) sendREJ(id *ID, msg mad.CMMessage, reason mad.RejectReason, ari, private []byte, out *Output) {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectReject, id.tid)}
	f.REJ = mad.REJFields{
		LocalCommID:     id.local,
		RemoteCommID:    id.remote,
		MessageRejected: msg,
		ARILength:       uint8(len(ari)),
		Reason:          reason,
	}
	copy(f.REJ.ARI[:], ari)
	copy(f.REJ.PrivateData[:], private)
	copy(id.msg[:], e.send(out, id.peer, id.tclass, &f))
}

// Abort ends a handshake the local side gives up (the dialer's context
// ended, a QP could not be readied), telling the peer as Linux does when
// such a cm_id is destroyed: REJ "timeout" with our CA GUID while the REQ
// is unanswered, REJ "consumer reject" after a REP.
func (e *Engine) Abort(now qp.Time, id *ID, out *Output) {
	switch id.state {
	case ReqSent:
		var guid [8]byte
		binary.BigEndian.PutUint64(guid[:], e.guid)
		e.sendREJ(id, mad.CMMessageOther, mad.RejectTimeout, guid[:], nil, out)
		e.remove(id, out)
	case RepRcvd:
		e.sendREJ(id, mad.CMMessageREP, mad.RejectConsumer, nil, nil, out)
		e.remove(id, out)
	case ReqRcvd:
		e.Reject(now, id, mad.RejectConsumer, nil, out)
	case RepSent:
		e.sendREJ(id, mad.CMMessageOther, mad.RejectConsumer, nil, nil, out)
		e.enterTimewait(now, id, out)
	case Established:
		e.Disconnect(now, id, out)
	case SidrReqSent:
		e.remove(id, out) // a SIDR_REQ given up needs no word, as in Linux
	case SidrReqRcvd:
		e.Reject(now, id, mad.RejectConsumer, nil, out)
	}
}

// Disconnect starts the disconnection of an established connection: DREQ,
// retransmitted until a DREP comes. It reports whether it sent one.
func (e *Engine) Disconnect(now qp.Time, id *ID, out *Output) bool {
	if id.state != Established {
		return false
	}
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrDisconnectRequest, tidOf(id.local))}
	f.DREQ = mad.DREQFields{LocalCommID: id.local, RemoteCommID: id.remote, RemoteQPN: id.remoteQPN}
	id.state = DreqSent
	e.end(id, nil, out)
	e.sendAwaited(now, id, &f, out)
	return true
}

// End ends id's connection for a reason of the driver's (its QP failed),
// unless it has ended already: the first reason stays.
func (e *Engine) End(id *ID, err error, out *Output) { e.end(id, err, out) }

func (e *Engine) end(id *ID, err error, out *Output) {
	if id.ended {
		return
	}
	id.ended, id.err = true, err
	out.event(EventEnded, id, err)
}

// finish reports the handshake's outcome, once: a REP for the dialer,
// established for the acceptor, or err.
func (e *Engine) finish(id *ID, err error, out *Output) {
	if id.finished {
		return
	}
	id.finished = true
	switch {
	case err != nil:
		out.event(EventFailed, id, err)
	case id.active && id.sidr:
		out.event(EventResolved, id, nil)
	case id.active:
		out.event(EventReply, id, nil)
	default:
		out.event(EventEstablished, id, nil)
	}
}

// enterTimewait moves id to TIMEWAIT for one ACK timeout of its path.
func (e *Engine) enterTimewait(now qp.Time, id *ID, out *Output) {
	if id.state == Established || id.state == DreqSent {
		out.count(Disconnected)
	}
	e.settleHalfOpen(id)
	e.dequeue(id)
	id.state = Timewait
	e.settle(id, out)
	e.arm(id, now.Add(Duration(id.ackTimeout)))
}

// remove takes id out of every table.
func (e *Engine) remove(id *ID, out *Output) {
	if e.ids[id.local] == id {
		delete(e.ids, id.local)
	}
	key := remoteKey{id.remote, id.remoteSrc}
	if e.remotes[key] == id {
		delete(e.remotes, key)
	}
	if e.sidrs[key] == id {
		delete(e.sidrs, key)
	}
	e.settleHalfOpen(id)
	e.dequeue(id)
	id.state = Gone
	id.timerSeq = 0
	e.settle(id, out)
}

func (e *Engine) settle(id *ID, out *Output) {
	if !id.settled {
		id.settled = true
		out.event(EventSettled, id, nil)
	}
}

// full reports whether a new half-open request from src would pass the
// limits.
func (e *Engine) full(src netip.Addr) bool {
	return e.halfOpen >= e.lim.HalfOpen || e.halfOpenBy[sourceKey(src)] >= e.lim.HalfOpenPerSource
}

// admit counts id, a new request from src within the limits, half-open.
func (e *Engine) admit(id *ID, src netip.Addr) {
	e.halfOpen++
	e.halfOpenBy[sourceKey(src)]++
	id.halfOpen = true
}

// settleHalfOpen stops counting id among the half-open requests: its
// handshake completed or ended.
func (e *Engine) settleHalfOpen(id *ID) {
	if !id.halfOpen {
		return
	}
	id.halfOpen = false
	e.halfOpen--
	key := sourceKey(id.remoteSrc.Addr())
	if e.halfOpenBy[key]--; e.halfOpenBy[key] <= 0 {
		delete(e.halfOpenBy, key)
	}
}

// dequeue takes id out of its listener's backlog, if it waits there.
func (e *Engine) dequeue(id *ID) {
	if !id.queued {
		return
	}
	id.queued = false
	if l := e.listeners[listenKey{id.ps, id.port}]; l != nil {
		if i := slices.Index(l.backlog, id); i >= 0 {
			l.backlog = slices.Delete(l.backlog, i, i+1)
		}
	}
}

// lookup finds the communication a MAD from src names by our local
// communication ID. Only the address is compared: a peer need not send
// from the port it receives on (see peerAddr). Resolutions are not
// connections: no connection message finds them.
func (e *Engine) lookup(local uint32, src netip.AddrPort) *ID {
	if id := e.ids[local]; id != nil && !id.sidr && id.peer.Addr() == src.Addr() {
		return id
	}
	return nil
}

// Receive handles one CM MAD from the QP1 at src; mtu is the largest path
// MTU toward src, which a REQ may ask for.
func (e *Engine) Receive(now qp.Time, src netip.AddrPort, mtu wire.MTU, m *mad.MAD, out *Output) {
	out.count(RxMsgs)
	if e.closed {
		out.count(RxDropped)
		return
	}
	switch m.AttrID() {
	case mad.AttrConnectRequest:
		e.receiveREQ(now, src, mtu, m, out)
	case mad.AttrConnectReply:
		e.receiveREP(src, m.REP, out)
	case mad.AttrReadyToUse:
		e.receiveRTU(src, m.RTU, out)
	case mad.AttrConnectReject:
		e.receiveREJ(now, src, m.REJ, out)
	case mad.AttrMsgRcptAck:
		e.receiveMRA(now, src, m.MRA, out)
	case mad.AttrDisconnectRequest:
		e.receiveDREQ(now, src, m, out)
	case mad.AttrDisconnectReply:
		e.receiveDREP(now, src, m.DREP, out)
	case mad.AttrServiceIDResReq:
		e.receiveSIDRREQ(now, src, m, out)
	case mad.AttrServiceIDResReqResp:
		e.receiveSIDRREP(src, m.SIDRREP, out)
	}
}

// issueREJ rejects a REQ that gets no communication of its own, as
// Linux's cm_issue_rej does: our communication ID 0, the REQ's transaction
// ID; or drops it, counted, if its source has spent its REJs (mayReject).
func (e *Engine) issueREJ(now qp.Time, src netip.AddrPort, m *mad.MAD, reason mad.RejectReason, ari []byte, out *Output) {
	if !e.mayReject(now, src.Addr()) {
		out.count(RejectsDropped)
		return
	}
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectReject, m.Header.TransactionID())}
	f.REJ = mad.REJFields{
		RemoteCommID:    m.REQ.LocalCommID(),
		MessageRejected: mad.CMMessageREQ,
		ARILength:       uint8(len(ari)),
		Reason:          reason,
	}
	copy(f.REJ.ARI[:], ari)
	e.send(out, peerAddr(src, m.REQ.LocalCAGUID()), m.REQ.PrimaryPath().TrafficClass(), &f)
}

func (e *Engine) receiveREQ(now qp.Time, src netip.AddrPort, mtu wire.MTU, m *mad.MAD, out *Output) {
	r := m.REQ
	if id := e.remotes[remoteKey{r.LocalCommID(), src}]; id != nil {
		out.count(RxDuplicates)
		e.duplicateREQ(now, id, out)
		return
	}
	// Every refusal is decided from the REQ's fields in place, before
	// anything is allocated for it, and costs a REJ at most (issueREJ).
	ps, port, ok := r.ServiceID().RDMACM()
	l := e.listeners[listenKey{ps, port}]
	if !ok || l == nil || l.ud || l.held {
		e.issueREJ(now, src, m, mad.RejectInvalidServiceID, nil, out)
		return
	}
	if want := r.PathMTU(); want.Bytes() == 0 || want > mtu {
		// Linux takes the REQ's MTU whatever its own; softnic refuses a
		// larger one than its path toward the requester carries and names
		// that in the first ARI byte, from which a softnic dialer retries
		// with it: the connection gets the smaller of both sides' MTUs.
		e.issueREJ(now, src, m, mad.RejectInvalidMTU, []byte{byte(mtu)}, out)
		return
	}
	if _, err := mad.DecodeCMAHeader(r.PrivateData()); err != nil || r.TransportServiceType() != 0 {
		// rdma_cm's listener fails a REQ without its header or for
		// another transport than RC, and Linux's CM then rejects it as
		// the consumer.
		e.issueREJ(now, src, m, mad.RejectConsumer, nil, out)
		return
	}
	if e.full(src.Addr()) {
		out.count(RejectedBusy)
		e.issueREJ(now, src, m, mad.RejectNoResources, nil, out)
		return
	}
	if len(l.backlog) >= l.max {
		// A full backlog drops the REQ without a REJ, as Linux does when
		// the listener has no room (ENOMEM): the requester retries.
		out.count(RxDropped)
		return
	}
	req := r.Fields()
	id := e.newID(false, peerAddr(src, req.LocalCAGUID), ps, port)
	e.admit(id, src.Addr())
	id.remote, id.tid, id.req = req.LocalCommID, m.Header.TransactionID(), &req
	id.remoteQPN, id.tclass = req.LocalQPN, req.PrimaryPath.TrafficClass
	id.remoteSrc = src
	// The DREQ's wait and the timewait come from the requester's
	// timeouts, as in Linux, within what the device honours.
	id.ackTimeout = min(req.PrimaryPath.LocalACKTimeout, MaxHonouredTimeout)
	id.timeout = Duration(min(req.LocalCMResponseTimeout, MaxHonouredTimeout)) + Duration(id.ackTimeout)
	id.retries = req.MaxCMRetries
	id.state = ReqRcvd
	id.queued = true
	l.backlog = append(l.backlog, id)
	e.ids[id.local] = id
	e.remotes[remoteKey{id.remote, src}] = id
	id.expires = now.Add(e.handshakeTime(&req))
	e.arm(id, id.expires)
	out.Events = append(out.Events, Event{Type: EventRequest, ID: id, Listener: l})
}

// handshakeTime is how long the request req may take to complete its
// handshake: as long as the requester keeps trying (each REQ it sends again
// brings the REP again) and then answers, within Limits.Handshake.
func (e *Engine) handshakeTime(req *mad.REQFields) time.Duration {
	try := Duration(req.RemoteCMResponseTimeout) + Duration(req.PrimaryPath.LocalACKTimeout)
	span := time.Duration(req.MaxCMRetries+1)*try + Duration(req.LocalCMResponseTimeout)
	return min(span, e.lim.Handshake)
}

// duplicateREQ answers a REQ that is already known.
func (e *Engine) duplicateREQ(now qp.Time, id *ID, out *Output) {
	switch id.state {
	case ReqRcvd:
		// rdma_cm marks an unanswered REQ with a delayed MRA; a duplicate
		// gets the MRA, so that the requester waits longer.
		f := mad.MADFields{Header: mad.CMHeader(mad.AttrMsgRcptAck, id.tid)}
		f.MRA = mad.MRAFields{
			LocalCommID: id.local, RemoteCommID: id.remote,
			MessageMRAed: mad.CMMessageREQ, ServiceTimeout: mraServiceTimeout(now, id),
		}
		e.send(out, id.peer, id.tclass, &f)
	case RepSent:
		// The REP was lost: send it again at once. (Linux drops the
		// duplicate and leaves the REP to its own retransmission timer.)
		e.resend(id, out)
	case Timewait:
		if id.rejected {
			e.resend(id, out)
			return
		}
		e.sendREJ(id, mad.CMMessageOther, mad.RejectStaleConnection, nil, nil, out)
	}
}

// mraServiceTimeout is the service timeout of an MRA for the pending
// request id: rdma_cm's, unless the request is dropped sooner. After the
// MRA the requester waits the service timeout and its ACK timeout, then
// sends the REQ again; that REQ must still find the request, for only a
// repeated REQ brings a lost REP again (see Accept). An MRA asking for
// more than the request's time left would leave such a requester waiting
// for a REP that never comes (69 s, where the request is held 20 s).
func mraServiceTimeout(now qp.Time, id *ID) uint8 {
	left := id.expires.Sub(now) - Duration(id.req.PrimaryPath.LocalACKTimeout)
	exp := uint8(MRAServiceTimeout)
	for exp > 0 && Duration(exp) > left {
		exp--
	}
	return exp
}

func (e *Engine) receiveREP(src netip.AddrPort, r mad.REP, out *Output) {
	id := e.lookup(r.RemoteCommID(), src)
	switch {
	case id == nil:
		out.count(RxDropped) // Linux drops a REP it has no communication for
	case id.state == ReqSent:
		rep := r.Fields()
		id.remote, id.remoteQPN = rep.LocalCommID, rep.LocalQPN
		id.rep = &rep
		id.state = RepRcvd
		id.timerSeq = 0
		e.finish(id, nil, out)
	case id.remote != r.LocalCommID():
		out.count(RxDropped)
	case id.state == Established:
		// The RTU was lost: the peer is still waiting for it.
		out.count(RxDuplicates)
		e.sendRTU(id, out)
	default:
		out.count(RxDuplicates)
	}
}

func (e *Engine) receiveRTU(src netip.AddrPort, r mad.RTU, out *Output) {
	id := e.lookup(r.RemoteCommID(), src)
	switch {
	case id == nil || id.remote != r.LocalCommID():
		out.count(RxDropped)
	case id.state == RepSent:
		e.established(id, out)
	default:
		out.count(RxDuplicates)
	}
}

// established completes the passive handshake of id.
func (e *Engine) established(id *ID, out *Output) {
	e.settleHalfOpen(id)
	id.state = Established
	id.timerSeq = 0
	out.count(Connected)
	e.finish(id, nil, out)
}

// CommEstablished is the QP of id receiving its first request before the
// RTU came (the RTU was lost, or overtaken): the requester has the REP,
// and the connection is established, as Linux's CM takes the QP's
// communication-established event (IB_EVENT_COMM_EST, ib_cm_notify).
func (e *Engine) CommEstablished(id *ID, out *Output) {
	if id.state == RepSent {
		e.established(id, out)
	}
}

// RejectError is a connection attempt refused by the peer's REJ, as Dial
// returns it.
type RejectError struct {
	Addr   netip.AddrPort   // the device that rejected
	Port   uint16           // the rdma_cm port connected to
	Reason mad.RejectReason // the REJ's reason
	ARI    []byte           // its additional reject information, ARI-length bytes
	// PrivateData is the REJ's private data: the whole field, since the
	// wire carries no length (as rdma_cm delivers it).
	PrivateData []byte
}

func (e *RejectError) Error() string {
	s := fmt.Sprintf("connection to %v port %d rejected: %v", e.Addr, e.Port, e.Reason)
	if e.Reason == mad.RejectInvalidServiceID {
		s += fmt.Sprintf(" (nothing listens on port %d)", e.Port)
	}
	return s
}

// Is reports ErrConnRefused for a REJ with reason "invalid service ID":
// nothing listens on the port, as a TCP RST says; and ErrAgain for "no
// resources": the peer holds as many requests as it takes (Limits), and
// a later try may get in.
func (e *RejectError) Is(target error) bool {
	return target == ErrConnRefused && e.Reason == mad.RejectInvalidServiceID ||
		target == mr.ErrAgain && e.Reason == mad.RejectNoResources
}

// QPError is why a connection ended when its QP entered the error state:
// Status is the error completion that moved it there, RETRY_EXC_ERR when
// the peer stopped answering (then errors.Is(err, ErrTimedOut)).
type QPError struct {
	QPN    uint32
	Status verbs.WCStatus // SUCCESS if a verb (Modify, Destroy) moved the QP
}

func (e *QPError) Error() string {
	if e.Status == verbs.Success {
		return fmt.Sprintf("QP %#x was moved to the error state", e.QPN)
	}
	return fmt.Sprintf("QP %#x failed: %s (%s)", e.QPN, e.Status, e.Status.Text())
}

// Is reports ErrTimedOut for a QP that exhausted its transport retries.
func (e *QPError) Is(target error) bool {
	return target == ErrTimedOut && e.Status == verbs.RetryExcErr
}

func (e *Engine) receiveREJ(now qp.Time, src netip.AddrPort, r mad.REJ, out *Output) {
	id := e.lookup(r.RemoteCommID(), src)
	if id == nil && r.Reason() == mad.RejectTimeout {
		// A requester that gives up before it has our communication ID
		// names itself only: find it by its own ID, as Linux does (by the
		// CA GUID in the ARI and that ID).
		id = e.remotes[remoteKey{r.LocalCommID(), src}]
	}
	if id == nil || r.MessageRejected() != mad.CMMessageREQ && id.remote != 0 && id.remote != r.LocalCommID() {
		out.count(RxDropped)
		return
	}
	if !id.active {
		// The requester gave up: it rejects our REP, or its REQ before the
		// application answered.
		err := fmt.Errorf("connection request from %v withdrawn (REJ: %v): %w", id.peer, r.Reason(), ErrConnReset)
		switch id.state {
		case ReqRcvd, RepSent:
			id.err = err
			e.remove(id, out)
			e.finish(id, err, out)
			return
		}
	}
	rerr := &RejectError{
		Addr: id.peer, Port: id.port, Reason: r.Reason(),
		ARI:         append([]byte(nil), r.ARI()[:min(int(r.ARILength()), mad.REJARISize)]...),
		PrivateData: append([]byte(nil), r.PrivateData()...),
	}
	switch id.state {
	case ReqSent:
		id.err = rerr
		e.remove(id, out)
		e.finish(id, rerr, out)
	case RepRcvd:
		id.err = rerr
		e.enterTimewait(now, id, out)
	case Established, DreqSent:
		e.end(id, fmt.Errorf("%v: %w", rerr, ErrConnReset), out)
		e.enterTimewait(now, id, out)
		out.Flush = append(out.Flush, id)
	default:
		out.count(RxDuplicates)
	}
}

func (e *Engine) receiveMRA(now qp.Time, src netip.AddrPort, m mad.MRA, out *Output) {
	id := e.lookup(m.RemoteCommID(), src)
	switch {
	case id == nil:
		out.count(RxDropped)
	case id.state == ReqSent && m.MessageMRAed() == mad.CMMessageREQ:
		// The peer needs longer: wait its service timeout on top of the
		// path's ACK timeout before sending again, as Linux does.
		e.arm(id, now.Add(Duration(m.ServiceTimeout())+Duration(id.ackTimeout)))
	case id.state == RepSent && m.MessageMRAed() == mad.CMMessageREP:
		// Nothing to stretch: the REP goes again only for a repeated REQ
		// (see Accept), and the timer that runs is the request's hold,
		// which no peer's MRA may lengthen past Limits.Handshake nor
		// cut short.
	default:
		out.count(RxDuplicates)
	}
}

func (e *Engine) receiveDREQ(now qp.Time, src netip.AddrPort, m *mad.MAD, out *Output) {
	d := m.DREQ
	id := e.lookup(d.RemoteCommID(), src)
	if id == nil || id.remote != d.LocalCommID() {
		// Linux answers a DREQ it knows nothing of with a DREP, so that
		// the peer stops asking.
		out.count(RxDuplicates)
		f := mad.MADFields{Header: mad.CMHeader(mad.AttrDisconnectReply, m.Header.TransactionID())}
		f.DREP = mad.DREPFields{LocalCommID: d.RemoteCommID(), RemoteCommID: d.LocalCommID()}
		e.send(out, src, 0, &f)
		return
	}
	if d.RemoteQPN() != id.localQPN {
		out.count(RxDropped)
		return
	}
	id.tid = m.Header.TransactionID()
	switch id.state {
	case Established, RepSent, DreqSent:
		prev := id.state
		e.sendDREP(id, out)
		e.enterTimewait(now, id, out)
		switch prev {
		case Established:
			e.end(id, fmt.Errorf("%v disconnected: %w", id.peer, ErrConnReset), out)
			out.Flush = append(out.Flush, id)
		case RepSent:
			id.err = fmt.Errorf("%v disconnected before ReadyToUse: %w", id.peer, ErrConnReset)
			e.finish(id, id.err, out)
		}
	case Timewait:
		out.count(RxDuplicates)
		e.sendDREP(id, out)
	default:
		out.count(RxDropped)
	}
}

func (e *Engine) sendDREP(id *ID, out *Output) {
	f := mad.MADFields{Header: mad.CMHeader(mad.AttrDisconnectReply, id.tid)}
	f.DREP = mad.DREPFields{LocalCommID: id.local, RemoteCommID: id.remote}
	e.send(out, id.peer, id.tclass, &f)
}

func (e *Engine) receiveDREP(now qp.Time, src netip.AddrPort, d mad.DREP, out *Output) {
	id := e.lookup(d.RemoteCommID(), src)
	switch {
	case id == nil || id.remote != d.LocalCommID():
		out.count(RxDropped)
	case id.state == DreqSent:
		e.enterTimewait(now, id, out)
	default:
		out.count(RxDuplicates)
	}
}

// expire handles the timer of id.
func (e *Engine) expire(now qp.Time, id *ID, out *Output) {
	switch id.state {
	case ReqRcvd, RepSent, SidrReqRcvd:
		// The handshake took longer than handshakeTime: the application
		// did not answer, or the requester not with an RTU (it gave up, or
		// never was: a REQ from a spoofed address). Dropped without a
		// word: a REJ would be a second message to an address that never
		// showed it receives.
		out.count(HandshakeTimeouts)
		what := "no answer from the application"
		if id.state == RepSent {
			what = "no ReadyToUse after the ConnectReply"
		}
		id.err = fmt.Errorf("connection from %v: %s in time: %w", id.peer, what, ErrTimedOut)
		e.remove(id, out)
		e.finish(id, id.err, out)
	case ReqSent, DreqSent, SidrReqSent:
		if id.sends <= int(id.retries) {
			e.resend(id, out)
			out.count(TxRetries)
			id.sends++
			e.arm(id, now.Add(id.timeout))
			return
		}
		if id.state == DreqSent {
			e.enterTimewait(now, id, out) // Linux, too, gives up on the DREP
			return
		}
		what := "ConnectRequests"
		if id.sidr {
			what = "ServiceIDResReqs"
		}
		id.err = fmt.Errorf("connection to %v port %d: no reply to %d %s: %w", id.peer, id.port, id.sends, what, ErrTimedOut)
		e.remove(id, out)
		e.finish(id, id.err, out)
	case Timewait:
		e.remove(id, out)
	}
}

// listenKey names a listener: a port of a port space.
type listenKey struct {
	ps   mad.PortSpace
	port uint16
}

// Listen registers a listener for port of rdma_cm's port space ps, TCP or
// IB, with room for backlog unanswered connection requests. Port 0 asks
// for a port not listened on, as rdma_listen on an id bound to port 0
// gets one in Linux; the listener's Port says which.
func (e *Engine) Listen(ps mad.PortSpace, port uint16, backlog int) (*Listener, error) {
	if ps != mad.PortSpaceTCP && ps != mad.PortSpaceIB {
		return nil, fmt.Errorf("connections are taken in the TCP and IB port spaces, not %v: %w", ps, mr.ErrInvalid)
	}
	return e.listen(ps, port, backlog, false)
}

func (e *Engine) listen(ps mad.PortSpace, port uint16, backlog int, ud bool) (*Listener, error) {
	if port == 0 {
		port = e.freePort(ps)
	}
	k := listenKey{ps, port}
	switch {
	case e.closed:
		return nil, ErrClosed
	case port == 0:
		return nil, fmt.Errorf("every port of %v from %d to %d is listened on (EADDRINUSE): %w", ps, firstPort, lastPort, mr.ErrBusy)
	case e.listeners[k] != nil:
		return nil, fmt.Errorf("%v port %d is already listened on (EADDRINUSE): %w", ps, port, mr.ErrBusy)
	}
	l := &Listener{port: port, ps: ps, ud: ud, max: backlog}
	e.listeners[k] = l
	return l, nil
}

// freePort returns a port of ps from firstPort to lastPort that no
// listener has, from a random one on as Linux looks, or 0 if all are taken.
func (e *Engine) freePort(ps mad.PortSpace) uint16 {
	const span = lastPort - firstPort + 1
	start := e.rng.IntN(span)
	for i := range span {
		port := uint16(firstPort + (start+i)%span)
		if e.listeners[listenKey{ps, port}] == nil {
			return port
		}
	}
	return 0
}

// Hold has l, just made, hold its port and take no request until Open:
// a request for the port is refused as one for a port nobody listens on
// (a REJ "invalid service ID", a SIDR_REP "service ID not supported"). An
// rdma_cm id bound to a port holds it so in Linux until it listens.
func (e *Engine) Hold(l *Listener) { l.held = true }

// Open has l take requests, with room for backlog of them; on a listener
// that takes them already it sets the room, as rdma_listen again does.
func (e *Engine) Open(l *Listener, backlog int) { l.held, l.max = false, backlog }

// NextRequest takes the oldest request waiting in l's backlog, nil if none
// does.
func (e *Engine) NextRequest(l *Listener) *ID {
	if len(l.backlog) == 0 {
		return nil
	}
	id := l.backlog[0]
	l.backlog = slices.Delete(l.backlog, 0, 1)
	id.queued = false
	return id
}

// Unlisten closes l and rejects the requests in its backlog, as Linux
// rejects (consumer reject) the pending requests of a destroyed listener.
func (e *Engine) Unlisten(now qp.Time, l *Listener, out *Output) {
	k := listenKey{l.ps, l.port}
	if e.listeners[k] != l {
		return
	}
	for id := e.NextRequest(l); id != nil; id = e.NextRequest(l) {
		e.Reject(now, id, mad.RejectConsumer, nil, out)
	}
	delete(e.listeners, k)
	out.Events = append(out.Events, Event{Type: EventListenerClosed, Listener: l})
}

// Shutdown ends everything when the device closes: established
// connections get one DREQ (not waited for) and end with ErrClosed,
// handshakes are aborted and fail with ErrClosed, and everything is
// settled. The communications are visited in the order of their IDs, so
// that a shutdown's output is the same every time.
func (e *Engine) Shutdown(now qp.Time, out *Output) {
	keys := slices.SortedFunc(maps.Keys(e.listeners), func(a, b listenKey) int {
		return cmp.Or(cmp.Compare(a.ps, b.ps), cmp.Compare(a.port, b.port))
	})
	for _, k := range keys {
		e.Unlisten(now, e.listeners[k], out)
	}
	e.closed = true
	for _, local := range slices.Sorted(maps.Keys(e.ids)) {
		id := e.ids[local]
		before := id.err
		if id.state == Established {
			// Ended by the close, not by a disconnect the application
			// asked for (which Abort's DREQ would report, with no error).
			e.end(id, ErrClosed, out)
		}
		e.Abort(now, id, out)
		id.err = before
		if id.err == nil {
			id.err = ErrClosed
		}
		e.finish(id, ErrClosed, out)
		e.remove(id, out)
	}
	e.timers = nil
}

// arm (re)starts id's timer.
func (e *Engine) arm(id *ID, at qp.Time) {
	e.timerSeq++
	id.timerSeq, id.timerAt = e.timerSeq, at
	heap.Push(&e.timers, timer{at: at, local: id.local, seq: id.timerSeq})
}

// Deadline returns when the engine next needs a Tick, if ever.
func (e *Engine) Deadline() (qp.Time, bool) {
	for len(e.timers) > 0 {
		t := e.timers[0]
		if e.armed(t) != nil {
			return t.at, true
		}
		heap.Pop(&e.timers) // stopped or re-armed since
	}
	return 0, false
}

// Tick runs the timers due at now.
func (e *Engine) Tick(now qp.Time, out *Output) {
	for len(e.timers) > 0 && e.timers[0].at <= now {
		t := heap.Pop(&e.timers).(timer)
		if id := e.armed(t); id != nil {
			id.timerSeq = 0
			e.expire(now, id, out)
		}
	}
}

// armed returns the communication whose timer t is, unless the timer was
// stopped or re-armed since, or the communication is gone.
func (e *Engine) armed(t timer) *ID {
	if id := e.ids[t.local]; id != nil && id.timerSeq == t.seq {
		return id
	}
	return nil
}

// timer is one armed timer of the communication with local ID local; it
// is stale once that communication's timerSeq moved on. It names the
// communication rather than points at it, so that a stale timer keeps
// nothing of a communication that is gone (its QP least of all) alive.
type timer struct {
	at    qp.Time
	local uint32
	seq   uint64
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return t
}
