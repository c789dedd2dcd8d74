package embedded

import (
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/qp"
)

// What the embedded device lends a daemon that serves it to attached
// processes (package nic/attachd, through package nic/internal/hooks and
// the optional interfaces nic's hooks assert).

// busyPollHook holds a device's busy poller, for an atomic.Pointer.
type busyPollHook struct{ p hooks.BusyPoller }

// SetBusyPoller has the reader poll p too while the device busy-polls.
func (d *Device) SetBusyPoller(p hooks.BusyPoller) (clear func()) {
	if d.cfg.BusyPoll <= 0 {
		return func() {}
	}
	h := &busyPollHook{p}
	d.poller.Store(h)
	return func() { d.poller.CompareAndSwap(h, nil) }
}

// The embedded QP as a daemon's hooks.Queues drive it.

func (q *QP) Num() uint32             { return q.num }
func (q *QP) Lock()                   { q.mu.Lock() }
func (q *QP) TryLock() bool           { return q.mu.TryLock() }
func (q *QP) Unlock()                 { q.mu.Unlock() }
func (q *QP) DestroyedLocked() bool   { return q.destroyed }
func (q *QP) TransportLocked() *qp.QP { return q.qp }
func (q *QP) Halt()                   { q.halt() }

// FlushLocked sends what the QP has to send, and reports whether its
// peer is a QP of this device.
func (q *QP) FlushLocked() bool {
	q.flushNowLocked()
	return q.peer.Load()&peerLocal != 0
}

// TransportCQ is the CQ of package qp the device completes to.
func (c *CQ) TransportCQ() *qp.CQ { return c.cq }

// TransportSRQ is the SRQ of package qp.
func (s *SRQ) TransportSRQ() *qp.SRQ { return s.srq }
