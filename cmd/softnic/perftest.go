package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/exit"
	"github.com/softnic/softnic/wire"
)

// softnic perftest runs one of perftest's tests (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat) against perftest itself or
// another softnic perftest: the same out-of-band exchange on TCP port
// 18515 (perftest_oob.go), the same traffic on an RC QP connected with
// the exchanged QPNs and PSNs (perftest_run.go), and perftest's result
// table (perftest_report.go).

// perfTest is one of the tests.
type perfTest uint8

const (
	testWriteBW perfTest = iota + 1
	testReadBW
	testSendBW
	testAtomicBW
	testWriteLat
)

var perfTestNames = [...]string{
	testWriteBW: "write_bw", testReadBW: "read_bw", testSendBW: "send_bw",
	testAtomicBW: "atomic_bw", testWriteLat: "write_lat",
}

func (t perfTest) String() string {
	if int(t) < len(perfTestNames) && perfTestNames[t] != "" {
		return perfTestNames[t]
	}
	return fmt.Sprintf("perfTest(%d)", uint8(t))
}

func parsePerfTest(s string) (perfTest, bool) {
	for t, name := range perfTestNames {
		if name != "" && name == s {
			return perfTest(t), true
		}
	}
	return 0, false
}

// isBW reports the bandwidth tests.
func (t perfTest) isBW() bool { return t != testWriteLat }

// reportsResults reports the tests whose client hands its results to the
// server after the traffic: the RDMA WRITE, READ and ATOMIC bandwidth
// tests, whose server only answers.
func (t perfTest) reportsResults() bool {
	return t == testWriteBW || t == testReadBW || t == testAtomicBW
}

// barriersBefore is the number of key-record exchanges that follow the
// first one before the traffic starts: perftest's hand-shakes after the
// QP is connected, around the printing of the remote address and, for
// SEND, after the receive buffers are posted.
func (t perfTest) barriersBefore() int {
	if t.reportsResults() {
		return 2
	}
	return 3
}

// atomicOp is the operation of atomic_bw (-A).
type atomicOp uint8

const (
	fetchAndAdd atomicOp = iota
	cmpAndSwap
)

