package cmhost

import (
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// QP1, the General Services Interface, carries the connection manager's
// MADs: a UD QP numbered 1 with the well-known Q_Key 0x80010000, created
// with the device. Its receive buffers (a GRH's 40 bytes, then the 256-byte
// MAD, as in every UD receive) are posted again as soon as their MAD is
// handled.
const (
	gsiRecvBuffers = 256
	gsiBufferSize  = wire.GRHSize + mad.MADSize
	gsiSendDepth   = 1024
)

// Device is the device the connection manager is hosted on, as the host
// uses it.
type Device interface {
	Addr() netip.AddrPort // the engine's GUID is made of it
	MTU() int
	PathMTU(dst netip.AddrPort) int
	// SourceFor is the address the device sends from toward dst.
	SourceFor(dst netip.AddrPort) netip.AddrPort
	Done() <-chan struct{} // closed when the device closes
	AllocPD(owner any) (provider.PD, error)
	CreateCQ(depth int, st *provider.CQState) (provider.CQ, error)
	// CreateQP creates a QP numbered num (0: the next free number) in pd,
	// a PD of the device.
	CreateQP(pd provider.PD, cfg provider.QPConfig, num uint32) (QP, error)
	// OwnQP returns q as a QP the host drives, false if q is not of the
	// device.
	OwnQP(q provider.QP) (QP, bool)
	// Now is the device clock the engine's timers run on; At has fn
	// called with the current time once at is due, on the device's timer
	// goroutine.
	Now() qp.Time
	At(at qp.Time, fn func(now qp.Time))
	// CountCM adds the engine's counts to the device's counters;
	// CountSendErr counts a MAD QP1 could not send.
	CountCM(counts *cm.Counts)
	CountSendErr()
}

// QP is a QP of a connection as the host drives it: the provider's QP,
// and the hooks the connection manager hangs on it.
type QP interface {
	provider.QP
	// OnError has fn told the cause once the QP enters the error state
	// (nil removes it); fn runs at once if the QP is already there, and
	// with the QP's lock held.
	OnError(fn func(cause verbs.WCStatus))
	// Halt moves the QP to the error state, which flushes its work
	// requests, with no error hook: nothing ends when it fails.
	Halt()
	// OnFirstRequest has fn called once, with the QP's lock held, when
	// the QP's responder takes its first request from now on (nil takes
	// it back): an accepted connection is established by it or by the
	// RTU, whichever comes first (see cm.Engine.CommEstablished).
	OnFirstRequest(fn func())
}

// Host drives the connection manager's engine (package cm): it feeds
// it the MADs QP1 receives (Poll, after each batch the device processes),
// time (through a timer entry of the device) and the application's calls,
// and carries out what the engine's Output asks: it wakes the goroutines
// that wait, flushes QPs and sends MADs. The engine runs under mu, and so
// do the wakeups; QPs are touched, and MADs sent, only after mu is
// released, so that a QP's lock may be held while calling into the host
// (the QP error hook does) but never the other way round.
type Host struct {
	dev     Device
	log     *slog.Logger
	closing <-chan struct{} // the device's Done
	gsi     QP
	cq      provider.CQ
	buf     []byte // gsiRecvBuffers receive buffers
	mr      provider.MR

	mu     sync.Mutex
	e      *cm.Engine
	wakeAt qp.Time // the earliest timer entry queued for the engine, 0 if none

	// Poll's scratch.
	wcs [64]verbs.WC
	mad mad.MAD
}

// New creates QP1 on d and the connection manager, with the engine's
// limits lim (their defaults set), which logs to log.
func New(d Device, lim cm.Limits, log *slog.Logger) (*Host, error) {
	h := &Host{
		dev:     d,
		log:     log,
		closing: d.Done(),
		e:       cm.New(cm.GUID(d.Addr()), lim, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))),
		buf:     make([]byte, gsiRecvBuffers*gsiBufferSize),
	}
	pd, err := d.AllocPD(nil)
	if err != nil {
		return nil, err
	}
	if h.cq, err = d.CreateCQ(2*gsiRecvBuffers, provider.NewCQState()); err != nil {
		return nil, err
	}
	if h.mr, err = pd.RegMR(h.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	if h.gsi, err = d.CreateQP(pd, provider.QPConfig{
		Type: verbs.UD, SendCQ: h.cq, MaxSendWR: gsiSendDepth, MaxRecvWR: gsiRecvBuffers,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: mad.MADSize,
	}, wire.GSIQPN); err != nil {
		return nil, err
	}
	o := provider.ConnectOptions{QKey: wire.GSIQKey}
	o.SetDefaults(d.MTU())
	if err := provider.Connect(h.gsi, d.MTU(), netip.AddrPort{}, 0, &o); err != nil {
		return nil, err
	}
	for i := range gsiRecvBuffers {
		if err := h.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *Host) postRecv(slot uint64) error {
	sge := verbs.SGE{Addr: h.mr.Addr() + slot*gsiBufferSize, Length: gsiBufferSize, LKey: h.mr.Key()}
	return h.gsi.PostRecv(&verbs.RecvWR{ID: slot, SGL: []verbs.SGE{sge}})
}

// Poll hands the MADs QP1 received to the engine. The device calls it
// after each batch of packets it processed, on the goroutine that did
// (one at a time), which is also the only one to fill QP1's buffers.
func (h *Host) Poll() {
	for {
		n, _ := h.cq.Poll(h.wcs[:], false) // it runs in the device's progress
		if n == 0 {
			return
		}
		for i := range n {
			wc := &h.wcs[i]
			if wc.Status == verbs.WRFlushErr {
				continue // QP1 is being destroyed
			}
			h.receive(wc)
			if err := h.postRecv(wc.ID); err != nil {
				h.log.Debug("cm: QP1 receive buffer lost", slog.Any("error", err))
			}
		}
	}
}

func (h *Host) receive(wc *verbs.WC) {
	off := int(wc.ID) * gsiBufferSize
	if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || wc.ByteLen < wire.GRHSize ||
		h.mad.Decode(h.buf[off+wire.GRHSize:off+int(wc.ByteLen)]) != nil {
		var dropped cm.Counts
		dropped[cm.RxDropped] = 1
		h.dev.CountCM(&dropped)
		return
	}
	var mtu wire.MTU
	if h.mad.AttrID() == mad.AttrConnectRequest {
		mtu, _ = wire.MTUFromBytes(h.dev.PathMTU(wc.Src)) // the most a REQ may ask for
	}
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Receive(now, wc.Src, mtu, &h.mad, out) })
}

