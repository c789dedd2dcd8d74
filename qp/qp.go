package qp

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp/internal/cwnd"
	"github.com/softnic/softnic/qp/verbcheck"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Device limits, reported by the NIC as its attributes.
const (
	MaxMessageSize   = verbcheck.MaxMessageSize
	MaxRdAtomicLimit = verbcheck.MaxRdAtomicLimit
	MaxQPWR          = 1 << 16 // max_qp_wr: work requests one send or receive queue holds
	MaxSRQWR         = 1 << 20 // max_srq_wr: work requests one shared receive queue holds
	MaxCQE           = 1 << 22 // max_cqe: completions one CQ holds
	MaxSGE           = 32      // max_sge: scatter/gather elements of one work request
	MaxInlineData    = 4096    // bytes of inline data one send work request carries
	// MaxPacketSize is the largest packet a QP encodes: every header an
	// opcode may carry, a 4096-byte payload, pad and ICRC. Buffers handed
	// to Transmit must be at least this long.
	MaxPacketSize = wire.MaxHeaderSize + 4096 + 3 + wire.ICRCSize
)

// The queue sizes a zero field of Config stands for.
const (
	DefaultMaxWR     = 256 // MaxSendWR, MaxRecvWR
	DefaultMaxSGE    = 4   // MaxSendSGE, MaxRecvSGE
	DefaultMaxInline = 256 // MaxInline
)

// DefaultWindow is the most request PSNs an RC requester keeps
// unacknowledged when Config.Window is zero: 32 messages of 64 KiB at path
// MTU 4096 (256 held 16, a quarter of what fi_rmabw keeps in flight), and
// below the 1,000 packets of a netem queue, which a window that opens at
// once must not overrun (TestPacedReads).
const DefaultWindow = 512

// Config is fixed when a QP is created (ibv_qp_init_attr and the device
// context it lives in).
type Config struct {
	Type verbs.Type
	// PD is the protection domain of the QP; Memory is the device's region
	// table, which checks every lkey and rkey the QP uses.
	PD     mr.PDHandle
	Memory *mr.Table
	// SendCQ and RecvCQ receive the completions; they may be the same CQ.
	SendCQ, RecvCQ *CQ
	// SRQ, if set, supplies the receive WRs instead of the QP's own queue.
	SRQ *SRQ
	// Queue sizes; zero picks the defaults (DefaultMaxWR, DefaultMaxSGE,
	// DefaultMaxInline).
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
	// SignalAll makes every send WR produce a completion (sq_sig_all).
	SignalAll bool
	// Window is the most request PSNs an RC requester keeps unacknowledged;
	// zero picks DefaultWindow. The requester also halves its congestion
	// window on every loss, so that it does not overrun a saturated
	// receiver, and starts again from the smallest window after a timeout.
	Window int
	// Counters receives the QP's counts; nil counts nothing.
	Counters *verbs.Counters
	// Guard, if set, holds back peers that fail too many R_Key checks
	// (see Guard); nil holds back nobody.
	Guard Guard
}

func (c *Config) setDefaults() error {
	def := func(v *int, d, limit int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 || *v > limit {
			return fmt.Errorf("%s %d out of range 1..%d: %w", name, *v, limit, ErrInvalid)
		}
		return nil
	}
	for _, f := range []struct {
		v        *int
		d, limit int
		name     string
	}{
		{&c.MaxSendWR, DefaultMaxWR, MaxQPWR, "max_send_wr"},
		{&c.MaxRecvWR, DefaultMaxWR, MaxQPWR, "max_recv_wr"},
		{&c.MaxSendSGE, DefaultMaxSGE, MaxSGE, "max_send_sge"},
		{&c.MaxRecvSGE, DefaultMaxSGE, MaxSGE, "max_recv_sge"},
		{&c.MaxInline, DefaultMaxInline, MaxInlineData, "max_inline_data"},
		{&c.Window, DefaultWindow, 1 << 20, "window"},
	} {
		if err := def(f.v, f.d, f.limit, f.name); err != nil {
			return err
		}
	}
	if c.Type < verbs.RC || c.Type > verbs.UD {
		return fmt.Errorf("QP type %d: %w", c.Type, ErrInvalid)
	}
	if c.Memory == nil || c.SendCQ == nil || c.RecvCQ == nil {
		return fmt.Errorf("QP needs a region table and send and receive CQs: %w", ErrInvalid)
	}
	if c.Window < cwnd.Min {
		c.Window = cwnd.Min
	}
	return nil
}

