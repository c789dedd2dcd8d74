package nic

import (
	"sync"

	"github.com/softnic/softnic/qp"
)

// QP errors reported outside the data path (Config.OnQPError): a QP that
// enters the error state by itself is queued, under its lock, for a
// goroutine that tells the consumer, so that the data path never waits for
// it. An embedded device's goroutine calls OnQPError; a daemon's session
// tells the process that owns the QP (the attach protocol's qp_error
// event), whose attached device calls its own OnQPError from a goroutine
// of its own.

// maxQueuedQPErrors bounds the errors waiting for their consumer; more are
// dropped. A QP fails again only after its program brought it back from
// the error state, so only a consumer that stopped consuming fills it.
const maxQueuedQPErrors = 1024

// qpError is a QP that entered the error state by itself, and the status
// of the error completion that moved it there.
type qpError struct {
	q     *QP
	cause qp.WCStatus
}

// qpErrorQueue hands QP errors to one consumer goroutine, in order.
type qpErrorQueue struct {
	mu   sync.Mutex
	errs []qpError
	wake chan struct{}
}

func newQPErrorQueue() *qpErrorQueue { return &qpErrorQueue{wake: make(chan struct{}, 1)} }

// post queues e for the consumer.
func (e *qpErrorQueue) post(v qpError) {
	e.mu.Lock()
	if len(e.errs) < maxQueuedQPErrors {
		e.errs = append(e.errs, v)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run calls fn with each error posted, in order, until done is closed.
func (e *qpErrorQueue) run(done <-chan struct{}, fn func(qpError)) {
	for {
		select {
		case <-done:
			return
		case <-e.wake:
		}
		e.mu.Lock()
		errs := e.errs
		e.errs = nil
		e.mu.Unlock()
		for _, v := range errs {
			fn(v)
		}
	}
}

// noteErrorLocked reports, once per entry into the error state, a QP that
// an error completion moved there; a Modify to ERR, a Destroy or a CQ
// overflow (cause SUCCESS) is no error of the QP's to report.
func (q *embeddedQP) noteErrorLocked() {
	if q.qp.State() != qp.Err {
		q.errorNoted = false
		return
	}
	if q.errorNoted {
		return
	}
	q.errorNoted = true
	cause := q.qp.Status().Cause
	switch {
	case cause == qp.Success:
	case q.hooks != nil:
		q.hooks.qpFailed(qpError{q.pub, cause})
	case q.dev.pub.qpErrors != nil:
		q.dev.pub.qpErrors.post(qpError{q.pub, cause})
	}
}