// run calls f on the engine with the current time, wakes the goroutines
// its events concern, re-arms the engine's timer, and then carries out
// the rest of f's output.
func (h *Host) run(f func(e *cm.Engine, now qp.Time, out *cm.Output)) {
	var out cm.Output
	h.mu.Lock()
	now := h.dev.Now()
	f(h.e, now, &out)
	h.wakeLocked(out.Events)
	var ended []endedConn
	for _, comm := range out.Flush {
		if id, _ := comm.Context.(*cmID); id != nil && id.qp != nil {
			ended = append(ended, endedConn{id.peer, id.qp})
		}
	}
	at, ok := h.e.Deadline()
	arm := ok && (h.wakeAt == 0 || at < h.wakeAt)
	if arm {
		h.wakeAt = at
	}
	h.mu.Unlock()
	h.dev.CountCM(&out.Counts)
	if arm {
		h.dev.At(at, h.tick)
	}
	h.perform(ended, out.MADs)
}

// wakeLocked tells the goroutines that wait what the engine's events say:
// a listener that a request waits, a Dial or an Accept the outcome of its
// handshake, a Conn that it ended, a Close that its DREQ was answered.
func (h *Host) wakeLocked(events []cm.Event) {
	for _, ev := range events {
		switch ev.Type {
		case cm.EventRequest:
			ev.Listener.Context.(*cmListener).signal()
			continue
		case cm.EventListenerClosed:
			close(ev.Listener.Context.(*cmListener).closed)
			continue
		}
		id, _ := ev.ID.Context.(*cmID)
		if id == nil {
			continue // a request no AcceptRequest has taken yet
		}
		id.err = ev.ID.Err()
		switch ev.Type {
		case cm.EventReply:
			id.finish(cmResult{rep: ev.ID.REP()})
		case cm.EventResolved:
			id.finish(cmResult{sidr: ev.ID.SIDRREP()})
		case cm.EventEstablished:
			id.finish(cmResult{})
		case cm.EventFailed:
			id.finish(cmResult{err: ev.Err})
		case cm.EventEnded:
			id.ended = true
			close(id.done)
		case cm.EventSettled:
			close(id.settled)
		}
	}
}

