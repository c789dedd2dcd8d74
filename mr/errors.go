package mr

import "errors"

// Sentinel errors for API misuse, named after the errno or -FI_* value the
// man pages give. Functions wrap them with context (%w); test with errors.Is.
var (
	// ErrInvalid is EINVAL (-FI_EINVAL): a malformed request, such as
	// REMOTE_WRITE without LOCAL_WRITE or an unknown PD.
	ErrInvalid = errors.New("invalid argument (EINVAL)")
	// ErrBusy is EBUSY (-FI_EBUSY): the object is still in use, such as a
	// region with a memory window bound to it.
	ErrBusy = errors.New("device or resource busy (EBUSY)")
	// ErrNoMem is ENOMEM (-FI_ENOMEM): the key space or the system is out of
	// memory.
	ErrNoMem = errors.New("cannot allocate memory (ENOMEM)")
	// ErrNotSupported is EOPNOTSUPP: a valid request softnic does not
	// implement, as rxe answers it (for example re-registering a region's
	// translation).
	ErrNotSupported = errors.New("operation not supported (EOPNOTSUPP)")
	// ErrFault is EFAULT: an address range that resolves to no memory, as
	// ibv_advise_mr reports it.
	ErrFault = errors.New("bad address (EFAULT)")
	// ErrAgain is EAGAIN (-FI_EAGAIN): the object is not ready yet, such as
	// an fi_mr region whose asynchronous registration has not completed.
	ErrAgain = errors.New("resource temporarily unavailable (EAGAIN)")
	// ErrBadFlags is -FI_EBADFLAGS: flags the provider does not support.
	ErrBadFlags = errors.New("flags not supported (FI_EBADFLAGS)")
	// ErrNoKey is -FI_ENOKEY: the requested key is already in use.
	ErrNoKey = errors.New("requested key already in use (FI_ENOKEY)")
	// ErrKeyRejected is -FI_EKEYREJECTED: the requested key is out of range
	// or the domain does not take application keys (FI_MR_PROV_KEY).
	ErrKeyRejected = errors.New("requested key rejected (FI_EKEYREJECTED)")
	// ErrTooSmall is -FI_ETOOSMALL: the caller's buffer cannot hold the
	// result; the call also returns the size needed.
	ErrTooSmall = errors.New("buffer too small (FI_ETOOSMALL)")
)

// Reason says why an access check (Table.Remote, Table.Local) failed. It
// implements error without allocating. The reasons are for counters and
// for the local side: a responder answers every one with the same NAK,
// "remote access error", so that a peer learns nothing of the key it tried
// (see package qp).
type Reason uint8

// The reasons an access is refused.
const (
	ReasonUnknownKey Reason = iota + 1 // no region or window has this key's slot
	ReasonStaleKey                     // the slot exists but holds another key (deregistered, re-keyed, unbound)
	ReasonWrongPD                      // the region or window belongs to another protection domain
	ReasonAccess                       // the region or window does not grant the requested access
	ReasonRange                        // [addr, addr+length) is not inside the region or window
	ReasonDisabled                     // an fi_mr region not yet enabled (FI_MR_RMA_EVENT / FI_MR_ENDPOINT)
	ReasonRefreshing                   // fi_mr_refresh is running on the region (FI_MR_MMU_NOTIFY)
	ReasonWindowQP                     // a type-2 window bound to another QP
	ReasonMisaligned                   // an atomic not on one naturally aligned 8-byte word
	ReasonPartition                    // the region's auth key (P_Key) does not match the request's P_Key
	ReasonNotMapped                    // an ODP (or implicit ODP) address that resolves to no memory
	ReasonEndpoint                     // an fi_mr region bound to another endpoint (FI_MR_ENDPOINT)
	numReasons
)

var reasonText = [numReasons]string{
	ReasonUnknownKey: "unknown key",
	ReasonStaleKey:   "stale key",
	ReasonWrongPD:    "wrong protection domain",
	ReasonAccess:     "access not granted",
	ReasonRange:      "out of range",
	ReasonDisabled:   "region not enabled",
	ReasonRefreshing: "region refreshing",
	ReasonWindowQP:   "window bound to another QP",
	ReasonMisaligned: "misaligned atomic",
	ReasonPartition:  "partition key mismatch",
	ReasonNotMapped:  "address not mapped",
	ReasonEndpoint:   "region bound to another endpoint",
}

// Error returns a short description; it does not allocate.
func (r Reason) Error() string { return r.String() }

// String returns a short description of the reason.
func (r Reason) String() string {
	if r == 0 || r >= numReasons {
		return "unknown reason"
	}
	return reasonText[r]
}
