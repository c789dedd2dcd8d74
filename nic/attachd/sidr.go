package attachd

import (
	"context"
	"encoding/json"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/wire/mad"
)

// Service ID resolution, rdma_cm's UDP port space, for attached
// processes: a UD listener is a hostedListener (its requests are taken
// with accept_request and refused with reject, as a listener's), answered
// with the process's own UD QP; resolve waits for the SIDR_REP.

func (s *session) listenUD(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ListenUDArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	return s.hostListener(a.Backlog, &hostedListener{ud: true, held: a.Held}, func(backlog int) (*nic.Listener, error) {
		return s.dev.ListenUD(a.Port, nic.ListenUDOptions{Backlog: backlog, PortSpace: mad.PortSpace(a.PortSpace), Held: a.Held})
	})
}

// acceptUD answers a resolution with the process's QP named a.QP, which
// Request.AcceptUD checks is a UD QP of the device.
func (s *session) acceptUD(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.AcceptUDArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := lookup[*hostedRequest](s, a.Request)
	if err != nil {
		return nil, nil, err
	}
	q, err := lookup[*hostedQP](s, a.QP)
	if err != nil {
		return nil, nil, err
	}
	if err := r.r.AcceptUD(q.pub, a.Private); err != nil {
		return nil, nil, err
	}
	s.remove(a.Request)
	return nil, nil, nil
}

func (s *session) resolve(ctx context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ResolveArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	p, err := s.dev.Resolve(ctx, a.Remote, a.Port, nic.ResolveOptions{
		PrivateData: a.Private, CMTimeout: a.CMTimeout, CMRetries: a.CMRetries, PortSpace: mad.PortSpace(a.PortSpace),
	})
	if err != nil {
		return nil, nil, err
	}
	return attachproto.ResolveResult{QPN: p.QPN, QKey: p.QKey, Private: p.PrivateData}, nil, nil
}
