package embedded

import (
	"math/rand/v2"
	"net/netip"
	"sync"

	"log/slog"

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

// cmDriver drives the connection manager's engine (package cm): it feeds
// it the MADs QP1 receives (on the reader goroutine, after each batch),
// time (through a timer entry of the device) and the application's calls,
// and carries out what the engine's Output asks: it wakes the goroutines
// that wait, flushes QPs and sends MADs. The engine runs under mu, and so
// do the wakeups; QPs are touched, and MADs sent, only after mu is
// released, so that a QP's lock may be held while calling into the driver
// (the QP error hook does) but never the other way round.
type cmDriver struct {
	dev *Device
	gsi *QP
	cq  *CQ
	buf []byte // gsiRecvBuffers receive buffers
	mr  *MR

	mu     sync.Mutex
	e      *cm.Engine
	wakeAt qp.Time // the earliest timer entry queued for the engine, 0 if none

	// Reader goroutine scratch.
	wcs [64]verbs.WC
	mad mad.MAD
}

// newCM creates QP1 and the connection manager of d.
func newCM(d *Device) (*cmDriver, error) {
	c := &cmDriver{
		dev: d,
		e:   cm.New(cm.GUID(d.local), d.cfg.CM, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))),
		buf: make([]byte, gsiRecvBuffers*gsiBufferSize),
	}
	p, err := d.AllocPD(nil)
	if err != nil {
		return nil, err
	}
	pd := p.(*PD)
	cq, err := d.CreateCQ(2*gsiRecvBuffers, provider.NewCQState())
	if err != nil {
		return nil, err
	}
	c.cq = cq.(*CQ)
	m, err := pd.RegMR(c.buf, mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	c.mr = m.(*MR)
	if c.gsi, err = pd.createNumbered(provider.QPConfig{
		Type: verbs.UD, SendCQ: c.cq, MaxSendWR: gsiSendDepth, MaxRecvWR: gsiRecvBuffers,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: mad.MADSize,
	}, wire.GSIQPN); err != nil {
		return nil, err
	}
	o := provider.ConnectOptions{QKey: wire.GSIQKey}
	o.SetDefaults(d.cfg.MTU)
	if err := provider.Connect(c.gsi, d.cfg.MTU, netip.AddrPort{}, 0, &o); err != nil {
		return nil, err
	}
	for i := range gsiRecvBuffers {
		if err := c.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *cmDriver) postRecv(slot uint64) error {
	sge := verbs.SGE{Addr: c.mr.Addr() + slot*gsiBufferSize, Length: gsiBufferSize, LKey: c.mr.Key()}
	return c.gsi.PostRecv(&verbs.RecvWR{ID: slot, SGL: []verbs.SGE{sge}})
}

// poll hands the MADs QP1 received to the engine. It runs on the reader
// goroutine, which is also the only one to fill QP1's buffers.
func (c *cmDriver) poll() {
	for {
		n, _ := c.cq.Poll(c.wcs[:], false) // it runs in the device's progress
		if n == 0 {
			return
		}
		for i := range n {
			wc := &c.wcs[i]
			if wc.Status == verbs.WRFlushErr {
				continue // QP1 is being destroyed
			}
			c.receive(wc)
			if err := c.postRecv(wc.ID); err != nil {
				c.dev.log.Debug("cm: QP1 receive buffer lost", slog.Any("error", err))
			}
		}
	}
}

func (c *cmDriver) receive(wc *verbs.WC) {
	off := int(wc.ID) * gsiBufferSize
	if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || wc.ByteLen < wire.GRHSize {
		c.dev.devc.Inc(CMRxDropped)
		return
	}
	if err := c.mad.Decode(c.buf[off+wire.GRHSize : off+int(wc.ByteLen)]); err != nil {
		c.dev.devc.Inc(CMRxDropped)
		return
	}
	var mtu wire.MTU
	if c.mad.AttrID() == mad.AttrConnectRequest {
		mtu, _ = wire.MTUFromBytes(c.dev.PathMTU(wc.Src)) // the most a REQ may ask for
	}
	c.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Receive(now, wc.Src, mtu, &c.mad, out) })
}

