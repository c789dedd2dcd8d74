package mr

import (
	"fmt"
	"strings"
)

// Access is the ibv_access_flags bit set, with libibverbs' numeric values.
type Access uint32

// The access flags of ibv_reg_mr(3). Local read is always granted and has no
// bit.
const (
	LocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	RemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	RemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	MWBind       Access = 1 << 4 // IBV_ACCESS_MW_BIND
	ZeroBased    Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	OnDemand     Access = 1 << 6 // IBV_ACCESS_ON_DEMAND

	regionAccess = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased | OnDemand
	remoteAccess = RemoteWrite | RemoteRead | RemoteAtomic
	// windowAccess is what a memory window binding may ask for
	// (ibv_mw_bind_info.mw_access_flags).
	windowAccess = remoteAccess | ZeroBased
	// translation bits describe the address space, not permissions: changing
	// them re-registers the translation (IB_MR_REREG_TRANS).
	translation = ZeroBased | OnDemand
)

var accessNames = [...]string{
	"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC",
	"MW_BIND", "ZERO_BASED", "ON_DEMAND",
}

// String lists the flags as IBV_ACCESS_ names without the prefix, joined by
// "|"; unknown bits are shown in hex and the empty set as "LOCAL_READ" (the
// access every region has).
func (a Access) String() string {
	if a == 0 {
		return "LOCAL_READ"
	}
	var names []string
	for i, n := range accessNames {
		if a&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := a &^ regionAccess; rest != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(names, "|")
}

// validate applies ibv_reg_mr(3)'s rules to a region's access flags. Unknown
// bits are EINVAL as ib_check_mr_access() answers them.
func (a Access) validate() error {
	if a&^regionAccess != 0 {
		return fmt.Errorf("unknown access bits %#x: %w", uint32(a&^regionAccess), ErrInvalid)
	}
	// "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
	// IBV_ACCESS_LOCAL_WRITE must be set too."
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return fmt.Errorf("%v without LOCAL_WRITE: %w", a&(RemoteWrite|RemoteAtomic), ErrInvalid)
	}
	return nil
}
