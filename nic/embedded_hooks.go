package nic

import "github.com/softnic/softnic/qp"

// The hooks the embedded device exports to a daemon that serves it to
// attached processes (AttachServer): the device calls them as it runs,
// and keeps nothing of the daemon's but them.

// qpHooks is what a daemon hangs on a QP whose queues an attached process
// fills through rings (QPConfig.hooks). The device calls them with the
// QP's lock held.
type qpHooks interface {
	// bindLocked is called once, with the QP, before the QP is published.
	bindLocked(q *embeddedQP)
	// pullRecvLocked takes the receive work requests posted since, before
	// the QP takes a packet; pullSendLocked the send work requests, each
	// time the device runs the QP. They report whether there were any.
	pullRecvLocked() bool
	pullSendLocked() bool
	// publishLocked tells the process what the QP is done with, after it
	// ran.
	publishLocked()
	// countPostedLocked adds to st the work requests posted that the QP
	// has not taken yet.
	countPostedLocked(st *qp.Status)
	// owner names the process that owns the QP, for the R_Key guard's
	// sources: two processes' QPs are told apart.
	owner() uint32
	// qpFailed tells the process that its QP entered the error state by
	// itself (Config.OnQPError).
	qpFailed(e qpError)
}

// busyPoller is what the reader of a device that busy-polls
// (Config.BusyPoll) polls besides its socket: a daemon's queues of its
// attached processes.
type busyPoller interface {
	// busyPolling tells that the reader starts (on) or stops polling.
	busyPolling(on bool)
	// pollRings polls once, and reports whether there was work.
	pollRings() bool
}

// busyPollHook holds a device's busyPoller, for an atomic.Pointer.
type busyPollHook struct{ p busyPoller }

// setBusyPoller has the reader poll p too while the device busy-polls;
// it returns the hook to pass to clearBusyPoller. A device that does not
// busy-poll ignores it (and returns nil).
func (d *embeddedDevice) setBusyPoller(p busyPoller) *busyPollHook {
	if d.cfg.BusyPoll <= 0 {
		return nil
	}
	h := &busyPollHook{p}
	d.poller.Store(h)
	return h
}

// clearBusyPoller removes h, if it is still the device's.
func (d *embeddedDevice) clearBusyPoller(h *busyPollHook) {
	if h != nil {
		d.poller.CompareAndSwap(h, nil)
	}
}
