package nic

import (
	"log/slog"

	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire/mad"
)

// The hooks the embedded device exports to a daemon that serves it to
// attached processes (package nic/attachd, through package hooks): the
// device calls the daemon's hooks.Queues and hooks.BusyPoller as it runs,
// and keeps nothing of the daemon's but them. The daemon reaches the
// embedded provider's objects through the optional interfaces below, which
// an attached device's lack.

// transportCQ and transportSRQ are the embedded provider's CQ and SRQ: the
// queues of package qp behind them.
type (
	transportCQ  interface{ TransportCQ() *qp.CQ }
	transportSRQ interface{ TransportSRQ() *qp.SRQ }
)

// hostedRequest is the embedded provider's connection request, which the
// daemon accepts for an attached process with a QP of the process's
// (hooks.AcceptWith), or rejects after a failure of its own.
type hostedRequest interface {
	AcceptWith(opts *provider.AcceptOptions, cfg provider.QPConfig) (provider.Connection, error)
	Abandon(reason mad.RejectReason)
}

func init() {
	hooks.DeviceLogger = func(d *Device) *slog.Logger { return d.log }
	hooks.Embedded = func(d *Device) (hooks.Device, bool) {
		e, ok := d.prov.(hooks.Device)
		return e, ok
	}
	hooks.CQ = func(c *CQ) *qp.CQ {
		if t, ok := c.prov.(transportCQ); ok {
			return t.TransportCQ()
		}
		return nil
	}
	hooks.SRQ = func(s *SRQ) *qp.SRQ {
		if t, ok := s.prov.(transportSRQ); ok {
			return t.TransportSRQ()
		}
		return nil
	}
	hooks.SetQueues = func(cfg *QPConfig, q hooks.Queues) { cfg.queues = q }
	hooks.AcceptWith = func(r *Request, opts AcceptOptions, cfg QPConfig) (*Conn, error) {
		er, ok := r.prov.(hostedRequest)
		if !ok {
			return nil, unsupported("accepting with a QP configuration of its own")
		}
		c, err := er.AcceptWith(opts.provider(), cfg.provider())
		if err != nil {
			return nil, err
		}
		return r.l.dev.newConn(&c), nil
	}
	hooks.Abandon = func(r *Request, reason mad.RejectReason) {
		if er, ok := r.prov.(hostedRequest); ok {
			er.Abandon(reason)
		}
	}
}
