package attachd

import (
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire/mad"
	"log/slog"
)

// The hooks the embedded device exports to the daemon (package hooks),
// typed: package nic, which this package imports, set them at its init.
var (
	deviceLogger = hooks.DeviceLogger.(func(*nic.Device) *slog.Logger)
	embedded     = hooks.Embedded.(func(*nic.Device) (hooks.Device, bool))
	cqOf         = hooks.CQ.(func(*nic.CQ) *qp.CQ)
	srqOf        = hooks.SRQ.(func(*nic.SRQ) *qp.SRQ)
	setQueues    = hooks.SetQueues.(func(*nic.QPConfig, hooks.Queues))
	acceptWith   = hooks.AcceptWith.(func(*nic.Request, nic.AcceptOptions, nic.QPConfig) (*nic.Conn, error))
	abandon      = hooks.Abandon.(func(*nic.Request, mad.RejectReason))
)
