package attached

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/wire/mad"
)

// Service ID resolution, rdma_cm's UDP port space, on the daemon's
// connection manager: a UD listener is a listener of the daemon's whose
// requests are answered with the process's UD QP (named by its handle);
// Resolve waits for the daemon's SIDR_REP as Dial waits for its REP.

// ListenUD listens on port of the UDP port space at the daemon.
func (a *attachment) ListenUD(port uint16, ps mad.PortSpace, backlog int, held bool) (provider.Listener, uint16, error) {
	var r attachproto.ListenResult
	args := attachproto.ListenUDArgs{Port: port, Backlog: backlog, PortSpace: uint16(ps), Held: held}
	if _, err := a.call(context.Background(), attachproto.OpListenUD, args, nil, &r); err != nil {
		return nil, 0, err
	}
	return &attachedListener{a: a, h: r.H, port: r.Port, closed: make(chan struct{})}, r.Port, nil
}

// AcceptUD answers a request of a UD listener with q, a UD QP of this
// device, whose Q_Key the daemon reads itself.
func (ar *attachedRequest) AcceptUD(q provider.QP, _ uint32, private []byte) error {
	ar.answerMu.Lock()
	defer ar.answerMu.Unlock()
	if err := ar.answeredLocked(); err != nil {
		return err
	}
	h := daemonHandle(q)
	if h == 0 {
		return fmt.Errorf("softnic: accept %v: a resolution is answered with a UD QP of its device: %w", ar.peer, mr.ErrInvalid)
	}
	_, err := ar.a.call(context.Background(), attachproto.OpAcceptUD, attachproto.AcceptUDArgs{Request: ar.h, QP: h, Private: private}, nil, nil)
	ar.acceptedUD = err == nil
	return err
}

// Resolve asks the daemon to resolve port of the UDP port space at remote.
func (a *attachment) Resolve(ctx context.Context, remote netip.AddrPort, port uint16, o *provider.ResolveOptions) (provider.Resolution, error) {
	var r attachproto.ResolveResult
	args := attachproto.ResolveArgs{
		Remote: remote, Port: port, Private: o.PrivateData, CMTimeout: o.CMTimeout, CMRetries: o.CMRetries,
		PortSpace: uint16(o.PortSpace),
	}
	if _, err := a.call(ctx, attachproto.OpResolve, args, nil, &r); err != nil {
		if ctx.Err() != nil {
			return provider.Resolution{}, fmt.Errorf("softnic: resolve %v port %d: %w", remote, port, ctx.Err())
		}
		return provider.Resolution{}, err
	}
	return provider.Resolution{QPN: r.QPN, QKey: r.QKey, Private: r.Private}, nil
}
