package nic

import "github.com/softnic/softnic/verbs"

// Asynchronous events reported outside the data path (Config.OnQPError,
// Config.OnSRQLimit): a QP that enters the error state by itself, or an
// SRQ that reaches its limit, is queued, under the QP's lock, for a
// goroutine that tells the consumer (hooks.Queue), so that the data path
// never waits for it. An embedded device's goroutine calls the hooks; a
// daemon's session tells the process that owns the QP or SRQ (the attach
// protocol's qp_error and srq_limit events), whose attached device calls
// its own hooks from a goroutine of its own.

// asyncEvent is a QP that entered the error state by itself, with the
// status of the error completion that moved it there, or an SRQ that
// reached its limit.
type asyncEvent struct {
	q     *QP
	cause verbs.WCStatus
	srq   *SRQ
}

// tell calls the hook of e.
func (d *Device) tell(e asyncEvent) {
	if e.srq != nil {
		d.onSRQLimit(e.srq)
		return
	}
	d.onQPError(e.q, e.cause)
}
