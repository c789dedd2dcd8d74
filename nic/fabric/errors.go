package fabric

import (
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// Errors, for errors.Is: nic's, and fi_mr's own -FI_* values, which are
// package mr's.
var (
	ErrInvalid      = nic.ErrInvalid      // EINVAL (-FI_EINVAL)
	ErrBusy         = nic.ErrBusy         // EBUSY (-FI_EBUSY)
	ErrNoMem        = nic.ErrNoMem        // ENOMEM: a queue is full
	ErrAgain        = nic.ErrAgain        // EAGAIN (-FI_EAGAIN): a queue is full, or a registration pending
	ErrClosed       = nic.ErrClosed       // a closed endpoint or device
	ErrNotSupported = nic.ErrNotSupported // EOPNOTSUPP: an fi_mr domain of an attached device
	ErrBadFlags     = mr.ErrBadFlags      // -FI_EBADFLAGS: flags a call does not take
	ErrNoKey        = mr.ErrNoKey         // -FI_ENOKEY: the requested key is in use
	ErrKeyRejected  = mr.ErrKeyRejected   // -FI_EKEYREJECTED: a requested key out of range or not taken
	ErrTooSmall     = mr.ErrTooSmall      // -FI_ETOOSMALL: the caller's buffer cannot hold the result
)
