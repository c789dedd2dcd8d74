package nic

import "github.com/softnic/softnic/verbs"

// QP errors reported outside the data path (Config.OnQPError): a QP that
// enters the error state by itself is queued, under its lock, for a
// goroutine that tells the consumer (hooks.Queue), so that the data path
// never waits for it. An embedded device's goroutine calls OnQPError; a daemon's session
// tells the process that owns the QP (the attach protocol's qp_error
// event), whose attached device calls its own OnQPError from a goroutine
// of its own.

// qpError is a QP that entered the error state by itself, and the status
// of the error completion that moved it there.
type qpError struct {
	q     *QP
	cause verbs.WCStatus
}
