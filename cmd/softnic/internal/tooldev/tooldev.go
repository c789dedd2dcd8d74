// Package tooldev opens the device of the tools that stand in for
// rdma-core's (softnic perftest and rping): one RoCEv2 device on a
// concrete local address, so that every datagram leaves from the address
// the ICRC was computed with, accepting Linux rxe's numbered IPv4
// datagrams, with its capture if asked for; and how the tools report
// data that did not arrive as sent (ErrDataCheck).
package tooldev

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"syscall"

	"github.com/softnic/softnic/cmd/softnic/internal/capture"
	"github.com/softnic/softnic/nic"
)

// MTU returns the path MTU a tool's device on local offers: want if
// given (a RoCE MTU, checked with the tool's flags), else what the
// interface of local carries, as rxe derives it (nic.LocalMTU).
func MTU(local netip.Addr, want int) (int, error) {
	if want != 0 {
		return want, nil
	}
	return nic.LocalMTU(local)
}

// Config describes the device of a tool.
type Config struct {
	Addr netip.AddrPort
	MTU  int
	Pcap string // capture every packet sent and received to this file
	// OnReceive, if set, is called after the device has handled each
	// packet it receives (on the device's reader goroutine: keep it quick).
	OnReceive func()
}

// Device is an open device and its capture, if any.
type Device struct {
	*nic.Device
	capture   *capture.File
	closeOnce sync.Once
	closeErr  error
}

// Open opens the device: RecoverIPID is on, since the peer may
// be Linux rxe (see nic.Config.RecoverIPID).
func Open(c Config) (*Device, error) {
	td := &Device{}
	cfg := nic.Config{Addr: c.Addr, MTU: c.MTU, RecoverIPID: true}
	var trace func(*nic.TracePacket)
	if c.Pcap != "" {
		var err error
		if td.capture, err = capture.Create(c.Pcap); err != nil {
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		trace = td.capture.TraceBoth()
	}
	switch {
	case c.OnReceive != nil:
		cfg.Trace = func(p *nic.TracePacket) {
			if trace != nil {
				trace(p)
			}
			if p.Dir == nic.Received {
				c.OnReceive()
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
			return nil, fmt.Errorf("UDP %v is in use (Linux rxe holds port 4791 where it runs: pick another --port): %w", c.Addr, err)
		}
		return nil, err
	}
	td.Device = dev
	return td, nil
}

// Close closes the device, then its capture; again, it does nothing.
func (td *Device) Close() error {
	td.closeOnce.Do(func() {
		td.closeErr = td.Device.Close()
		if td.capture != nil {
			td.closeErr = errors.Join(td.closeErr, td.capture.Close())
		}
	})
	return td.closeErr
}

// PrintCounters writes the device's counters on one line, "counters:
// name=value ...", every counter in the device's order. Called once the
// device is closed, it counts every packet the device ever sent.
func PrintCounters(w io.Writer, dev *nic.Device) error {
	var b strings.Builder
	b.WriteString("counters:")
	for _, c := range dev.Counters() {
		fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// ErrDataCheck marks a check of the data a tool moved that failed.
var ErrDataCheck = errors.New("data check failed")

// FirstDifference returns the index of the first byte where a and b
// differ, or -1; b is at least as long as a.
func FirstDifference(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
