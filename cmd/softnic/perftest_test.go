package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/wire"
)

// freePorts returns a UDP port free on 127.0.0.1 and 127.0.0.2 and a TCP
// port free on 127.0.0.1.
func freePorts(t *testing.T) (udp, tcp uint16) {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
		c.Close()
		if err != nil {
			continue
		}
		c2.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return uint16(port), uint16(l.Addr().(*net.TCPAddr).Port)
	}
	t.Fatal("no UDP port free on both 127.0.0.1 and 127.0.0.2")
	return 0, 0
}

// runPair runs a server and a client command line and returns both
// outputs. The client starts once ready reports the server listening
// (nil: at once), and again while the client finds nothing listening.
func runPair(t *testing.T, server, client []string, ready func() bool) (srv, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg         sync.WaitGroup
		sout, serr bytes.Buffer
		scode      int
		cout, cerr bytes.Buffer
		ccode      int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode = runContext(ctx, server, &sout, &serr)
	}()
	for ready != nil && !ready() && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	for retries := 0; ; retries++ {
		cout.Reset()
		cerr.Reset()
		ccode = runContext(ctx, client, &cout, &cerr)
		if ccode == 0 || !notListening(cerr.String()) || retries == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ccode != 0 {
		cancel()
	}
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", scode, sout.String(), serr.String(), ccode, cout.String(), cerr.String())
	}
	return sout.String(), cout.String()
}

// notListening reports whether a client's error output says that its
// server was not listening yet: its out-of-band TCP port refused, or its
// connection manager answered that nothing listens on its port, as between
// the server's device opening its UDP port (which ready waits for) and
// its listen.
func notListening(errOut string) bool {
	return strings.Contains(errOut, "connection refused") || strings.Contains(errOut, "(nothing listens on port")
}

// udpBound reports whether something holds UDP port on 127.0.0.1. It
// reads /proc/net/udp: a probe that bound the port itself would hold it
// for a moment, and a server binding it then fails with EADDRINUSE.
// Without /proc/net/udp (not Linux) it probes so all the same.
func udpBound(port uint16) func() bool {
	local := []byte(fmt.Sprintf(": 0100007F:%04X ", port))
	return func() bool {
		if b, err := os.ReadFile("/proc/net/udp"); err == nil {
			return bytes.Contains(b, local)
		}
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)})
		if err != nil {
			return true
		}
		c.Close()
		return false
	}
}

// counters parses the "counters:" line of an output.
func counters(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "counters: ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			name, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("counter %q", f)
			}
			m[name] = n
		}
		return m
	}
	t.Fatalf("no counters line in:\n%s", out)
	return nil
}

