package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"syscall"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// The device of the tools that stand in for rdma-core's (perftest and
// rping): one RoCEv2 device on a concrete local address, so that every
// datagram leaves from the address the ICRC was computed with, accepting
// Linux rxe's numbered IPv4 datagrams.

// addMTUFlag defines a command's --mtu, a size (so "4k" is 4096) with
// the default def; checkMTUFlag checks it.
func addMTUFlag(fs *flag.FlagSet, def int, usage string) *sizeFlag {
	f := &sizeFlag{val: def}
	fs.Var(f, "mtu", usage)
	return f
}

// checkMTUFlag checks a tool's --mtu: 0 (not given) or a RoCE MTU.
func checkMTUFlag(mtu int) error {
	if _, ok := wire.MTUFromBytes(mtu); !ok && mtu != 0 {
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", mtu)
	}
	return nil
}

// toolMTU returns the path MTU a tool's device on local offers: want if
// given (checked by checkMTUFlag), else what the interface of local
// carries, as rxe derives it (nic.LocalMTU).
func toolMTU(local netip.Addr, want int) (int, error) {
	if want != 0 {
		return want, nil
	}
	return nic.LocalMTU(local)
}

// toolDeviceConfig describes the device of a tool.
type toolDeviceConfig struct {
	addr netip.AddrPort
	mtu  int
	pcap string // capture every packet sent and received to this file
	// onReceive, if set, is called after the device has handled each
	// packet it receives (on the device's reader goroutine: keep it quick).
	onReceive func()
}

// toolDevice is an open device and its capture, if any.
type toolDevice struct {
	*nic.Device
	capture   *capture
	closeOnce sync.Once
	closeErr  error
}

// openToolDevice opens the device: RecoverIPID is on, since the peer may
// be Linux rxe (see nic.Config.RecoverIPID).
func openToolDevice(c toolDeviceConfig) (*toolDevice, error) {
	td := &toolDevice{}
	cfg := nic.Config{Addr: c.addr, MTU: c.mtu, RecoverIPID: true}
	var trace func(*nic.TracePacket)
	if c.pcap != "" {
		var err error
		if td.capture, err = createCapture(c.pcap); err != nil {
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		trace = td.capture.TraceBoth()
	}
	switch {
	case c.onReceive != nil:
		cfg.Trace = func(p *nic.TracePacket) {
			if trace != nil {
				trace(p)
			}
			if p.Dir == nic.Received {
				c.onReceive()
			}
		}
	case trace != nil:
		cfg.Trace = trace
	}
	dev, err := nic.Open(cfg)
	if err != nil {
		if td.capture != nil {
			td.capture.Close()
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("UDP %v is in use (Linux rxe holds port 4791 where it runs: pick another --port): %w", c.addr, err)
		}
		return nil, err
	}
	td.Device = dev
	return td, nil
}

// Close closes the device, then its capture; again, it does nothing.
func (td *toolDevice) Close() error {
	td.closeOnce.Do(func() {
		td.closeErr = td.Device.Close()
		if td.capture != nil {
			td.closeErr = errors.Join(td.closeErr, td.capture.Close())
		}
	})
	return td.closeErr
}

// printCounters writes the device's counters on one line, "counters:
// name=value ...", every counter in the device's order. Called once the
// device is closed, it counts every packet the device ever sent.
func printCounters(w io.Writer, dev *nic.Device) error {
	var b strings.Builder
	b.WriteString("counters:")
	for _, c := range dev.Counters() {
		fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