// run calls f on the engine with the current time, wakes the goroutines
// its events concern, re-arms the engine's timer, and then carries out
// the rest of f's output.
func (c *cmDriver) run(f func(e *cm.Engine, now qp.Time, out *cm.Output)) {
	var out cm.Output
	c.mu.Lock()
	now := c.dev.now()
	f(c.e, now, &out)
	c.wakeLocked(out.Events)
	var ended []endedConn
	for _, comm := range out.Flush {
		if id, _ := comm.Context.(*cmID); id != nil && id.qp != nil {
			ended = append(ended, endedConn{id.peer, id.qp})
		}
	}
	at, ok := c.e.Deadline()
	arm := ok && (c.wakeAt == 0 || at < c.wakeAt)
	if arm {
		c.wakeAt = at
	}
	c.mu.Unlock()
	c.dev.devc.AddCM(&out.Counts)
	if arm {
		c.dev.timers.Add(at, wakeup{fn: c.tick})
	}
	c.perform(ended, out.MADs)
}

// wakeLocked tells the goroutines that wait what the engine's events say:
// a listener that a request waits, a Dial or an Accept the outcome of its
// handshake, a Conn that it ended, a Close that its DREQ was answered.
func (c *cmDriver) wakeLocked(events []cm.Event) {
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

// endedConn is a connection the peer ended and its QP, read under c.mu
// (Accept and Dial set it under it).
type endedConn struct {
	peer netip.AddrPort
	qp   *QP
}

// tick runs the engine's timers; the device's timer goroutine calls it.
func (c *cmDriver) tick(now qp.Time) {
	c.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		if c.wakeAt <= now {
			c.wakeAt = 0
		}
		e.Tick(now, out)
	})
}

// perform flushes the QPs of connections the peer ended, then sends the
// MADs.
func (c *cmDriver) perform(ended []endedConn, mads []cm.MAD) {
	for _, e := range ended {
		c.dev.log.Debug("cm: peer disconnected", slog.Any("peer", e.peer), slog.Any("qpn", e.qp.num))
		e.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
	for i := range mads {
		m := &mads[i]
		err := c.gsi.PostSend(&verbs.SendWR{
			Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: m.MAD[:],
			Dest: m.Dst, DestQPN: wire.GSIQPN, QKey: wire.GSIQKey,
		}, true)
		if err != nil {
			// A full send queue or a closing device: the CM's
			// retransmission covers the loss.
			c.dev.qpc.Add(verbs.SendErr, 1)
		}
	}
}

// randomPSN draws a starting PSN for a connection.
func (c *cmDriver) randomPSN() wire.PSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.e.RandomPSN()
}

// shutdown ends every connection and handshake as the device closes.
func (c *cmDriver) shutdown() {
	c.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Shutdown(now, out) })
}

// nextRequest takes the next request waiting at l, nil if none does.
func (c *cmDriver) nextRequest(l *cmListener) *cmID {
	c.mu.Lock()
	defer c.mu.Unlock()
	comm := c.e.NextRequest(l.engine)
	if comm == nil {
		return nil
	}
	if l.engine.Backlog() > 0 {
		l.signal() // for another AcceptRequest
	}
	return newCMID(comm)
}

// cmID is the driver's side of one communication, the Context of the
// engine's: what the goroutines of Dial, Accept and Close wait on. An
// attached device's Request and Conn hold one too, with peer (and for a
// Conn done and err) alone set, by the attachment.
type cmID struct {
	comm *cm.ID // the engine's communication; nil when attached
	peer netip.AddrPort
	port uint16
	req  *mad.REQFields // the REQ received, for a request

	// result carries the one cmResult of the handshake; done closes when
	// the connection ends, with err saying why (ended says it has);
	// settled closes once nothing sent waits for an answer any more
	// (timewait or gone). The driver mirrors the engine's under its mu.
	result  chan cmResult
	done    chan struct{}
	ended   bool
	err     error
	settled chan struct{}

	qp *QP // flushed when the peer disconnects
}

// cmResult is the outcome of a handshake that a Dial or an Accept waits
// for: the REP (dialer), nothing (acceptor: the RTU came), or an error.
type cmResult struct {
	rep *mad.REPFields
	err error
}

// newCMID returns the driver's side of comm and makes it comm's Context.
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

// cmListener is the driver's side of a listener: AcceptRequest waits on
// ready, signalled when a request may wait in the engine's backlog, and on
// closed. An attached device's holds port and closed alone.
type cmListener struct {
	engine *cm.Listener // nil when attached
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
