package mr

import (
	"log/slog"
	"sync/atomic"
)

// What the fi_mr face (package nic/fabric) asks of the table beyond the
// verbs calls: registrations with application keys, several buffers,
// partitions and a disabled start; bindings to counters and endpoints;
// enabling and refreshing. The face keeps fi_mr's rules (mr_mode, flags,
// binding order); the table keeps what the data path must check.

// RegOptions is a registration as fi_mr_regattr asks for it.
type RegOptions struct {
	// Segments are the buffers, one contiguous address space over all of
	// them (fi_mr_regv); none may be empty.
	Segments [][]byte
	// Access is the region's access; ZeroBased addresses it from 0,
	// otherwise from the first buffer's address.
	Access Access
	// Key, when HasKey is set, is the key the application asked for
	// (fi_mr requested_key) instead of one the table chooses.
	Key    uint32
	HasKey bool
	// PKey is the partition remote requesters must match (IBTA rule); 0
	// accepts any.
	PKey uint16
	// Disabled creates the region refusing every access (ReasonDisabled)
	// until Enable.
	Disabled bool
}

// RegisterWith registers a region of pd as o describes. Its errors are
// Register's, and ErrNoKey for a requested key already in use.
func (t *Table) RegisterWith(pd PDHandle, o RegOptions) (*Region, error) {
	return t.register(regSpec{pd: pd, segs: o.Segments, access: o.Access,
		requested: o.HasKey, requestedKey: o.Key, pkey: o.PKey, disabled: o.Disabled})
}

// Binding is what an fi_mr region is bound to (fi_mr_bind), as the access
// check sees it.
type Binding struct {
	// Endpoint restricts remote access to requests arriving on QP
	// EndpointQPN (FI_MR_ENDPOINT); others fail with ReasonEndpoint.
	Endpoint    bool
	EndpointQPN uint32
	// Counters are incremented by every remote write or atomic the region
	// grants (counters bound with FI_REMOTE_WRITE).
	Counters []*atomic.Uint64
}

// Bind replaces r's binding with b. The table keeps b and reads it on the
// data path without a lock: b must not change afterwards.
func (r *Region) Bind(b *Binding) { r.bound.Store(b) }

// Enable lets a region registered Disabled be accessed (fi_mr_enable).
func (r *Region) Enable() { r.flags.And(^uint32(regionDisabled)) }

// SetRefreshing makes every access to r fail with ReasonRefreshing while
// on is set (fi_mr_refresh disables the region while it runs).
func (r *Region) SetRefreshing(on bool) {
	if on {
		r.flags.Or(regionRefreshing)
	} else {
		r.flags.And(^uint32(regionRefreshing))
	}
}

// Logger returns the table's logger, for the faces built on the table to
// log their control-path events beside the table's.
func (t *Table) Logger() *slog.Logger { return t.log }
