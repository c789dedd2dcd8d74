package nic

import (
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/provider"
)

// MW is a memory window (ibv_mw): remote access to part of a region,
// granted and revoked by work requests instead of by registration. A
// BIND_MW work request (qp.WRBindMW) binds it: its Bind names the window
// by its current rkey and gives the next one (keyspace.IncRKey of it, as
// ibv_bind_mw does), the region by its lkey, the range and the access.
// LOCAL_INV, or a peer's SEND WITH INVALIDATE, invalidates a type 2
// window. The same calls work on embedded and attached devices.
type MW struct {
	pd   *PD
	typ  mr.WindowType
	prov provider.MW
}

// AllocMW allocates a memory window of type 1 or 2 in the PD
// (ibv_alloc_mw). A type 1 window starts valid and unbound, a type 2
// window free.
func (pd *PD) AllocMW(typ mr.WindowType) (*MW, error) {
	p, err := pd.prov.AllocMW(typ)
	if err != nil {
		return nil, err
	}
	return &MW{pd: pd, typ: typ, prov: p}, nil
}

// RKey returns the window's rkey, which each bind changes. An attached
// device's window reports the key of the last bind posted for it, as
// libibverbs updates mw->rkey when ibv_bind_mw posts; an embedded one's
// changes when the bind executes.
func (w *MW) RKey() uint32 { return w.prov.RKey() }

// Type returns the window's type.
func (w *MW) Type() mr.WindowType { return w.typ }

// Dealloc frees the window (ibv_dealloc_mw); a binding it has is dropped.
func (w *MW) Dealloc() error { return w.prov.Dealloc() }