// QP is one queue pair. See the package documentation for how it is driven.
// It composes the three machines of the transport, each owning its state
// (requester, completer, responder), the congestion window between the
// first two, and the send and receive queues they share; it keeps the
// attributes and the state, and moves to ERR for all of them.
type QP struct {
	num  uint32
	cfg  Config
	attr verbs.Attr
	mtu  uint32
	cnt  *verbs.Counters

	sq   sendQueue
	rq   recvQueue
	req  requester
	comp completer
	resp responder
	// cc is the congestion window of an RC QP: the requester asks it
	// whether it may send, the completer tells it what came back.
	cc cwnd.Window

	// fields is scratch space for encoding one packet.
	fields wire.Fields
	// cqLost records a completion the CQ had no room for; the QP then
	// moves to the error state once the current step is over.
	cqLost bool
	// cause is the status of the error completion that moved the QP to
	// ERR; Success when a verb or a CQ overflow did.
	cause verbs.WCStatus
	// traffic counts what the QP sent and received; RESET keeps it.
	traffic verbs.Traffic
}

// New creates a QP numbered qpn in the RESET state.
func New(qpn uint32, cfg Config) (*QP, error) {
	if qpn == 0 || qpn > 0xFFFFFF {
		return nil, fmt.Errorf("QP number %#x: %w", qpn, ErrInvalid)
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	q := &QP{num: qpn, cfg: cfg, cnt: cfg.Counters}
	q.sq = newSendQueue(cfg.MaxSendWR, cfg.MaxSendSGE, cfg.MaxInline)
	if cfg.SRQ == nil {
		q.rq = newRecvQueue(cfg.MaxRecvWR, cfg.MaxRecvSGE)
	}
	q.resp.init(q)
	q.resetState()
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// Type returns the transport service.
func (q *QP) Type() verbs.Type { return q.cfg.Type }

// PD returns the QP's protection domain.
func (q *QP) PD() mr.PDHandle { return q.cfg.PD }

// Attr returns the current attributes (ibv_query_qp).
func (q *QP) Attr() verbs.Attr { return q.attr }

// State returns the current state.
func (q *QP) State() verbs.State { return q.attr.State }

// Status is a snapshot of the QP's sequence state, for `softnic qp`.
type Status struct {
	State        verbs.State
	SendPSN      wire.PSN // next request PSN
	AckedPSN     wire.PSN // oldest unacknowledged request PSN
	ExpectedPSN  wire.PSN // responder's expected PSN
	MSN          uint32
	SendQueued   int // send WRs posted and not completed
	RecvQueued   int // receive WRs posted (own queue)
	Window       int // congestion window, packets
	RetriesLeft  uint8
	RNRRetryLeft uint8
	// Cause is, in the ERR state, the status of the error completion that
	// moved the QP there (RETRY_EXC_ERR when the peer stopped answering);
	// SUCCESS when Modify or a CQ overflow did.
	Cause verbs.WCStatus
}

// Traffic returns what the QP has sent and received.
func (q *QP) Traffic() verbs.Traffic { return q.traffic }

// Status returns a snapshot of the sequence state.
func (q *QP) Status() Status {
	return Status{
		State: q.attr.State, SendPSN: q.req.psn, AckedPSN: q.comp.psn,
		ExpectedPSN: q.resp.epsn, MSN: q.resp.msn,
		SendQueued: int(q.sq.tail - q.sq.head), RecvQueued: q.rq.count,
		Window: int(q.cc.Packets()), RetriesLeft: q.comp.retryLeft, RNRRetryLeft: q.comp.rnrLeft,
		Cause: q.cause,
	}
}

// resetState puts every piece of transport state back to RESET, dropping
// queued WRs without completions, as a transition to RESET does.
func (q *QP) resetState() {
	q.sq.releaseAll()
	q.sq.reset()
	q.rq.head, q.rq.count = 0, 0
	q.resp.reset()
	q.req = requester{q: q}
	q.cc = cwnd.New(q.cfg.Window)
	q.comp = completer{q: q}
	q.cause = verbs.Success
	q.attr = verbs.Attr{State: verbs.Reset, PKey: 0xFFFF}
	q.mtu = 0
}

// Modify changes the QP's attributes and state (ibv_modify_qp). mask says
// which fields of attr to apply; AttrState in it requests a transition to
// attr.State. The required and allowed attributes of each transition follow
// the IBTA (and libibverbs' ibv_modify_qp table), for the QP's type.
func (q *QP) Modify(attr *verbs.Attr, mask verbs.AttrMask) error {
	from, to := q.attr.State, q.attr.State
	if mask&verbs.AttrState != 0 {
		to = attr.State
	}
	req, opt, ok := verbs.TransitionMasks(q.cfg.Type, from, to)
	if !ok {
		return fmt.Errorf("QP %#x: %s QP cannot move from %s to %s: %w", q.num, q.cfg.Type, from, to, ErrInvalid)
	}
	given := mask &^ verbs.AttrState
	if missing := req &^ given; missing != 0 {
		return fmt.Errorf("QP %#x: %s→%s needs %s: %w", q.num, from, to, missing, ErrInvalid)
	}
	if extra := given &^ (req | opt); extra != 0 {
		return fmt.Errorf("QP %#x: %s→%s does not take %s: %w", q.num, from, to, extra, ErrInvalid)
	}
	if err := verbcheck.Attr(attr, given); err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}

	switch to {
	case verbs.Reset:
		q.resetState()
		return nil
	case verbs.Err:
		q.applyAttr(attr, given)
		q.toError(verbs.Success)
		return nil
	}
	q.applyAttr(attr, given)
	q.attr.State = to
	switch {
	case from == verbs.Init && to == verbs.RTR:
		q.resp.start(q.attr)
	case from == verbs.RTR && to == verbs.RTS:
		q.req.begin(q.attr.SQPSN)
		q.comp.begin(q.attr.SQPSN)
	}
	return nil
}

func (q *QP) applyAttr(a *verbs.Attr, m verbs.AttrMask) {
	if m&verbs.AttrAccessFlags != 0 {
		q.attr.AccessFlags = a.AccessFlags
	}
	if m&verbs.AttrPKey != 0 {
		q.attr.PKey = a.PKey
	}
	if m&verbs.AttrQKey != 0 {
		q.attr.QKey = a.QKey
	}
	if m&verbs.AttrRemote != 0 {
		q.attr.Remote, q.attr.TrafficClass = a.Remote, a.TrafficClass
	}
	if m&verbs.AttrPathMTU != 0 {
		q.attr.PathMTU = a.PathMTU
	}
	if m&verbs.AttrTimeout != 0 {
		q.attr.Timeout = a.Timeout
	}
	if m&verbs.AttrRetryCnt != 0 {
		q.attr.RetryCnt = a.RetryCnt
		q.comp.retryLeft = a.RetryCnt
	}
	if m&verbs.AttrRNRRetry != 0 {
		q.attr.RNRRetry = a.RNRRetry
		q.comp.rnrLeft = a.RNRRetry
	}
	if m&verbs.AttrRQPSN != 0 {
		q.attr.RQPSN = a.RQPSN & wire.PSNMask
	}
	if m&verbs.AttrMaxRdAtomic != 0 {
		q.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&verbs.AttrMinRNRTimer != 0 {
		q.attr.MinRNRTimer = a.MinRNRTimer
	}
	if m&verbs.AttrSQPSN != 0 {
		q.attr.SQPSN = a.SQPSN & wire.PSNMask
	}
	if m&verbs.AttrMaxDestRdAtomic != 0 {
		q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&verbs.AttrDestQPN != 0 {
		q.attr.DestQPN = a.DestQPN
	}
	q.mtu = q.attr.PayloadMTU(q.cfg.Type)
}

// PostSend queues a send work request (ibv_post_send). The WR is copied:
// the caller may reuse wr (and, for Inline, its data) at once. It returns
// ErrNoMem when the send queue is full and ErrInvalid for a WR the QP
// cannot carry; in the ERR state the WR is accepted and completes at once
// with WR_FLUSH_ERR.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	if !q.attr.State.TakesSends() {
		return fmt.Errorf("QP %#x is %s; posting sends needs RTS: %w", q.num, q.attr.State, ErrInvalid)
	}
	if err := q.sendCaps().Check(wr); err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	w, err := q.sq.post(wr)
	if err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	if q.attr.State == verbs.Err || q.attr.State == verbs.SQE {
		w.state = wqeFlushed
		q.comp.completeInOrder()
	}
	return nil
}

// PostSendBatch queues wrs as one batch (ibv_wr_complete): all of them,
// or none if one is refused (as PostSend refuses it) or the send queue
// lacks room for them all (ErrNoMem).
func (q *QP) PostSendBatch(wrs []verbs.SendWR) error {
	if !q.attr.State.TakesSends() {
		return fmt.Errorf("QP %#x is %s; posting sends needs RTS: %w", q.num, q.attr.State, ErrInvalid)
	}
	caps := q.sendCaps()
	for i := range wrs {
		if err := caps.Check(&wrs[i]); err != nil {
			return fmt.Errorf("QP %#x: work request %d of %d: %w", q.num, i+1, len(wrs), err)
		}
	}
	if room := len(q.sq.slots) - int(q.sq.tail-q.sq.head); len(wrs) > room {
		return fmt.Errorf("QP %#x: %d work requests, room for %d in the send queue (%d WRs): %w", q.num, len(wrs), room, len(q.sq.slots), ErrNoMem)
	}
	for i := range wrs {
		if err := q.PostSend(&wrs[i]); err != nil {
			return err // PostSend refuses what the checks above refused
		}
	}
	return nil
}

// sendCaps returns what the QP's send queue takes now.
func (q *QP) sendCaps() verbcheck.SendCaps {
	return verbcheck.SendCaps{Type: q.cfg.Type, MaxSGE: q.cfg.MaxSendSGE, MaxInline: q.cfg.MaxInline, MTU: q.mtu, MaxRdAtomic: q.attr.MaxRdAtomic}
}

// PostRecv queues a receive work request (ibv_post_recv). ErrNoMem when the
// receive queue is full; in the ERR state the WR completes at once with
// WR_FLUSH_ERR.
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.cfg.SRQ != nil {
		return fmt.Errorf("QP %#x takes its receive WRs from an SRQ: %w", q.num, ErrInvalid)
	}
	if q.attr.State == verbs.Reset {
		return fmt.Errorf("QP %#x is RESET; posting receives needs INIT or later: %w", q.num, ErrInvalid)
	}
	if q.attr.State == verbs.Err {
		if len(wr.SGL) > q.rq.maxSGE {
			return fmt.Errorf("QP %#x: receive WR with %d SGEs: %w", q.num, len(wr.SGL), ErrInvalid)
		}
		q.pushRecvWC(&verbs.WC{ID: wr.ID, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: q.num})
		return nil
	}
	if err := q.rq.post(wr); err != nil {
		return fmt.Errorf("QP %#x: %w", q.num, err)
	}
	return nil
}

