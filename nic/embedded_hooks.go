package nic

import (
	"log/slog"

	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire/mad"
)

// The hooks the embedded device exports to a daemon that serves it to
// attached processes (package nic/attachd, through package hooks): the
// device calls the daemon's hooks.Queues and hooks.BusyPoller as it runs,
// and keeps nothing of the daemon's but them.

func init() {
	hooks.DeviceLogger = func(d *Device) *slog.Logger { return d.log }
	hooks.Embedded = func(d *Device) (hooks.Device, bool) {
		e, ok := d.prov.(*embeddedDevice)
		return e, ok
	}
	hooks.CQ = func(c *CQ) *qp.CQ {
		if ec, ok := c.prov.(*embeddedCQ); ok {
			return ec.cq
		}
		return nil
	}
	hooks.SRQ = func(s *SRQ) *qp.SRQ {
		if es, ok := s.prov.(*embeddedSRQ); ok {
			return es.srq
		}
		return nil
	}
	hooks.SetQueues = func(cfg *QPConfig, q hooks.Queues) { cfg.queues = q }
	hooks.AcceptWith = func(r *Request, opts AcceptOptions, cfg QPConfig) (*Conn, error) {
		er, ok := r.prov.(*embeddedRequest)
		if !ok {
			return nil, unsupported("accepting with a QP configuration of its own")
		}
		c, err := er.acceptWith(opts.provider(), cfg.provider())
		if err != nil {
			return nil, err
		}
		return r.l.dev.newConn(&c), nil
	}
	hooks.Abandon = func(r *Request, reason mad.RejectReason) {
		if er, ok := r.prov.(*embeddedRequest); ok {
			er.abandon(reason)
		}
	}
}

// busyPollHook holds a device's busy poller, for an atomic.Pointer.
type busyPollHook struct{ p hooks.BusyPoller }

// SetBusyPoller has the reader poll p too while the device busy-polls.
func (d *embeddedDevice) SetBusyPoller(p hooks.BusyPoller) (clear func()) {
	if d.cfg.BusyPoll <= 0 {
		return func() {}
	}
	h := &busyPollHook{p}
	d.poller.Store(h)
	return func() { d.poller.CompareAndSwap(h, nil) }
}

// The embedded QP as a daemon's hooks.Queues drive it.

func (q *embeddedQP) Num() uint32             { return q.num }
func (q *embeddedQP) Lock()                   { q.mu.Lock() }
func (q *embeddedQP) TryLock() bool           { return q.mu.TryLock() }
func (q *embeddedQP) Unlock()                 { q.mu.Unlock() }
func (q *embeddedQP) DestroyedLocked() bool   { return q.destroyed }
func (q *embeddedQP) TransportLocked() *qp.QP { return q.qp }
func (q *embeddedQP) Halt()                   { q.halt() }

// FlushLocked sends what the QP has to send, and reports whether its
// peer is a QP of this device.
func (q *embeddedQP) FlushLocked() bool {
	q.flushNowLocked()
	return q.peer.Load()&peerLocal != 0
}