func (a atomicOp) String() string {
	if a == cmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// The defaults of perftest 4.5.
const (
	defaultBWSize       = 65536
	defaultLatSize      = 2
	defaultBWIters      = 5000
	defaultLatIters     = 1000
	defaultTxDepth      = 128 // send WRs outstanding in a bandwidth test
	defaultRxDepth      = 512 // receive WRs a send_bw server keeps posted
	defaultCQModeration = 100 // a bandwidth test's client asks for every 100th completion
	defaultQPTimeout    = 14  // 4.096 µs × 2^14 ≈ 67 ms
	atomicSize          = 8
	// maxPerfSize and maxPerfIters bound what a test holds in memory: the
	// message buffers and two timestamps per iteration.
	maxPerfSize  = 64 << 20
	maxPerfIters = 1 << 22
)

// perftestConfig is softnic perftest's command line.
type perftestConfig struct {
	test     perfTest
	host     string     // the server to connect to; empty for the server
	bind     netip.Addr // the local address; the invalid Addr for any
	size     int
	iters    int
	atomic   atomicOp
	mtu      int    // 0: what the interface carries
	timeout  uint8  // the QP's local ACK timeout exponent
	port     uint16 // the RoCEv2 UDP port of both sides
	oobPort  uint16 // perftest's TCP port
	counters bool
	pcap     string
}

func (c *perftestConfig) server() bool { return c.host == "" }

func definePerftest(fs *flag.FlagSet) func(*invocation) error {
	bind := fs.String("bind", "", "the local IP `ADDR` for TCP and RoCEv2 (default: the server's any address, the client's route to the server)")
	size := fs.String("s", "", "message `SIZE` in bytes, such as 4096, 64k or 1MiB (default 65536 for the bandwidth tests, 2 for write_lat; atomics are 8)")
	iters := fs.Int("n", 0, "`ITERS` messages (default 5000 for the bandwidth tests, 1000 for write_lat)")
	atomic := fs.String("A", "FETCH_AND_ADD", "the atomic_bw `OPERATION`: FETCH_AND_ADD or CMP_AND_SWAP")
	timeout := fs.Uint("u", defaultQPTimeout, "the QP's ACK `TIMEOUT` exponent: 4.096 µs × 2^TIMEOUT before it sends again (14: 67 ms)")
	mtu := addMTUFlag(fs, 0, "the path `MTU` offered: 256 to 4096 (default: what the interface carries, as rxe derives it: 1024 on 1500-byte Ethernet)")
	port := fs.Uint("port", uint(wire.UDPPort), "the RoCEv2 UDP `PORT` of the device, and where the peer's is (Linux rxe's is 4791)")
	oobPort := fs.Uint("oob-port", defaultOOBPort, "perftest's TCP `PORT` for the out-of-band exchange")
	counters := fs.Bool("counters", false, "print the device's counters after the test")
	pcap := fs.String("pcap", "", "capture every packet sent and received to `FILE`")
	return func(inv *invocation) error {
		if err := inv.parse(1, 2); err != nil {
			return err
		}
		cfg := perftestConfig{mtu: mtu.val, counters: *counters, pcap: *pcap, iters: *iters}
		var ok bool
		if cfg.test, ok = parsePerfTest(inv.args[0]); !ok {
			return usagef("unknown test %q: want write_bw, read_bw, send_bw, atomic_bw or write_lat", inv.args[0])
		}
		if len(inv.args) == 2 {
			cfg.host = inv.args[1]
		}
		if *bind != "" {
			a, err := netip.ParseAddr(*bind)
			if err != nil {
				return usagef("--bind %q: want an IP address", *bind)
			}
			cfg.bind = a.Unmap()
		}
		switch *atomic {
		case "FETCH_AND_ADD":
			cfg.atomic = fetchAndAdd
		case "CMP_AND_SWAP":
			cfg.atomic = cmpAndSwap
		default:
			return usagef("-A %q: want FETCH_AND_ADD or CMP_AND_SWAP", *atomic)
		}
		if *timeout > 31 {
			return usagef("-u %d: want a timeout exponent from 0 to 31", *timeout)
		}
		cfg.timeout = uint8(*timeout)
		if *port == 0 || *port > 0xFFFF || *oobPort == 0 || *oobPort > 0xFFFF {
			return usagef("--port %d, --oob-port %d: want ports from 1 to 65535", *port, *oobPort)
		}
		cfg.port, cfg.oobPort = uint16(*port), uint16(*oobPort)
		if err := checkMTUFlag(cfg.mtu); err != nil {
			return err
		}
		if err := cfg.setSizes(*size); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(inv.ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runPerftest(ctx, &cfg, inv.stdout)
	}
}

// setSizes fills in the message size and iteration count, with perftest's
// defaults for the test.
func (c *perftestConfig) setSizes(size string) error {
	switch {
	case c.test == testAtomicBW:
		if size != "" && size != "8" {
			return usagef("-s %s: atomic_bw moves 8 bytes per operation", size)
		}
		c.size = atomicSize
	case size == "":
		c.size = defaultBWSize
		if c.test == testWriteLat {
			c.size = defaultLatSize
		}
	default:
		n, err := parseSize(size)
		if err != nil {
			return usagef("-s: %v", err)
		}
		c.size = n
	}
	if c.size > maxPerfSize {
		return usagef("-s %d: at most %s", c.size, formatSize(maxPerfSize))
	}
	if c.iters == 0 {
		c.iters = defaultBWIters
		if c.test == testWriteLat {
			c.iters = defaultLatIters
		}
	}
	if c.iters < 1 || c.iters > maxPerfIters || c.test == testWriteLat && c.iters < 2 {
		return usagef("-n %d: want 1 to %d iterations (write_lat: at least 2)", c.iters, maxPerfIters)
	}
	return nil
}

// runPerftest connects the out-of-band exchange, then runs the test.
func runPerftest(ctx context.Context, cfg *perftestConfig, stdout io.Writer) error {
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
func oobConnect(ctx context.Context, cfg *perftestConfig) (net.Conn, error) {
	port := strconv.Itoa(int(cfg.oobPort))
	if !cfg.server() {
		d := net.Dialer{}
		if cfg.bind.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: cfg.bind.AsSlice()}
		}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(cfg.host, port))
		if err != nil {
			return nil, fmt.Errorf("connecting to the perftest server: %w", err)
		}
		return conn, nil
	}
	host := ""
	if cfg.bind.IsValid() {
		host = cfg.bind.String()
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

// errDataCheck marks a check of the data a test moved that failed.
var errDataCheck = errors.New("data check failed")

// oobTimeout bounds each step of the out-of-band exchange before the
// traffic; the steps after it wait as long as the peer's test runs.
const oobTimeout = 30 * time.Second
