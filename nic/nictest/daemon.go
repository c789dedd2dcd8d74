package nictest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
)

// Daemon is a softnic daemon in the test's process: an embedded device
// served to attached processes on a unix socket, as softnic serve does.
// A device attached to it (Attach) reaches it through the socket and
// shared memory only, as another process's would.
type Daemon struct {
	// Dev is the daemon's own device, which sends and receives the
	// packets of every device attached to it.
	Dev    *nic.Device
	Server *attachd.Server
	// Socket is the path of its control socket (nic.Config.Attach).
	Socket string
	// Client is a device attached to it.
	Client *nic.Device
	// Faults are the faults of the packets the daemon sends, its
	// clients' included.
	Faults *Faults
	// Recorder has every packet the daemon's device sent or received,
	// under the name "daemon".
	Recorder *Recorder
	// Seed is the seed it was made with (see Options.Seed).
	Seed    uint64
	closers closers
}

// MustHaveAttach skips t, saying why, unless attach mode works here
// (nic.AttachSupported: Linux, built without the softnic_portable tag). A
// test that opens an attached device, starts an attach server or sets
// SOFTNIC_SOCKET calls it first, since off Linux those fail with
// nic.ErrNotSupported; NewDaemon and NewPair with Options.Attached call it.
func MustHaveAttach(t testing.TB) {
	t.Helper()
	if err := nic.AttachSupported(); err != nil {
		t.Skipf("attach mode is not supported here: %v", err)
	}
}

// NewDaemon starts a daemon with opts.Config and attaches a client to it
// (Daemon.Client). It logs the seed, checks for leaks (unless
// Options.NoLeakCheck) and closes both when the test ends. Where attach
// mode is not supported (nic.AttachSupported) it skips the test.
func NewDaemon(t testing.TB, opts *Options) *Daemon {
	t.Helper()
	MustHaveAttach(t)
	return inTest(t, opts, StartDaemon, func(d *Daemon) (uint64, func()) { return d.Seed, d.Close })
}

// StartDaemon is NewDaemon for a caller that closes the daemon itself
// (Close).
func StartDaemon(opts *Options) (*Daemon, error) {
	o := optionsOrZero(opts)
	seed, err := o.seed()
	if err != nil {
		return nil, err
	}
	var c closers
	d, err := o.daemon(&c, "daemon", NewRecorder(o.RecordLimit), seed)
	if err == nil {
		d.Client, err = d.attach(&c)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	d.closers = c
	return d, nil
}

// Close detaches the daemon's clients and closes it.
func (d *Daemon) Close() { d.closers.close(); d.closers = nil }

// daemon starts a daemon whose packets rec records under name.
func (o *Options) daemon(c *closers, name string, rec *Recorder, seed uint64) (*Daemon, error) {
	dir, err := os.MkdirTemp("", "nictest")
	if err != nil {
		return nil, err
	}
	c.add(func() { os.RemoveAll(dir) })
	d := &Daemon{Recorder: rec, Seed: seed, Socket: filepath.Join(dir, "softnic.sock")}
	if d.Dev, d.Faults, err = o.open(c, name, rec, seed); err != nil {
		return nil, err
	}
	d.Server = attachd.NewServer(d.Dev, attachd.Config{})
	l, err := net.Listen("unix", d.Socket)
	if err != nil {
		d.Server.Close()
		return nil, err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		d.Server.Serve(l)
	}()
	c.add(func() { // before the device's Close, added earlier
		l.Close()
		<-served
		d.Server.Close()
	})
	return d, nil
}

// Attach attaches another device to the daemon, closed when the test
// ends.
func (d *Daemon) Attach(t testing.TB) *nic.Device {
	t.Helper()
	var c closers
	dev, err := d.attach(&c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return dev
}

func (d *Daemon) attach(c *closers) (*nic.Device, error) {
	dev, err := nic.Open(nic.Config{Attach: d.Socket})
	if err != nil {
		return nil, fmt.Errorf("nictest: attach to the daemon: %w", err)
	}
	c.add(func() { dev.Close() })
	return dev, nil
}
