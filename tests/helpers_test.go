package tests

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/nictest"
)

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

const allAccess = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic

// mode says how a test's two devices are opened: each embedded, or
// attached to a daemon of its own (in this process, reached through its
// socket and shared memory only).
type mode struct {
	name string
	a, b func(testing.TB, nic.Config) *nic.Device
}

var modes = []mode{
	{"embedded", nictest.OpenDevice, nictest.OpenDevice},
	{"attached", attachedDevice, attachedDevice},
	{"attached-embedded", attachedDevice, nictest.OpenDevice},
	{"attached-busy-polling", attachedToBusyPollerHere, nictest.OpenDevice},
}

// attachedToBusyPollerHere is attachedDevice with a daemon that
// busy-polls (Config.BusyPoll).
func attachedToBusyPollerHere(t testing.TB, cfg nic.Config) *nic.Device {
	cfg.BusyPoll = 50 * time.Microsecond
	return attachedDevice(t, cfg)
}

// forEachMode runs test once per mode.
func forEachMode(t *testing.T, test func(*testing.T, mode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { test(t, m) })
	}
}

// link is one connected RC QP pair between two devices, with a CQ on each
// side.
type link = nicbench.Link

func connectPair(t testing.TB, da, db *nic.Device, pa, pb *nic.PD, opts nic.ConnectOptions, depth int) link {
	t.Helper()
	l, err := nicbench.Connect(da, db, pa, pb, opts, depth)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startDaemon opens a device with cfg and serves it to attached processes
// on a unix socket, as softnic serve does; it returns the socket's path.
func startDaemon(t testing.TB, cfg nic.Config) (string, *nic.Device) {
	t.Helper()
	nictest.MustHaveAttach(t)
	cfg.Embed = true
	dev := nictest.OpenDevice(t, cfg)
	srv := attachd.NewServer(dev, attachd.Config{})
	path := filepath.Join(t.TempDir(), "softnic.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	t.Cleanup(func() { // before the device's Close, registered earlier
		l.Close()
		<-served
		srv.Close()
	})
	return path, dev
}

// attachedDevice starts a daemon with cfg and attaches to it.
func attachedDevice(t testing.TB, cfg nic.Config) *nic.Device {
	t.Helper()
	path, _ := startDaemon(t, cfg)
	d, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// envDaemon is set, to a socket path, in the daemon processes the
// benchmarks start (TestAttachDaemon); envDaemonBusyPoll to its
// Config.BusyPoll, if any.
const (
	envDaemon         = "SOFTNIC_TEST_DAEMON"
	envDaemonBusyPoll = "SOFTNIC_TEST_DAEMON_BUSY_POLL"
)

// TestAttachDaemon is not a test of its own: it is the body of a daemon
// process (this test binary run again with -test.run=^TestAttachDaemon$):
// a device on loopback served to attached processes at the socket
// SOFTNIC_TEST_DAEMON names, as softnic serve does, until stdin closes.
func TestAttachDaemon(t *testing.T) {
	path := os.Getenv(envDaemon)
	if path == "" {
		t.Skip("run by the attach benchmarks as a daemon process")
	}
	busyPoll, err := time.ParseDuration(cmp.Or(os.Getenv(envDaemonBusyPoll), "0"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := nic.Open(nic.Config{Addr: loopback, Embed: true, BusyPoll: busyPoll})
	if err != nil {
		t.Fatal(err)
	}
	srv := attachd.NewServer(dev, attachd.Config{})
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	l.Close()
	srv.Close()
	dev.Close()
}

// daemonProcess starts a daemon in a process of its own, busy-polling for
// busyPoll (Config.BusyPoll), and returns its socket.
func daemonProcess(tb testing.TB, busyPoll time.Duration) string {
	tb.Helper()
	nictest.MustHaveAttach(tb)
	path := filepath.Join(tb.TempDir(), "softnic.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttachDaemon$")
	cmd.Env = append(os.Environ(), envDaemon+"="+path, envDaemonBusyPoll+"="+busyPoll.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		tb.Fatalf("daemon process: %q, %v", line, err)
	}
	return path
}

// attachedElsewhere attaches to a daemon of its own in another process;
// cfg must be the zero Config (the daemon's is fixed).
func attachedElsewhere(tb testing.TB, cfg nic.Config) *nic.Device {
	return attachedToProcess(tb, cfg, 0)
}

// attachedToBusyPoller is attachedElsewhere with a daemon that
// busy-polls for 50 µs (softnic serve --busy-poll 50us).
func attachedToBusyPoller(tb testing.TB, cfg nic.Config) *nic.Device {
	return attachedToProcess(tb, cfg, 50*time.Microsecond)
}

func attachedToProcess(tb testing.TB, cfg nic.Config, busyPoll time.Duration) *nic.Device {
	tb.Helper()
	cfg.Attach = daemonProcess(tb, busyPoll)
	d, err := nic.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}
