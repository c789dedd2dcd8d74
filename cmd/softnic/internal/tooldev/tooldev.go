// Package tooldev opens the device of the tools that stand in for
// rdma-core's (softnic perftest and rping): one RoCEv2 device on a
// concrete local address, so that every datagram leaves from the address
// the ICRC was computed with, accepting Linux rxe's numbered IPv4
// datagrams, with its capture if asked for; and how the tools report
// data that did not arrive as sent (ErrDataCheck) and a completion that
// failed (CompletionError).
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
	"github.com/softnic/softnic/verbs"
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

// CompletionError is an operation that completed with an error status.
// Its message explains the status in words for the operation at hand.
type CompletionError struct {
	Status verbs.WCStatus
	Op     verbs.WROpcode
	RKey   uint32
	Addr   uint64
	N      int // bytes
	Peer   netip.AddrPort
}

func (e *CompletionError) Error() string {
	unit := "bytes"
	if e.N == 1 {
		unit = "byte"
	}
	var why string
	switch e.Status {
	case verbs.RemAccessErr:
		why = fmt.Sprintf("rkey %#x is not valid for %d %s at %#x on %v", e.RKey, e.N, unit, e.Addr, e.Peer)
		if e.Op == verbs.WRSend {
			why = fmt.Sprintf("%v refused the SEND's access to its memory", e.Peer)
		}
	case verbs.RemInvReqErr:
		why = fmt.Sprintf("%v refused the %v as invalid (a SEND longer than its receive buffer, an operation its QP does not allow, or a misaligned atomic)", e.Peer, e.Op)
	case verbs.RemOpErr:
		why = fmt.Sprintf("%v could not carry out the %v", e.Peer, e.Op)
	case verbs.RetryExcErr:
		why = fmt.Sprintf("%v stopped answering the %v", e.Peer, e.Op)
	case verbs.RNRRetryExcErr:
		why = fmt.Sprintf("%v had no receive buffer posted for the %v", e.Peer, e.Op)
	case verbs.WRFlushErr:
		why = fmt.Sprintf("the connection to %v ended before the %v completed", e.Peer, e.Op)
	default:
		why = fmt.Sprintf("the %v of %d %s on %v failed", e.Op, e.N, unit, e.Peer)
	}
	return fmt.Sprintf("%s: %s (%v)", e.Status.Text(), why, e.Status)
}