// Receive hands the QP a packet addressed to it. p has been decoded and its
// ICRC checked by the driver; env says where it came from. Packets the QP
// cannot take are dropped and counted, never returned as errors: they come
// from the network.
func (q *QP) Receive(p *wire.Packet, env *wire.Envelope, now Time) {
	q.traffic.RcvdPkts++
	q.traffic.RcvdBytes += uint64(len(p.Raw))
	op := p.OpCode()
	if op.Transport() != transportOf(q.cfg.Type) {
		q.cnt.Inc(verbs.WrongTransport)
		return
	}
	switch q.attr.State {
	case verbs.RTR, verbs.RTS, verbs.SQD, verbs.SQE:
	default:
		q.cnt.Inc(verbs.WrongQPState)
		return
	}
	if q.cfg.Type != verbs.UD && env.Src.Addr().Unmap() != q.attr.Remote.Addr().Unmap() {
		// rxe checks that a connected QP's packets come from its peer.
		q.cnt.Inc(verbs.WrongSource)
		return
	}
	if p.BTH.PKey()&0x7FFF != q.attr.PKey&0x7FFF {
		// Another partition (IBTA 10.9.3): dropped silently, as rxe does.
		q.cnt.Inc(verbs.BadPKey)
		return
	}
	if op.IsAck() || op.IsReadResponse() {
		if q.cfg.Type == verbs.RC && q.attr.State != verbs.RTR {
			q.comp.receive(p, now)
		} else {
			q.cnt.Inc(verbs.WrongQPState)
		}
	} else {
		msn := q.resp.msn
		q.resp.receive(p, env, now)
		q.traffic.RcvdMsgs += uint64(q.resp.msn - msn)
	}
	q.afterStep()
}

