package nic

import (
	"math/rand/v2"
	"net/netip"
	"sync"

	"go.uber.org/zap"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// QP1, the General Services Interface, carries the connection manager's
// MADs: a UD QP numbered 1 with the well-known Q_Key 0x80010000, created
// with the device. Its receive buffers (a GRH's 40 bytes, then the 256-byte
// MAD, as in every UD receive) are posted again as soon as their MAD is
// handled.
const (
	gsiRecvBuffers = 256
	gsiBufferSize  = wire.GRHSize + wire.MADSize
	gsiSendDepth   = 1024
)

// cm drives the connection manager's engine: it feeds it the MADs QP1
// receives (on the reader goroutine, after each batch) and time (through
// a timer entry of the device), and carries out what the engine asks.
// The engine runs under mu; QPs are touched, and MADs sent, only after mu
// is released, so that a QP's lock may be held while calling into the cm
// (the QP error hook does) but never the other way round.
type cm struct {
	dev *Device
	gsi *QP
	cq  *CQ
	buf []byte // gsiRecvBuffers receive buffers
	mr  *MR

	mu     sync.Mutex
	e      *cmEngine
	wakeAt qp.Time // the earliest timer entry queued for the engine, 0 if none

	// Reader goroutine scratch.
	wcs [64]qp.WC
	mad wire.MAD
}

// newCM creates QP1 and the connection manager of d.
func newCM(d *Device) (*cm, error) {
	c := &cm{
		dev: d,
		e:   newCMEngine(softnicGUID(d.local), d.cfg.CM, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), &d.devc),
		buf: make([]byte, gsiRecvBuffers*gsiBufferSize),
	}
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	if c.cq, err = d.CreateCQ(2 * gsiRecvBuffers); err != nil {
		return nil, err
	}
	if c.mr, err = pd.RegMR(c.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	c.gsi, err = pd.createQP(QPConfig{
		Type: qp.UD, SendCQ: c.cq, MaxSendWR: gsiSendDepth, MaxRecvWR: gsiRecvBuffers,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: wire.MADSize,
	}, wire.GSIQPN)
	if err != nil {
		return nil, err
	}
	if err := c.gsi.Connect(netip.AddrPort{}, 0, ConnectOptions{QKey: wire.GSIQKey}); err != nil {
		return nil, err
	}
	for i := range gsiRecvBuffers {
		if err := c.postRecv(uint64(i)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *cm) postRecv(slot uint64) error {
	return c.gsi.PostRecv(&qp.RecvWR{ID: slot, SGL: []qp.SGE{c.mr.SGE(int(slot)*gsiBufferSize, gsiBufferSize)}})
}

// poll hands the MADs QP1 received to the engine. It runs on the reader
// goroutine, which is also the only one to fill QP1's buffers.
func (c *cm) poll() {
	for {
		n, _ := c.cq.poll(c.wcs[:], false) // it runs in the device's progress
		if n == 0 {
			return
		}
		for i := range n {
			wc := &c.wcs[i]
			if wc.Status == qp.WRFlushErr {
				continue // QP1 is being destroyed
			}
			c.receive(wc)
			if err := c.postRecv(wc.ID); err != nil {
				c.dev.log.Debug("cm: QP1 receive buffer lost", zap.Error(err))
			}
		}
	}
}

func (c *cm) receive(wc *qp.WC) {
	off := int(wc.ID) * gsiBufferSize
	if wc.Status != qp.Success || wc.Opcode != qp.WCRecv || wc.ByteLen < wire.GRHSize {
		c.dev.devc.inc(CMRxDropped)
		return
	}
	if err := c.mad.Decode(c.buf[off+wire.GRHSize : off+int(wc.ByteLen)]); err != nil {
		c.dev.devc.inc(CMRxDropped)
		return
	}
	var mtu wire.MTU
	if c.mad.AttrID() == wire.AttrConnectRequest {
		mtu, _ = wire.MTUFromBytes(c.dev.PathMTU(wc.Src)) // the most a REQ may ask for
	}
	c.run(func(e *cmEngine, now qp.Time, out *cmOutput) { e.receive(now, wc.Src, mtu, &c.mad, out) })
}

// run calls f on the engine with the current time, re-arms the engine's
// timer, and then carries out f's output.
func (c *cm) run(f func(e *cmEngine, now qp.Time, out *cmOutput)) {
	var out cmOutput
	c.mu.Lock()
	now := c.dev.now()
	f(c.e, now, &out)
	var ended []endedConn
	for _, id := range out.flush {
		if id.qp != nil {
			ended = append(ended, endedConn{id.peer, id.qp})
		}
	}
	at, ok := c.e.deadline()
	arm := ok && (c.wakeAt == 0 || at < c.wakeAt)
	if arm {
		c.wakeAt = at
	}
	c.mu.Unlock()
	if arm {
		c.dev.timers.add(timerEntry{at: at, fn: c.tick})
	}
	c.perform(ended, out.mads)
}

// endedConn is a connection the peer ended and its QP, read under c.mu
// (Accept and Dial set it under it).
type endedConn struct {
	peer netip.AddrPort
	qp   *QP
}

// tick runs the engine's timers; the device's timer goroutine calls it.
func (c *cm) tick(now qp.Time) {
	c.run(func(e *cmEngine, now qp.Time, out *cmOutput) {
		if c.wakeAt <= now {
			c.wakeAt = 0
		}
		e.tick(now, out)
	})
}

// perform flushes the QPs of connections the peer ended, then sends the
// MADs.
func (c *cm) perform(ended []endedConn, mads []cmMAD) {
	for _, e := range ended {
		c.dev.log.Debug("cm: peer disconnected", zap.Stringer("peer", e.peer), zap.Uint32("qpn", e.qp.num))
		e.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState)
	}
	for i := range mads {
		m := &mads[i]
		err := c.gsi.PostSend(&qp.SendWR{
			Opcode: qp.WRSend, Flags: qp.Inline, Inline: m.mad[:],
			Dest: m.dst, DestQPN: wire.GSIQPN, QKey: wire.GSIQKey,
		})
		if err != nil {
			// A full send queue or a closing device: the CM's
			// retransmission covers the loss.
			c.dev.qpc.Add(qp.SendErr, 1)
		}
	}
}

// randomPSN draws a starting PSN for a connection.
func (c *cm) randomPSN() wire.PSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.e.randomPSN()
}

// shutdown ends every connection and handshake as the device closes.
func (c *cm) shutdown() {
	c.run(func(e *cmEngine, now qp.Time, out *cmOutput) { e.shutdown(now, out) })
}