// endedConn is a connection the peer ended and its QP, read under h.mu
// (Accept and Dial set it under it).
type endedConn struct {
	peer netip.AddrPort
	qp   QP
}

// tick runs the engine's timers; the device's timer goroutine calls it.
func (h *Host) tick(now qp.Time) {
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		if h.wakeAt <= now {
			h.wakeAt = 0
		}
		e.Tick(now, out)
	})
}

// perform flushes the QPs of connections the peer ended, then sends the
// MADs.
func (h *Host) perform(ended []endedConn, mads []cm.MAD) {
	for _, e := range ended {
		h.log.Debug("cm: peer disconnected", slog.Any("peer", e.peer), slog.Any("qpn", e.qp.Num()))
		e.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
	for i := range mads {
		m := &mads[i]
		err := h.gsi.PostSend(&verbs.SendWR{
			Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: m.MAD[:],
			Dest: m.Dst, DestQPN: wire.GSIQPN, QKey: wire.GSIQKey, TrafficClass: m.TrafficClass,
		}, true)
		if err != nil {
			// A full send queue or a closing device: the CM's
			// retransmission covers the loss.
			h.dev.CountSendErr()
		}
	}
}

// randomPSN draws a starting PSN for a connection.
func (h *Host) randomPSN() wire.PSN {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.e.RandomPSN()
}

// Shutdown ends every connection and handshake as the device closes.
func (h *Host) Shutdown() {
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Shutdown(now, out) })
}

// nextRequest takes the next request waiting at l, nil if none does.
func (h *Host) nextRequest(l *cmListener) *cmID {
	h.mu.Lock()
	defer h.mu.Unlock()
	comm := h.e.NextRequest(l.engine)
	if comm == nil {
		return nil
	}
	if l.engine.Backlog() > 0 {
		l.signal() // for another AcceptRequest
	}
	return newCMID(comm)
}

// cmID is the host's side of one communication, the Context of the
// engine's: what the goroutines of Dial, Accept and Close wait on.
type cmID struct {
	comm *cm.ID // the engine's communication
	peer netip.AddrPort
	port uint16
	req  *mad.REQFields // the REQ received, for a request

	// result carries the one cmResult of the handshake; done closes when
	// the connection ends, with err saying why (ended says it has);
	// settled closes once nothing sent waits for an answer any more
	// (timewait or gone). The host mirrors the engine's under its mu.
	result  chan cmResult
	done    chan struct{}
	ended   bool
	err     error
	settled chan struct{}

	qp QP // flushed when the peer disconnects
}

// cmResult is the outcome of a handshake that a Dial or an Accept waits
// for: the REP (dialer), nothing (acceptor: the RTU came), or an error;
// or of a resolution that a Resolve waits for: the SIDR_REP.
type cmResult struct {
	rep  *mad.REPFields
	sidr *mad.SIDRREPFields
	err  error
}

// newCMID returns the host's side of comm and makes it comm's Context.
func newCMID(comm *cm.ID) *cmID {
	id := &cmID{
		comm: comm, peer: comm.Peer(), port: comm.Port(), req: comm.REQ(),
		result: make(chan cmResult, 1), done: make(chan struct{}), settled: make(chan struct{}),
	}
	comm.Context = id
	return id
}

// finish hands the handshake's outcome to its waiter. The engine reports
// it once, and result has room for it: the send never blocks.
func (id *cmID) finish(r cmResult) { id.result <- r }

// cmListener is the host's side of a listener: AcceptRequest waits on
// ready, signalled when a request may wait in the engine's backlog, and on
// closed.
type cmListener struct {
	engine *cm.Listener
	port   uint16
	ready  chan struct{}
	closed chan struct{}
}

// signal wakes one AcceptRequest of the listener.
func (l *cmListener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}