func transportOf(t verbs.Type) wire.Transport {
	switch t {
	case verbs.UC:
		return wire.TransportUC
	case verbs.UD:
		return wire.TransportUD
	}
	return wire.TransportRC
}

// Route is where a packet goes: the peer's IP address and UDP port, and
// the traffic class of the IP header it travels in (the address vector's
// grh.traffic_class: DSCP in the upper six bits, ECN in the lower two).
type Route struct {
	Dst          netip.AddrPort
	TrafficClass uint8
}

// route is the route of the QP's packets to its peer: its address vector.
func (q *QP) route() Route { return Route{Dst: q.attr.Remote, TrafficClass: q.attr.TrafficClass} }

// Transmit encodes the next packet the QP wants to send into buf (at least
// MaxPacketSize bytes) and returns its length and route; n is 0 when the
// QP has nothing to send now. Responses (ACKs, NAKs, READ responses) go
// before new requests, to the QP's peer with its traffic class; a UD
// datagram goes where its WR says, with the WR's class. The ICRC field is
// left zero for the driver to seal, since only the driver knows the IP
// header the packet will travel in.
func (q *QP) Transmit(buf []byte, now Time) (n int, dst Route) {
	if len(buf) < MaxPacketSize {
		return 0, Route{}
	}
	if n = q.resp.next(buf, now); n > 0 {
		dst = q.route()
	} else {
		switch q.attr.State {
		case verbs.RTS, verbs.SQD:
			n, dst = q.req.next(buf, now)
		}
		q.afterStep()
	}
	if n > 0 {
		q.traffic.SentPkts++
		q.traffic.SentBytes += uint64(n)
	}
	return n, dst
}

