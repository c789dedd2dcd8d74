package qp

import (
	"errors"

	"github.com/softnic/softnic/mr"
)

// Errors returned by the verbs-style calls. They are the same values as
// package mr's, so errors.Is works across the stack whichever layer
// rejected a call.
var (
	// ErrInvalid (EINVAL): a bad attribute, state transition or work request.
	ErrInvalid = mr.ErrInvalid
	// ErrNoMem (ENOMEM): a send or receive queue is full, as ibv_post_send
	// reports it.
	ErrNoMem = mr.ErrNoMem
	// ErrOverflow (EOVERFLOW): a completion queue overflowed and lost
	// completions; the QPs that fed it were moved to the error state.
	ErrOverflow = errors.New("completion queue overflow (EOVERFLOW)")
)
