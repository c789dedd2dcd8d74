package nic

import (
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/qp"
)

// Errors, for errors.Is. They are the values packages mr, qp and cm return.
var (
	ErrInvalid  = mr.ErrInvalid  // EINVAL
	ErrBusy     = mr.ErrBusy     // EBUSY
	ErrNoMem    = mr.ErrNoMem    // ENOMEM: a queue is full
	ErrAgain    = mr.ErrAgain    // EAGAIN: the send queue is full (fabric-style calls)
	ErrOverflow = qp.ErrOverflow // EOVERFLOW: a CQ lost completions
	// ErrNotSupported (EOPNOTSUPP): a request softnic does not carry out
	// in this mode, such as an fi_mr domain of an attached device.
	ErrNotSupported = mr.ErrNotSupported
	// ErrFault (EFAULT): memory the device cannot reach, such as private
	// memory of an attached process (see Config.Attach).
	ErrFault = mr.ErrFault
	// ErrAccess (EACCES): a user the daemon does not serve, or a control
	// socket of a user the client does not trust (see DialControl).
	ErrAccess = attachproto.ErrAccess
	// ErrProtoNotSupported (EPROTONOSUPPORT): a daemon that speaks
	// another version of the attach protocol than this library (see
	// Config.Attach): a program and a daemon built from different
	// releases of softnic. The error names both versions.
	ErrProtoNotSupported = attachproto.ErrProtoNotSupported
	// ErrClosed is returned by calls on a closed device or destroyed object.
	ErrClosed = cm.ErrClosed
	// ErrConnRefused (ECONNREFUSED): nothing listens on the rdma_cm port
	// dialed (the peer's REJ says "invalid service ID"; see RejectError).
	ErrConnRefused = cm.ErrConnRefused
	// ErrTimedOut (ETIMEDOUT): the peer did not answer a connection
	// manager message after every retry, or a connection's QP exhausted
	// its transport retries (see QPError).
	ErrTimedOut = cm.ErrTimedOut
	// ErrConnReset (ECONNRESET): the peer disconnected (DREQ) or gave up
	// the connection (REJ).
	ErrConnReset = cm.ErrConnReset
)

// RejectError is a connection attempt refused by the peer's REJ, as Dial
// returns it: the device and port, the REJ's reason, additional reject
// information and private data (package cm's). It is errors.Is
// ErrConnRefused for reason "invalid service ID" (nothing listens on the
// port) and ErrAgain for "no resources" (the peer holds as many requests
// as it takes, CMLimits).
type RejectError = cm.RejectError

// QPError is why a connection ended when its QP entered the error state:
// Status is the error completion that moved it there, RETRY_EXC_ERR when
// the peer stopped answering (then errors.Is(err, ErrTimedOut)). It is
// package cm's.
type QPError = cm.QPError
