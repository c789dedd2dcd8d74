package nic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/softnic/softnic/nic/internal/attached"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/nic/udp"
)

// attachPath returns the control socket the configuration attaches to, or
// "" for an embedded NIC (see Config.Attach).
func (c *Config) attachPath() (string, error) {
	switch {
	case c.Attach != "" && c.Embed:
		return "", fmt.Errorf("softnic: Config.Attach and Config.Embed both set: %w", ErrInvalid)
	case c.Attach != "":
		if f := c.embeddedOnly(); f != "" {
			return "", fmt.Errorf("softnic: Config.%s applies to an embedded NIC; a device attached to %s uses its daemon's: %w", f, c.Attach, ErrInvalid)
		}
		return c.Attach, nil
	case c.Embed:
		return "", nil
	}
	return os.Getenv(EnvSocket), nil
}

// embeddedOnly names the first field set that only an embedded NIC uses.
func (c *Config) embeddedOnly() string {
	switch {
	case c.Addr.IsValid():
		return "Addr"
	case c.MTU != 0:
		return "MTU"
	case c.Faults != nil:
		return "Faults"
	case c.SendHook != nil:
		return "SendHook"
	case c.Trace != nil:
		return "Trace"
	case c.UDP != udp.Options{}:
		return "UDP"
	case c.MaxQPs != 0:
		return "MaxQPs"
	case c.RecoverIPID:
		return "RecoverIPID"
	case c.BusyPoll != 0:
		return "BusyPoll"
	case c.CM != CMLimits{}:
		return "CM"
	case c.Access != AccessLimits{}:
		return "Access"
	}
	return ""
}

// AttachSupported returns nil where attach mode works (Linux), and
// elsewhere an error wrapping ErrNotSupported that names what is missing:
// what Open with Config.Attach returns there. Tests that attach skip when
// it is not nil.
func AttachSupported() error { return shm.Supported() }

// attach opens a device attached to the daemon whose control socket is at
// path: its provider is the session with the daemon (package
// nic/internal/attached) over a connection to a daemon the process trusts
// (DialControl).
func attach(cfg Config, path string) (*Device, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	fail := func(err error) (*Device, error) {
		return nil, fmt.Errorf("softnic: attach to %s: %w", path, err)
	}
	if err := AttachSupported(); err != nil {
		return fail(err)
	}
	c, err := DialControl(context.Background(), path)
	if errors.Is(err, ErrAccess) || errors.Is(err, ErrInvalid) {
		return fail(err)
	}
	if err != nil {
		return fail(fmt.Errorf("is softnic serve running with --control %s? %w", path, err))
	}
	d := &Device{log: cfg.Logger}
	d.reportEvents(&cfg)
	spin := cfg.WaitSpin
	if spin == 0 {
		spin = DefaultWaitSpin
	}
	if d.prov, err = attached.Open(c, path, cfg.Logger, spin, upcalls{d}); err != nil {
		return fail(err)
	}
	d.startEvents()
	return d, nil
}
