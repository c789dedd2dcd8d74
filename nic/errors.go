package nic

import (
	"errors"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
)

// Errors, for errors.Is. They are the values packages mr and qp return.
var (
	ErrInvalid  = mr.ErrInvalid  // EINVAL
	ErrBusy     = mr.ErrBusy     // EBUSY
	ErrNoMem    = mr.ErrNoMem    // ENOMEM: a queue is full
	ErrAgain    = mr.ErrAgain    // EAGAIN: the send queue is full (fabric-style calls)
	ErrOverflow = qp.ErrOverflow // EOVERFLOW: a CQ lost completions
	// ErrClosed is returned by calls on a closed device or destroyed object.
	ErrClosed = errors.New("softnic: device closed")
)
