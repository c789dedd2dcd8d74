package nic

import (
	"fmt"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/verbs"
)

// The public types (Device, PD, MR, MW, CQ, SRQ, QP, Listener, Request,
// Conn) hold what both kinds of device share and send every verb to a
// provider of package nic/internal/provider, as libibverbs sends each to
// the verbs_context_ops of the device's provider: the embedded provider
// runs the NIC in this process (package nic/internal/embedded), the
// attached one asks a softnic daemon (package nic/internal/attached).
// A provider returns objects of its own, which the public types wrap; it
// reaches the public types only through upcalls. What one provider lacks
// is an optional interface the other implements; its absence is
// ErrNotSupported (see unsupported).

// nicOwner is the optional part of a device's provider that runs the NIC
// itself, and so has its QP table, its region table (which package
// nic/fabric's fi_mr domains register in) and its link's faults: the
// embedded provider. An attached device's are its daemon's.
type nicOwner interface {
	SetFaults(in FaultInjector)
	MaxQPs() int
	Memory() *mr.Table
	// QPs returns every QP, QP1 included, in QP number order.
	QPs() []provider.QP
}

// upcalls is the device as its provider sees it (provider.Up).
type upcalls struct{ d *Device }

// WrapQP wraps q, made in pd; the connection manager's QP1 is of no PD of
// the application's (pd nil).
func (u upcalls) WrapQP(pd any, q provider.QP) any {
	p, _ := pd.(*PD)
	return &QP{dev: u.d, pd: p, num: q.Num(), prov: q}
}

func (u upcalls) QPError(q any, cause verbs.WCStatus) {
	if u.d.events != nil && u.d.onQPError != nil {
		u.d.events.Post(asyncEvent{q: q.(*QP), cause: cause})
	}
}

func (u upcalls) SRQLimit(s any) {
	if u.d.events != nil && u.d.onSRQLimit != nil {
		u.d.events.Post(asyncEvent{srq: s.(*SRQ)})
	}
}

// unsupported is the error of a verb the device's provider does not
// implement, as EOPNOTSUPP is libibverbs's.
func unsupported(what string) error {
	return fmt.Errorf("%s of an attached device: %w", what, ErrNotSupported)
}