// TestPerftestLoopback runs every test between two softnic perftests on
// loopback: both exit 0 (their data checks pass), print the same result
// row, and neither device dropped a packet as malformed or for its ICRC.
// (A send_bw client may run ahead of the server's reposting of receive
// buffers and take an RNR NAK, after which it resends: that is flow
// control, so retransmissions are not counted against a run here.)
func TestPerftestLoopback(t *testing.T) {
	bwRow := regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([0-9.]+) +([0-9.]+)\s+([0-9.]+) *$`)
	latRow := regexp.MustCompile(`(?m)^ (\d+) +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+) *$`)
	tests := []struct {
		name string
		args []string
		size string // in the result row
	}{
		{"write_bw one packet", []string{"write_bw", "-s", "1024", "-n", "300"}, "1024"},
		{"write_bw many packets", []string{"write_bw", "-s", "4099", "-n", "200"}, "4099"},
		{"read_bw", []string{"read_bw", "-s", "3000", "-n", "200"}, "3000"},
		{"read_bw small", []string{"read_bw", "-s", "64", "-n", "300"}, "64"},
		{"write_bw polled, a completion per message", []string{"write_bw", "-s", "9000", "-n", "200", "--poll"}, "9000"},
		{"read_bw polled, a completion per 7", []string{"read_bw", "-s", "1500", "-n", "100", "-Q", "7", "--poll"}, "1500"},
		{"send_bw", []string{"send_bw", "-s", "2500", "-n", "1000"}, "2500"},
		{"atomic_bw fetch-add", []string{"atomic_bw", "-n", "300"}, "8"},
		{"atomic_bw compare-swap", []string{"atomic_bw", "-A", "CMP_AND_SWAP", "-n", "100"}, "8"},
		{"write_lat", []string{"write_lat", "-s", "2053", "-n", "300"}, "2053"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			udp, tcp := freePorts(t)
			common := append([]string{"perftest"}, tt.args...)
			common = append(common, "--mtu", "1024", "--port", fmt.Sprint(udp), "--oob-port", fmt.Sprint(tcp), "--counters")
			srv, cli := runPair(t,
				append(append([]string{}, common...), "--bind", "127.0.0.1"),
				append(append([]string{}, common...), "--bind", "127.0.0.2", "127.0.0.1"), nil)
			row := bwRow
			if tt.args[0] == "write_lat" {
				row = latRow
			}
			for side, out := range map[string]string{"server": srv, "client": cli} {
				m := row.FindStringSubmatch(out)
				if m == nil || m[1] != tt.size {
					t.Fatalf("%s prints no result row for %s bytes:\n%s", side, tt.size, out)
				}
				c := counters(t, out)
				for _, name := range []string{"bad_icrc", "icrc_ipid_recovered", "malformed", "unknown_qp"} {
					if c[name] != 0 {
						t.Errorf("%s: %s = %d:\n%s", side, name, c[name], out)
					}
				}
			}
			if tt.args[0] != "send_bw" && tt.args[0] != "write_lat" && bwRow.FindString(srv) != bwRow.FindString(cli) {
				t.Errorf("the server prints the client's results %q as %q", bwRow.FindString(cli), bwRow.FindString(srv))
			}
		})
	}
}

// TestPerftestTrafficClass: --tclass is the IP traffic class of the QP's
// packets (perftest's): the client's capture shows its WRITEs and the
// server's ACKs with the class each side asked for (0 where the platform
// carries none).
func TestPerftestTrafficClass(t *testing.T) {
	writes, acks := uint8(184), uint8(40)
	c, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Features().TrafficClass {
		writes, acks = 0, 0
	}
	c.Close()
	udp, tcp := freePorts(t)
	pcap := filepath.Join(t.TempDir(), "client.pcap")
	common := []string{"perftest", "write_bw", "-s", "4096", "-n", "100", "--mtu", "1024", "--port", fmt.Sprint(udp), "--oob-port", fmt.Sprint(tcp)}
	runPair(t,
		append(append([]string{}, common...), "--bind", "127.0.0.1", "--tclass", "40"),
		append(append([]string{}, common...), "--bind", "127.0.0.2", "--tclass", "184", "--pcap", pcap, "127.0.0.1"), nil)
	r := openCapture(t, pcap)
	classes := map[string]map[uint8]int{}
	for {
		fr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fr.RoCE || len(fr.Payload) < wire.BTHSize {
			continue
		}
		op := wire.BTH(fr.Payload).OpCode()
		kind := "ack"
		if op.IsWrite() {
			kind = "write"
		} else if !op.IsAck() {
			continue
		}
		if classes[kind] == nil {
			classes[kind] = map[uint8]int{}
		}
		classes[kind][fr.Env.TrafficClass]++
	}
	if w, a := classes["write"], classes["ack"]; len(w) != 1 || w[writes] == 0 || len(a) != 1 || a[acks] == 0 {
		t.Errorf("the client's capture: WRITEs by class %v, ACKs %v; want %d and %d alone", w, a, writes, acks)
	}
}

// TestPerftestAttached runs write_lat and write_bw between two softnic
// perftests attached to one daemon (SOFTNIC_SOCKET), as
// cmd/libsoftnic/bench.sh compares them with perftest through libsoftnic:
// write_lat's sides learn of the peer's WRITEs by watching their target
// (nic.MR.Word), which the daemon writes. Both exit 0 with a result row,
// and the traffic went through the daemon.
func TestPerftestAttached(t *testing.T) {
	d := startDaemon(t)
	t.Setenv(nic.EnvSocket, d.control)
	_, port, err := net.SplitHostPort(d.ready.Listen)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		row  *regexp.Regexp
		sent uint64 // at least: write_lat's WRITEs of both sides, write_bw's two packets a message
	}{
		{[]string{"write_lat", "-s", "8", "-n", "100"}, regexp.MustCompile(`(?m)^ 8 +100 +([0-9.]+\s+){6}[0-9.]+ *$`), 200},
		{[]string{"write_bw", "-s", "4099", "-n", "200"}, regexp.MustCompile(`(?m)^ 4099 +200 +([0-9.]+\s+){2}[0-9.]+ *$`), 400},
	}
	for _, tt := range tests {
		args := tt.args
		t.Run(args[0], func(t *testing.T) {
			_, tcp := freePorts(t)
			common := append(append([]string{"perftest"}, args...), "--port", port, "--oob-port", fmt.Sprint(tcp))
			before := sentPackets(t, d)
			srv, cli := runPair(t, common, append(append([]string{}, common...), "127.0.0.1"), nil)
			for side, out := range map[string]string{"server": srv, "client": cli} {
				if !tt.row.MatchString(out) {
					t.Errorf("%s prints no result row:\n%s", side, out)
				}
			}
			if got := sentPackets(t, d) - before; got < tt.sent {
				t.Errorf("the daemon sent %d packets during the test, want at least %d", got, tt.sent)
			}
		})
	}
}

// sentPackets returns the packets the daemon d has sent (softnic stat).
func sentPackets(t *testing.T, d *testDaemon) uint64 {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := runContext(context.Background(), []string{"stat", "--control", d.control, "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("stat: exit %d: %s", code, errOut.String())
	}
	var stat map[string]uint64
	if err := json.Unmarshal(out.Bytes(), &stat); err != nil {
		t.Fatalf("stat --json: %v: %s", err, out.String())
	}
	return stat["sent_pkts"]
}

// TestPerftestAttachedDaemonStops: a daemon that stops in the middle of
// an attached write_lat ends both sides with an error, the one waiting for
// its peer's WRITE (spinning on its target, which no one writes any more)
// as well as the one waiting for its completion, instead of spinning on.
func TestPerftestAttachedDaemonStops(t *testing.T) {
	d := startDaemon(t)
	t.Setenv(nic.EnvSocket, d.control)
	_, port, err := net.SplitHostPort(d.ready.Listen)
	if err != nil {
		t.Fatal(err)
	}
	_, tcp := freePorts(t)
	args := []string{"perftest", "write_lat", "-s", "8", "-n", "4000000", "--port", port, "--oob-port", fmt.Sprint(tcp)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		code   int
		stderr string
	}
	results := make(chan result, 2)
	// side runs args until its out-of-band connection finds the server
	// listening, as runPair does.
	side := func(args []string) {
		for {
			var out, errOut bytes.Buffer
			code := runContext(ctx, args, &out, &errOut)
			if code == 0 || !notListening(errOut.String()) || ctx.Err() != nil {
				results <- result{code, errOut.String()}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	go side(args)
	go side(append(append([]string{}, args...), "127.0.0.1"))
	for sentPackets(t, d) < 1000 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	d.stop()
	for range 2 {
		select {
		case r := <-results:
			// The daemon flushes the QPs of its programs as it stops, then
			// ends their sessions.
			if r.code == 0 || !strings.Contains(r.stderr, "device closed") && !strings.Contains(r.stderr, "WR_FLUSH_ERR") {
				t.Errorf("exit %d, want an error saying the WRITE was flushed or the device closed: %s", r.code, r.stderr)
			}
		case <-ctx.Done():
			t.Fatal("a side still runs 60 s after the daemon stopped")
		}
	}
}

// TestPerftestPeerErrors: a peer that breaks off the exchange or sends
// nonsense ends the test with an error that says where.
func TestPerftestPeerErrors(t *testing.T) {
	const versionSize = 16 // the first message of the exchange: the version, padded with NULs
	tests := []struct {
		name string
		peer func(c net.Conn)
		want string
	}{
		{"closes without answering", func(c net.Conn) {
			// Read what the client sent first: closing with it unread
			// would reset the connection rather than end it.
			io.ReadFull(c, make([]byte, versionSize))
		}, "version: the peer closed the connection while 16 bytes were expected"},
		{"old version", func(c net.Conn) {
			b := make([]byte, versionSize)
			c.Read(b)
			c.Write(append([]byte("5.0"), make([]byte, versionSize-3)...))
		}, "softnic speaks the exchange of 5.33"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				tt.peer(c)
			}()
			udp, _ := freePorts(t)
			port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
			code, _, stderr := runCmd("perftest", "write_bw", "--bind", "127.0.0.1", "--port", fmt.Sprint(udp), "--oob-port", port, "127.0.0.1")
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr, tt.want)
			}
		})
	}
}

func TestPerftestBadUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"no test", []string{}, "missing argument"},
		{"unknown test", []string{"ping_bw"}, `unknown test "ping_bw"`},
		{"two hosts", []string{"write_bw", "a", "b"}, "too many arguments: b"},
		{"bad bind", []string{"write_bw", "--bind", "host"}, `--bind "host": want an IP address`},
		{"atomic operation", []string{"atomic_bw", "-A", "SWAP"}, `-A "SWAP": want FETCH_AND_ADD or CMP_AND_SWAP`},
		{"atomic size", []string{"atomic_bw", "-s", "64"}, "atomic_bw moves 8 bytes"},
		{"size word", []string{"write_bw", "-s", "big"}, `-s: size "big"`},
		{"size too big", []string{"write_bw", "-s", "128m"}, "-s 134217728: at most 64m"},
		{"iterations", []string{"write_bw", "-n", "-1"}, "-n -1: want 1 to"},
		{"latency of one", []string{"write_lat", "-n", "1"}, "write_lat: at least 2"},
		{"port", []string{"write_bw", "--port", "0"}, "--port 0"},
		{"timeout", []string{"write_bw", "-u", "32"}, "-u 32: want a timeout exponent from 0 to 31"},
		{"traffic class", []string{"write_bw", "--tclass", "256"}, "--tclass 256: want a traffic class from 0 to 255"},
		{"oob port", []string{"write_bw", "--oob-port", "70000"}, "--oob-port 70000"},
		{"mtu", []string{"write_bw", "--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"perftest"}, tt.args...)...)
			first, _, _ := strings.Cut(stderr, "\n")
			if code != 2 || stdout != "" || !strings.HasPrefix(first, "softnic perftest: ") || !strings.Contains(first, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, first, tt.stderr)
			}
		})
	}
}
