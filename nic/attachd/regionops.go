package attachd

import (
	"context"
	"encoding/json"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
)

// reregMR re-registers a region of the process in place (rereg_mr): the
// region and, with mr.ReregPD, the new PD must be the process's own, and
// the table makes the checks of a registration (mr.Table.Rereg). Memory
// used by this region alone moves with it, so that the old PD can be
// deallocated; the process's charges do not change.
func (s *session) reregMR(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ReregMRArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	m, err := lookup[*hostedMR](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	to := m.r.PD()
	if a.Flags&mr.ReregPD != 0 {
		pd, err := lookup[*nic.PD](s, a.PD)
		if err != nil {
			return nil, nil, err
		}
		to = pd.Handle()
	}
	if err := s.dev.Memory().Rereg(m.r, a.Flags, to, a.Access); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	alone := m.buf.refs == 1
	s.mu.Unlock()
	if alone && m.buf.arena.PD() != to {
		return nil, nil, s.dev.Memory().MoveArena(m.buf.arena, to)
	}
	return nil, nil, nil
}

// prefetchMR makes pages of an on-demand paging region of the process
// resident (prefetch_mr; mr.Table.Prefetch, which refuses a region without
// ON_DEMAND and a range outside the region).
func (s *session) prefetchMR(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.PrefetchMRArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	m, err := lookup[*hostedMR](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	return nil, nil, s.dev.Memory().Prefetch(m.r, a.Addr, a.Len)
}
