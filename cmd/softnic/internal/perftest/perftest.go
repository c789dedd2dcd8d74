// Package perftest runs one of perftest's tests (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat) against perftest itself or
// another softnic perftest, for softnic perftest: the same out-of-band
// exchange on TCP port 18515 (oob.go), the same traffic on an RC QP
// connected with the exchanged QPNs and PSNs (run.go), checks of the data
// the test moved (check.go), and perftest's result table (report.go).
package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/exit"
	"github.com/softnic/softnic/wire"
)

// Test is one of the tests.
type Test uint8

const (
	WriteBW Test = iota + 1
	ReadBW
	SendBW
	AtomicBW
	WriteLat
)

var testNames = [...]string{
	WriteBW: "write_bw", ReadBW: "read_bw", SendBW: "send_bw",
	AtomicBW: "atomic_bw", WriteLat: "write_lat",
}

func (t Test) String() string {
	if int(t) < len(testNames) && testNames[t] != "" {
		return testNames[t]
	}
	return fmt.Sprintf("Test(%d)", uint8(t))
}

// ParseTest returns the test named s (write_bw …), as perftest's tools
// are named without their ib_ prefix.
func ParseTest(s string) (Test, bool) {
	for t, name := range testNames {
		if name != "" && name == s {
			return Test(t), true
		}
	}
	return 0, false
}

// isBW reports the bandwidth tests.
func (t Test) isBW() bool { return t != WriteLat }

// reportsResults reports the tests whose client hands its results to the
// server after the traffic: the RDMA WRITE, READ and ATOMIC bandwidth
// tests, whose server only answers.
func (t Test) reportsResults() bool {
	return t == WriteBW || t == ReadBW || t == AtomicBW
}

// barriersBefore is the number of key-record exchanges that follow the
// first one before the traffic starts: perftest's hand-shakes after the
// QP is connected, around the printing of the remote address and, for
// SEND, after the receive buffers are posted.
func (t Test) barriersBefore() int {
	if t.reportsResults() {
		return 2
	}
	return 3
}

// AtomicOp is the operation of atomic_bw (-A).
type AtomicOp uint8

const (
	FetchAndAdd AtomicOp = iota
	CmpAndSwap
)

func (a AtomicOp) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// The defaults of perftest 4.5.
const (
	DefaultBWSize       = 65536
	DefaultLatSize      = 2
	DefaultBWIters      = 5000
	DefaultLatIters     = 1000
	defaultTxDepth      = 128 // send WRs outstanding in a bandwidth test
	defaultRxDepth      = 512 // receive WRs a send_bw server keeps posted
	defaultCQModeration = 100 // a bandwidth test's client asks for every 100th completion
	// perftest asks for every completion of messages larger than this,
	// unless -Q says otherwise.
	cqModerationSizeLimit = 8192
	DefaultQPTimeout      = 14 // 4.096 µs × 2^14 ≈ 67 ms
	AtomicSize            = 8
	// MaxSize and MaxIters bound what a test holds in memory: the
	// message buffers and two timestamps per iteration.
	MaxSize  = 64 << 20
	MaxIters = 1 << 22
)

// Config is one side's test: softnic perftest's command line.
type Config struct {
	Test    Test
	Host    string     // the server to connect to; empty for the server
	Bind    netip.Addr // the local address; the invalid Addr for any
	Size    int
	Iters   int
	Atomic  AtomicOp
	MTU     int   // 0: what the interface carries
	Timeout uint8 // the QP's local ACK timeout exponent
	// TrafficClass is the IP traffic class of the QP's packets (perftest's
	// --tclass).
	TrafficClass uint8
	Port         uint16 // the RoCEv2 UDP port of both sides
	OOBPort      uint16 // perftest's TCP port
	Counters     bool
	Pcap         string
	// CQMod is how often a bandwidth test's client asks for a completion
	// (-Q): every CQMod-th message and the last. 0 is perftest's default:
	// every 100th, every one for messages larger than 8 KiB.
	CQMod int
	// Poll has a bandwidth test's client poll its CQ in a loop, as
	// perftest's does (an attached CQ's Poll that finds nothing gives up
	// the CPU), instead of sleeping in CQ.Wait.
	Poll bool
}

// cqModeration is the client's CQ moderation: cfg.CQMod or perftest's
// default for the message size, at most depth.
func (c *Config) cqModeration(depth int) int {
	m := c.CQMod
	if m == 0 {
		m = defaultCQModeration
		if c.Size > cqModerationSizeLimit {
			m = 1
		}
	}
	return min(m, depth)
}

func (c *Config) server() bool { return c.Host == "" }

// Run connects the out-of-band exchange, then runs the test.
func Run(ctx context.Context, cfg *Config, stdout io.Writer) error {
	conn, err := oobConnect(ctx, cfg)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	s := &perfSession{ctx: ctx, cfg: cfg, oob: &oobConn{conn: conn, client: !cfg.server()}, out: stdout}
	err = s.run()
	if err != nil && ctx.Err() != nil {
		// Interrupted: the closed connection is a consequence, not the cause.
		err = fmt.Errorf("%v: %w", ctx.Err(), err)
	}
	return err
}

// oobConnect returns the out-of-band connection: the server accepts one
// client on its TCP port, the client connects to the server's.
func oobConnect(ctx context.Context, cfg *Config) (net.Conn, error) {
	port := strconv.Itoa(int(cfg.OOBPort))
	if !cfg.server() {
		d := net.Dialer{}
		if cfg.Bind.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: cfg.Bind.AsSlice()}
		}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(cfg.Host, port))
		if err != nil {
			return nil, fmt.Errorf("connecting to the perftest server: %w", err)
		}
		return conn, nil
	}
	host := ""
	if cfg.Bind.IsValid() {
		host = cfg.Bind.String()
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, exit.Status(2, fmt.Errorf("listening for the perftest client: %w", err))
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	conn, err := l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("waiting for the perftest client: %w", err)
	}
	return conn, nil
}

// addrOf returns the IP address of a TCP connection's end.
func addrOf(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// peerAddr turns the GID of the peer's key record into the address of its
// RoCEv2 device: an IPv4-mapped GID is an IPv4 address (perftest -x 1 on
// Linux rxe); a link-local GID (GID index 0) needs an interface, which
// the record does not name.
func peerAddr(gid wire.GID, port uint16) (netip.AddrPort, error) {
	a := gid.Addr()
	if a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("the peer's GID %v is not a routable address: run perftest with the GID of its IP address (-x 1 on rxe)", a)
	}
	return netip.AddrPortFrom(a, port), nil
}

// oobTimeout bounds each step of the out-of-band exchange before the
// traffic; the steps after it wait as long as the peer's test runs.
const oobTimeout = 30 * time.Second
