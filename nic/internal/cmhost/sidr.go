package cmhost

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire/mad"
)

// Service ID resolution, rdma_cm's UDP port space (package cm's sidr.go):
// UD listeners, whose requests AcceptUD answers, and Resolve.

// ListenUD is provider.Device's ListenUD. Its requests are answered with
// AcceptUD (or Reject); Accept refuses them.
func (h *Host) ListenUD(port uint16, ps mad.PortSpace, backlog int, held bool) (provider.Listener, uint16, error) {
	l, err := h.listen(ps, port, backlog, held, (*cm.Engine).ListenUD)
	if err != nil {
		return nil, 0, err
	}
	return &Listener{h: h, l: l}, l.port, nil
}

// AcceptUD answers a resolution with the UD QP q of this device, whose
// Q_Key is qkey.
func (er *Request) AcceptUD(q provider.QP, qkey uint32, private []byte) error {
	h := er.h
	if _, ok := h.dev.OwnQP(q); !ok || q.Type() != verbs.UD {
		return fmt.Errorf("softnic: accept %v: a resolution is answered with a UD QP of its device: %w", er.id.peer, mr.ErrInvalid)
	}
	var err error
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		err = e.AcceptUD(now, er.id.comm, q.Num(), qkey, private, out)
	})
	if err != nil {
		return fmt.Errorf("softnic: accept %v: %w", er.id.peer, err)
	}
	h.log.Debug("cm: resolved for a peer", slog.Any("peer", er.id.peer), slog.Any("port", er.id.port), slog.Any("qpn", q.Num()))
	return nil
}

// Resolve is provider.Device's Resolve: it sends a SIDR_REQ and waits for
// the SIDR_REP (or the retries' end, or ctx's).
func (h *Host) Resolve(ctx context.Context, remote netip.AddrPort, port uint16, o *provider.ResolveOptions) (provider.Resolution, error) {
	p := cm.ResolveParams{
		Peer: remote, Src: h.dev.SourceFor(remote).Addr().Unmap(), Port: port, Private: o.PrivateData,
		CMTimeout: o.CMTimeout, CMRetries: o.CMRetries, PortSpace: o.PortSpace,
	}
	fail := func(err error) (provider.Resolution, error) {
		return provider.Resolution{}, fmt.Errorf("softnic: resolve %v port %d: %w", remote, port, err)
	}
	var id *cmID
	var err error
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		var comm *cm.ID
		if comm, err = e.Resolve(now, &p, out); err == nil {
			id = newCMID(comm)
		}
	})
	if err != nil {
		return fail(err)
	}
	var res cmResult
	select {
	case res = <-id.result:
	case <-ctx.Done():
		h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Abort(now, id.comm, out) })
		return fail(ctx.Err())
	case <-h.closing:
		res.err = cm.ErrClosed
	}
	if res.err == cm.ErrClosed {
		return fail(cm.ErrClosed)
	}
	if res.err != nil {
		return provider.Resolution{}, res.err
	}
	h.log.Debug("cm: resolved", slog.Any("peer", remote), slog.Any("port", port), slog.Any("qpn", res.sidr.QPN))
	return provider.Resolution{QPN: res.sidr.QPN, QKey: res.sidr.QKey, Private: slices.Clone(res.sidr.PrivateData[:])}, nil
}
