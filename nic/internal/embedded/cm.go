package embedded

import (
	"cmp"
	"context"
	"net/netip"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/cmhost"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire/mad"
)

// The embedded device's connection manager is package cmhost's, on the
// device's QP1: the device serves provider.Device's Listen and Dial with
// it, runs it in its progress and on its timer goroutine, and lends it
// what cmhost.Device and cmhost.QP ask.

func (d *Device) Listen(port uint16, opts *provider.ListenOptions) (provider.Listener, uint16, error) {
	return d.cm.Listen(port, opts)
}

func (d *Device) Dial(ctx context.Context, remote netip.AddrPort, port uint16, opts *provider.DialOptions) (provider.Connection, error) {
	return d.cm.Dial(ctx, remote, port, opts)
}

func (d *Device) ListenUD(port uint16, ps mad.PortSpace, backlog int, held bool) (provider.Listener, uint16, error) {
	return d.cm.ListenUD(port, ps, backlog, held)
}

func (d *Device) Resolve(ctx context.Context, remote netip.AddrPort, port uint16, o *provider.ResolveOptions) (provider.Resolution, error) {
	return d.cm.Resolve(ctx, remote, port, o)
}

// DialMTU asks for the path MTU toward remote, which may carry less than
// the device's MTU (or than asked): its MTU, as rxe's interface MTU bounds
// its own.
func (d *Device) DialMTU(asked int, remote netip.AddrPort) int {
	return min(cmp.Or(asked, d.cfg.MTU), d.PathMTU(remote))
}

// newCM creates QP1 and the connection manager of d.
func newCM(d *Device) (*cmhost.Host, error) {
	return cmhost.New(cmDevice{d}, d.cfg.CM, d.log)
}

// cmDevice is the device as its connection manager's host sees it
// (cmhost.Device).
type cmDevice struct{ *Device }

func (d cmDevice) SourceFor(dst netip.AddrPort) netip.AddrPort { return d.sourceFor(dst) }
func (d cmDevice) Now() qp.Time                                { return d.now() }
func (d cmDevice) At(at qp.Time, fn func(now qp.Time))         { d.timers.Add(at, wakeup{fn: fn}) }
func (d cmDevice) CountCM(counts *cm.Counts)                   { d.devc.AddCM(counts) }
func (d cmDevice) CountSendErr()                               { d.qpc.Add(verbs.SendErr, 1) }

func (d cmDevice) CreateQP(pd provider.PD, cfg provider.QPConfig, num uint32) (cmhost.QP, error) {
	q, err := pd.(*PD).createNumbered(cfg, num)
	if err != nil {
		return nil, err
	}
	return q, nil
}

func (d cmDevice) OwnQP(q provider.QP) (cmhost.QP, bool) {
	eq, ok := d.ownQP(q)
	if !ok {
		return nil, false
	}
	return eq, true
}

// The embedded QP as the connection manager's host drives it (cmhost.QP).

// OnError installs fn as the QP's error hook (nil removes it); fn runs
// at once if the QP is already in the error state.
func (q *QP) OnError(fn func(cause verbs.WCStatus)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.onError, q.errorSeen = fn, false
	q.reportErrorLocked()
}

// halt moves the QP to the error state, which flushes its work requests,
// with no error hook: nothing ends when it fails. A connection's Close
// halts its QP before it disconnects; a daemon whose process detaches
// halts the process's connections' QPs at once (hooks.QP.Halt) and closes
// them in the background.
func (q *QP) halt() {
	q.OnError(nil)
	q.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
}

// OnFirstRequest has fn called, with mu held, when the QP's responder
// takes its first request from now on, and then cleared (nil clears it):
// the connection manager waits for it, or the RTU, to establish an
// accepted connection.
func (q *QP) OnFirstRequest(fn func()) {
	q.mu.Lock()
	q.commEstPSN = q.qp.Status().ExpectedPSN
	q.commEst = fn
	q.mu.Unlock()
}