// Deadline returns when the QP next needs a Tick, if it has a timer running:
// the end of an RNR wait, the local ACK timeout, or the next round of READ
// responses the pacer holds back (which the Transmit after the Tick sends).
func (q *QP) Deadline() (Time, bool) {
	t, ok := Time(0), false
	consider := func(u Time, armed bool) {
		if armed && (!ok || u < t) {
			t, ok = u, true
		}
	}
	consider(q.req.timer())
	consider(q.comp.timer())
	consider(q.resp.timer())
	return t, ok
}

// Tick runs the timers that are due at now: the end of an RNR wait and the
// local ACK timeout.
func (q *QP) Tick(now Time) {
	q.req.tick(now)
	q.comp.tick(now)
	q.afterStep()
}

// AckTimedOut reports whether the local ACK timer has run out at now: the
// next Tick sends again from the oldest unacknowledged request (or fails
// it with RETRY_EXC_ERR), unless HoldAckTimeout restarts the timer first.
func (q *QP) AckTimedOut(now Time) bool { return q.comp.armed && now >= q.comp.due }

// HoldAckTimeout restarts a running local ACK timer at now, as an ACK
// would, leaving the retry budget and the window as they are. The driver
// holds a timeout when the requests are more likely queued at a peer that
// stopped answering than lost: the embedded device does while a retry
// that another of its QPs sent when its timer ran out is unanswered.
func (q *QP) HoldAckTimeout(now Time) {
	if q.comp.armed {
		q.comp.armTimer(now)
	}
}

// afterStep finishes a step: a completion lost to a full CQ puts the QP in
// the error state.
func (q *QP) afterStep() {
	if q.cqLost {
		q.cqLost = false
		q.toError(verbs.Success)
	}
}

func (q *QP) pushSendWC(wc *verbs.WC) {
	if !q.cfg.SendCQ.push(wc) {
		q.cqLost = true
	}
}

func (q *QP) pushRecvWC(wc *verbs.WC) {
	if wc.Status == verbs.Success {
		q.cnt.Inc(verbs.RdmaRecvs)
	}
	if !q.cfg.RecvCQ.push(wc) {
		q.cqLost = true
	}
}

// toError moves the QP to ERR because of an error completion with status
// cause (Success when a verb or a CQ overflow is the cause): every
// outstanding send and receive WR completes with WR_FLUSH_ERR and timers
// stop. ACKs and NAKs already queued are still sent: the peer learns which
// of its messages completed, and why the others did not.
func (q *QP) toError(cause verbs.WCStatus) {
	if q.attr.State == verbs.Err {
		return
	}
	q.attr.State = verbs.Err
	q.cause = cause
	q.comp.armed = false
	q.req.stop()
	for i := q.sq.head; i != q.sq.tail; i++ {
		if w := q.sq.at(i); w.state != wqeError {
			w.state = wqeFlushed
		}
	}
	q.sq.next = q.sq.tail
	q.comp.completeInOrder()
	q.resp.abort()
	var w recvWQE
	w.sgl = make([]verbs.SGE, 0, q.rq.maxSGE)
	for q.rq.pop(&w) {
		q.pushRecvWC(&verbs.WC{ID: w.id, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: q.num})
	}
}
