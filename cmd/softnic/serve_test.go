package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// syncBuffer is a bytes.Buffer for a daemon's stderr, written by its
// goroutines while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// testDaemon is softnic serve running in the test's process.
type testDaemon struct {
	ready   daemon.ReadyLine
	control string
	stderr  *syncBuffer
	stop    context.CancelFunc
	exit    chan int
}

// startDaemon runs serve on a free loopback port with a control socket in
// a temporary directory and the extra arguments, and waits for its ready
// line. The test's cleanup stops it.
func startDaemon(t *testing.T, args ...string) *testDaemon {
	t.Helper()
	nictest.MustHaveAttach(t)
	nictest.CheckLeaks(t)
	d := &testDaemon{control: filepath.Join(t.TempDir(), "ctl.sock"), stderr: &syncBuffer{}, exit: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	pr, pw := io.Pipe()
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--control", d.control}, args...)
	go func() {
		d.exit <- runContext(ctx, args, pw, d.stderr)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-d.exit
	})
	line, err := bufio.NewReader(pr).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no ready line: %v\nstderr:\n%s", err, d.stderr)
	}
	if err := json.Unmarshal(line, &d.ready); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return d
}

// shutdown stops the daemon and returns its exit status.
func (d *testDaemon) shutdown(t *testing.T) int {
	t.Helper()
	d.stop()
	select {
	case code := <-d.exit:
		d.exit <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not stop; stderr:\n%s", d.stderr)
		return -1
	}
}

// op runs a one-shot command against the daemon's region and returns its
// exit status, stdout and stderr.
func (d *testDaemon) op(region int, cmd string, args ...string) (int, string, string) {
	r := d.ready.Regions[region]
	return runCmd(append([]string{cmd, "--peer", d.ready.Listen, "--cm-port", fmt.Sprint(d.ready.CMPort),
		"--rkey", fmt.Sprint(r.RKey), "--timeout", "10s"}, args...)...)
}

func (d *testDaemon) addr(region, off int) string {
	return fmt.Sprintf("%#x", d.ready.Regions[region].Addr+uint64(off))
}

// inspect runs info, stat, mr or qp with --json and decodes the answer.
func (d *testDaemon) inspect(t *testing.T, cmd string, v any) {
	t.Helper()
	code, stdout, stderr := runCmd(cmd, "--control", d.control, "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("%s: exit status %d, stderr %q", cmd, code, stderr)
	}
	if strings.Count(stdout, "\n") != 1 {
		t.Errorf("%s --json printed %q, want one line", cmd, stdout)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("%s --json: %v\n%s", cmd, err, stdout)
	}
}

func (d *testDaemon) counter(t *testing.T, name string) uint64 {
	t.Helper()
	var m map[string]uint64
	d.inspect(t, "stat", &m)
	v, ok := m[name]
	if !ok {
		t.Fatalf("stat has no counter %q", name)
	}
	return v
}

// counterReaches waits until counter name equals want (or 5 s pass) and
// returns its value: the daemon counts on its own goroutines, after what
// the test did may already have completed (a SEND received, a process
// detached).
func (d *testDaemon) counterReaches(t *testing.T, name string, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := d.counter(t, name)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestServeReadyLine(t *testing.T) {
	d := startDaemon(t, "--region", "mem:64k", "--region", "ro:4k:r", "--region", "all:1m:awr")
	if ap := d.ready.Listen; !strings.HasPrefix(ap, "127.0.0.1:") || strings.HasSuffix(ap, ":0") {
		t.Errorf("listen %q, want 127.0.0.1 and the port picked", ap)
	}
	if d.ready.Control != d.control || d.ready.CMPort != defaultCMPort {
		t.Errorf("control %q cm_port %d", d.ready.Control, d.ready.CMPort)
	}
	want := []struct {
		name   string
		len    int
		access string
	}{{"mem", 64 << 10, "rw"}, {"ro", 4 << 10, "r"}, {"all", 1 << 20, "rwa"}}
	if len(d.ready.Regions) != len(want) {
		t.Fatalf("regions %+v", d.ready.Regions)
	}
	for i, w := range want {
		r := d.ready.Regions[i]
		if r.Name != w.name || r.Len != w.len || r.Access != w.access || r.Addr == 0 || r.RKey == 0 {
			t.Errorf("region %d: %+v, want %s of %d bytes with access %s", i, r, w.name, w.len, w.access)
		}
	}
	if code := d.shutdown(t); code != 0 {
		t.Errorf("exit status %d after the signal, want 0; stderr:\n%s", code, d.stderr)
	}
	if _, err := os.Stat(d.control); !os.IsNotExist(err) {
		t.Errorf("the control socket is left behind: %v", err)
	}
}

func TestServeDefaultRegion(t *testing.T) {
	d := startDaemon(t)
	if r := d.ready.Regions; len(r) != 1 || r[0].Name != "mem" || r[0].Len != 1<<20 || r[0].Access != "rwa" {
		t.Errorf("regions %+v, want mem:1m:rwa", r)
	}
}

// TestServeOperations drives the daemon with every one-shot command and
// checks the memory through the commands themselves.
func TestServeOperations(t *testing.T) {
	d := startDaemon(t, "--region", "mem:64k:rwa")
	steps := []struct {
		name   string
		cmd    string
		args   []string
		stdout string
	}{
		{"write", "write", []string{"--addr", d.addr(0, 100), "--data", "hello, softnic"},
			fmt.Sprintf("wrote 14 bytes at %s (rkey %#x) on %s\n", d.addr(0, 100), d.ready.Regions[0].RKey, d.ready.Listen)},
		{"read", "read", []string{"--addr", d.addr(0, 100), "--len", "14"}, "hello, softnic"},
		{"read a part", "read", []string{"--addr", d.addr(0, 107), "--len", "0x7"}, "softnic"},
		{"fadd", "fadd", []string{"--addr", d.addr(0, 4096), "--add", "5"}, "0\n"},
		{"fadd again", "fadd", []string{"--addr", d.addr(0, 4096), "--add", "0x10"}, "5\n"},
		{"fadd negative", "fadd", []string{"--addr", d.addr(0, 4096), "--add", "-1"}, "21\n"},
		{"cswap that misses", "cswap", []string{"--addr", d.addr(0, 4096), "--compare", "7", "--swap", "99"}, "20\n"},
		{"cswap that swaps", "cswap", []string{"--addr", d.addr(0, 4096), "--compare", "20", "--swap", "99"}, "20\n"},
		{"fadd after the swap", "fadd", []string{"--addr", d.addr(0, 4096), "--add", "0"}, "99\n"},
		{"the word in memory", "read", []string{"--addr", d.addr(0, 4096), "--len", "8"}, string(binary.NativeEndian.AppendUint64(nil, 99))},
	}
	for _, s := range steps {
		code, stdout, stderr := d.op(0, s.cmd, s.args...)
		if code != 0 || stderr != "" || stdout != s.stdout {
			t.Errorf("%s: exit status %d, stdout %q, stderr %q; want 0 and %q", s.name, code, stdout, stderr, s.stdout)
		}
	}

	// --file and --out.
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	data := bytes.Repeat([]byte{0, 1, 2, 0xff}, 5000) // several packets
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := d.op(0, "write", "--addr", d.addr(0, 8192), "--file", in); code != 0 {
		t.Fatalf("write --file: %d %s", code, stderr)
	}
	code, stdout, stderr := d.op(0, "read", "--addr", d.addr(0, 8192), "--len", fmt.Sprint(len(data)), "--out", out)
	if code != 0 || !strings.HasPrefix(stdout, "read 20000 bytes at ") || !strings.HasSuffix(stdout, " into "+out+"\n") {
		t.Fatalf("read --out: %d %q %q", code, stdout, stderr)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read --out wrote %d bytes (%v) that differ from the %d written", len(got), err, len(data))
	}
	// Sizes as people write them.
	for _, n := range []string{"1KiB", "4k", "0x800"} {
		want, _ := flagval.ParseSize(n)
		code, stdout, stderr = d.op(0, "read", "--addr", d.addr(0, 8192), "--len", n)
		if code != 0 || stdout != string(data[:want]) {
			t.Errorf("read --len %s: exit status %d, %d bytes, stderr %q; want the first %d bytes written", n, code, len(stdout), stderr, want)
		}
	}

	// SEND: the daemon logs and counts it.
	code, stdout, _ = runCmd("send", "--peer", d.ready.Listen, "--data", "a message for the log")
	if code != 0 || stdout != "sent 21 bytes to "+d.ready.Listen+"\n" {
		t.Errorf("send: %d %q", code, stdout)
	}
	if n := d.counterReaches(t, "sends_received", 1); n != 1 {
		t.Errorf("sends_received %d, want 1", n)
	}
	if n := d.counterReaches(t, "send_bytes_received", 21); n != 21 {
		t.Errorf("send_bytes_received %d, want 21", n)
	}
	if log := d.stderr.String(); !strings.Contains(log, "SEND received") || !strings.Contains(log, `"data": "a message for the log"`) {
		t.Errorf("the SEND is not logged:\n%s", log)
	}
	// Every operation was its own connection, now closed. The daemon
	// counts a connection on the goroutine that answered its request,
	// once Accept has returned, which may be after the client is done.
	if n := d.counterReaches(t, "connections_accepted", uint64(len(steps)+6)); n != uint64(len(steps)+6) {
		t.Errorf("connections_accepted %d, want %d", n, len(steps)+6)
	}
	// At least the requests (one per operation, five for the 20000-byte
	// write) and their responses (five for the 20000-byte read), besides
	// the connection manager's.
	if sent, rcvd := d.counter(t, "sent_pkts"), d.counter(t, "rcvd_pkts"); sent < 17 || rcvd < 17 {
		t.Errorf("sent_pkts %d, rcvd_pkts %d; want at least 17 each", sent, rcvd)
	}
}

// TestServeErrors: failed operations exit with status 1 and explain the
// completion status.
func TestServeErrors(t *testing.T) {
	d := startDaemon(t, "--region", "mem:64k", "--region", "ro:4k:r")
	mem, ro := d.ready.Regions[0], d.ready.Regions[1]
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"unknown rkey", []string{"read", "--rkey", fmt.Sprint(mem.RKey + 0x10000), "--addr", "0", "--len", "8"},
			fmt.Sprintf("remote access error: rkey %#x is not valid for 8 bytes at 0x0 on %s (REM_ACCESS_ERR)", mem.RKey+0x10000, d.ready.Listen)},
		{"beyond the region", []string{"write", "--addr", fmt.Sprint(mem.Addr + 65530), "--data", "too long"},
			fmt.Sprintf("remote access error: rkey %#x is not valid for 8 bytes at %#x on %s (REM_ACCESS_ERR)", mem.RKey, mem.Addr+65530, d.ready.Listen)},
		{"write to a read-only region", []string{"write", "--rkey", fmt.Sprint(ro.RKey), "--addr", fmt.Sprint(ro.Addr), "--data", "x"},
			fmt.Sprintf("remote access error: rkey %#x is not valid for 1 byte at %#x on %s (REM_ACCESS_ERR)", ro.RKey, ro.Addr, d.ready.Listen)},
		{"atomic without atomic access", []string{"fadd", "--addr", fmt.Sprint(mem.Addr), "--add", "1"},
			fmt.Sprintf("remote access error: rkey %#x is not valid for 8 bytes at %#x on %s (REM_ACCESS_ERR)", mem.RKey, mem.Addr, d.ready.Listen)},
		{"a SEND longer than the receive buffers", []string{"send", "--data", strings.Repeat("x", daemon.RecvBufferSize+1)},
			fmt.Sprintf("remote invalid request error: %s refused the SEND as invalid", d.ready.Listen)},
		{"no listener on the CM port", []string{"read", "--cm-port", "7472", "--addr", "0", "--len", "8"},
			fmt.Sprintf("%s has no listener on rdma_cm port 7472 (see --cm-port)", d.ready.Listen)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{tt.args[0], "--peer", d.ready.Listen, "--timeout", "10s"}
			if tt.args[0] != "send" {
				args = append(args, "--rkey", fmt.Sprint(mem.RKey))
			}
			args = append(args, tt.args[1:]...)
			code, stdout, stderr := runCmd(args...)
			if code != 1 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if want := "softnic " + tt.args[0] + ": " + tt.stderr; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q, want one line starting %q", stderr, want)
			}
		})
	}
	if n := d.counter(t, "rejected_unknown_key"); n != 1 {
		t.Errorf("rejected_unknown_key %d, want 1", n)
	}
	if n := d.counter(t, "rejected_access_not_granted"); n != 2 {
		t.Errorf("rejected_access_not_granted %d, want 2", n)
	}
	if n := d.counter(t, "rejected_out_of_range"); n != 1 {
		t.Errorf("rejected_out_of_range %d, want 1", n)
	}
}

// TestServeInspect checks the control commands, as tables and as JSON,
// with one connection held open.
func TestServeInspect(t *testing.T) {
	d := startDaemon(t, "--region", "mem:64k:rwa", "--faults", "seed=1", "--busy-poll", "100us")
	conn, local := dialDaemon(t, d)

	// The daemon counts the connection once its Accept has returned, a
	// moment after the Dial did (on the RTU).
	var info control.Info
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d.inspect(t, "info", &info)
		if info.Connections == 1 || time.Now().After(deadline) {
			break
		}
	}
	if info.Listen != d.ready.Listen || info.CMPort != d.ready.CMPort || info.Control != d.control || info.PID != os.Getpid() ||
		info.Regions != 1 || info.Connections != 1 || info.MTU != 4096 || info.Faults != "seed=1" || info.BusyPoll != "100µs" || info.RecvBuffers != daemon.RecvBuffers {
		t.Errorf("info %+v", info)
	}

	var regions []control.RegionRow
	d.inspect(t, "mr", &regions)
	byName := map[string]control.RegionRow{}
	for _, r := range regions {
		byName[r.Name] = r
	}
	mem := d.ready.Regions[0]
	if r := byName["mem"]; r.RKey != mem.RKey || r.LKey != mem.RKey || r.Addr != mem.Addr || r.Len != uint64(mem.Len) ||
		r.Access != "rwa" || r.Kind != "arena" || r.ODP || r.Flags != "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC" || r.PID != os.Getpid() {
		t.Errorf("mem row %+v, ready line %+v", r, mem)
	}
	if r, ok := byName["(receive buffers)"]; !ok || r.Len != daemon.RecvBuffers*daemon.RecvBufferSize || r.Access != "-" {
		t.Errorf("receive buffer row %+v (listed: %v)", r, ok)
	}

	// Every QP of the device: QP1, the connection manager's, and the one
	// connection.
	var qps []control.QPRow
	d.inspect(t, "qp", &qps)
	if len(qps) != 2 {
		t.Fatalf("qp lists %+v, want QP1 and the one connection", qps)
	}
	if q := qps[0]; q.QPN != 1 || q.Type != "UD" || q.State != "RTS" || q.Peer != "-" || !q.Since.IsZero() || q.PID != os.Getpid() {
		t.Errorf("QP1 row %+v", q)
	}
	if q := qps[1]; q.State != "RTS" || q.Type != "RC" || q.PeerQPN != conn.QP().Num() || q.Peer != local.String() || q.MTU != 4096 ||
		q.PID != os.Getpid() || q.Since.IsZero() {
		t.Errorf("qp row %+v", q)
	}

	for _, c := range []struct {
		cmd  string
		want []string // each a line, as a regular expression
	}{
		{"info", []string{`listen \(UDP\) +` + regexp.QuoteMeta(d.ready.Listen), fmt.Sprintf(`rdma_cm port +%d`, defaultCMPort), `faults +seed=1`, `busy polling +100µs`, `connections +1`, `attached processes +0`}},
		{"stat", []string{`sent_pkts +\d+`, `bad_icrc +0`, `rejected_unknown_key +0`, `rejected_window_bound_to_another_qp +0`, `connections_active +1`}},
		{"mr", []string{`NAME +LKEY +RKEY +PD +ACCESS +ADDR +LEN +KIND +PID +ODP RESIDENCY`,
			fmt.Sprintf(`mem +%#x +%#x +\d+ +rwa +%#x +65536 +arena +%d +-`, mem.RKey, mem.RKey, mem.Addr, os.Getpid()),
			fmt.Sprintf(`\(receive buffers\) +0x[0-9a-f]+ +0x[0-9a-f]+ +\d+ +- +0x[0-9a-f]+ +4194304 +arena +%d +-`, os.Getpid())}},
		{"qp", []string{`QPN +TYPE +STATE +PEER +PEER QPN .* +PID`,
			fmt.Sprintf(`0x[0-9a-f]+ +RC +RTS +%s +%#x +4096 +0x[0-9a-f]{6} .* %d`, regexp.QuoteMeta(local.String()), conn.QP().Num(), os.Getpid())}},
	} {
		code, stdout, stderr := runCmd(c.cmd, "--control", d.control)
		if code != 0 || stderr != "" {
			t.Errorf("%s: exit status %d, stderr %q", c.cmd, code, stderr)
		}
		for _, w := range c.want {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(stdout) {
				t.Errorf("%s has no line matching %s:\n%s", c.cmd, w, stdout)
			}
		}
	}

	// The daemon disconnects the QP when it stops.
	if code := d.shutdown(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Error("the daemon's shutdown did not disconnect the client")
	}
}

// dialDaemon connects a QP of a device of the test's own to the daemon and
// leaves it connected until the test ends.
func dialDaemon(t *testing.T, d *testDaemon) (*nic.Conn, netip.AddrPort) {
	t.Helper()
	return dialDaemonFrom(t, d, nic.Config{})
}

// dialDaemonFrom is dialDaemon from a device opened with cfg (on a free
// loopback port).
func dialDaemonFrom(t *testing.T, d *testDaemon, cfg nic.Config) (*nic.Conn, netip.AddrPort) {
	t.Helper()
	c := dialDaemonClient(t, d, cfg)
	return c.conn, c.dev.Addr()
}

// dialDaemonCQ is dialDaemonFrom that also returns the QP's CQ.
func dialDaemonCQ(t *testing.T, d *testDaemon, cfg nic.Config) (*nic.Conn, *nic.CQ, netip.AddrPort) {
	t.Helper()
	c := dialDaemonClient(t, d, cfg)
	return c.conn, c.cq, c.dev.Addr()
}

// daemonClient is a connection of a device of the test's own to the
// daemon, with its PD and CQ.
type daemonClient struct {
	dev  *nic.Device
	pd   *nic.PD
	cq   *nic.CQ
	conn *nic.Conn
}

func dialDaemonClient(t *testing.T, d *testDaemon, cfg nic.Config) *daemonClient {
	t.Helper()
	c, err := openDaemonClient(cfg, d.ready.Listen, d.ready.CMPort)
	if c != nil {
		t.Cleanup(func() { c.dev.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openDaemonClient is dialDaemonClient without a test, for an attacker process,
// to the daemon at listen whose connection manager is at cmPort: closing
// the client's device ends it. The client's device is at cfg.Addr, or
// 127.0.0.1 when that is unset. The client is returned with an error once
// its device is open.
func openDaemonClient(cfg nic.Config, listen string, cmPort uint16) (*daemonClient, error) {
	if !cfg.Addr.IsValid() {
		cfg.Addr = netip.MustParseAddrPort("127.0.0.1:0")
	}
	dev, err := nic.Open(cfg)
	if err != nil {
		return nil, err
	}
	c := &daemonClient{dev: dev}
	if c.pd, err = dev.AllocPD(); err != nil {
		return c, err
	}
	if c.cq, err = dev.CreateCQ(16); err != nil {
		return c, err
	}
	if _, err := c.pd.RegMR(make([]byte, 64), mr.LocalWrite); err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peer, err := resolvePeer(ctx, listen)
	if err != nil {
		return c, err
	}
	if c.conn, err = dev.Dial(ctx, peer, cmPort, nic.DialOptions{PD: c.pd, QP: nic.QPConfig{SendCQ: c.cq}}); err != nil {
		return c, err
	}
	if st := c.conn.QP().Status().State; st != verbs.RTS {
		return c, fmt.Errorf("dialed QP in %v", st)
	}
	return c, nil
}

// TestServeFaults: --faults reaches the device. Half the READ responses
// the daemon sends are dropped; every READ still completes, the requester
// retransmitting after its ACK timeout.
func TestServeFaults(t *testing.T) {
	d := startDaemon(t, "--region", "mem:4k", "--faults", fmt.Sprintf("drop=0.5,seed=3,ops=%#x", uint8(wire.OpRCReadResponseOnly)))
	for i := range 6 {
		if code, stdout, stderr := d.op(0, "read", "--addr", d.addr(0, 8*i), "--len", "8"); code != 0 || len(stdout) != 8 {
			t.Fatalf("read %d: exit status %d, %d bytes, stderr %q", i, code, len(stdout), stderr)
		}
	}
	dropped, dup := d.counter(t, "fault_dropped"), d.counter(t, "duplicate_request")
	if dropped == 0 || dup < dropped {
		t.Errorf("fault_dropped %d, duplicate_request %d; want some, each drop answered by a retransmitted READ", dropped, dup)
	}
}

// TestServeStartErrors: a daemon that cannot start says why in one line
// and exits with status 2.
func TestServeStartErrors(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	running := startDaemon(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"UDP port in use", []string{"--listen", busy.LocalAddr().String(), "--control", filepath.Join(dir, "a.sock")},
			"UDP address " + busy.LocalAddr().String() + " is already in use"},
		{"control socket in use", []string{"--listen", "127.0.0.1:0", "--control", running.control},
			"control socket " + running.control + " is in use by another softnic serve"},
		{"control path not a socket", []string{"--listen", "127.0.0.1:0", "--control", file},
			"control socket " + file + ": the path exists and is not a socket"},
		{"control directory missing", []string{"--listen", "127.0.0.1:0", "--control", filepath.Join(dir, "no", "a.sock")},
			"control socket " + filepath.Join(dir, "no", "a.sock") + ": stat " + filepath.Join(dir, "no") + ": no such file or directory"},
		{"pcap directory missing", []string{"--listen", "127.0.0.1:0", "--control", filepath.Join(dir, "b.sock"), "--pcap", filepath.Join(dir, "no", "x.pcap")},
			"--pcap: open " + filepath.Join(dir, "no", "x.pcap") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(append([]string{"serve"}, tt.args...)...)
			if code != 2 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 2 and nothing", code, stdout)
			}
			if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); !strings.HasPrefix(lines[len(lines)-1], "softnic serve: "+tt.stderr) {
				t.Errorf("stderr %q, want its last line to start %q", stderr, "softnic serve: "+tt.stderr)
			}
		})
	}
	if _, err := os.Stat(running.control); err != nil {
		t.Errorf("the running daemon's control socket is gone: %v", err)
	}
	if code, _, stderr := runCmd("info", "--control", running.control); code != 0 {
		t.Errorf("the running daemon no longer answers: %s", stderr)
	}
}

// TestServeStaleControlSocket: a socket file left by a daemon that died is
// replaced.
func TestServeStaleControlSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	d := startDaemon(t, "--control", path)
	if d.ready.Control != path {
		t.Fatalf("control %q", d.ready.Control)
	}
	if code, _, stderr := runCmd("info", "--control", path); code != 0 {
		t.Errorf("info: %s", stderr)
	}
}

// TestServeStopsWithoutDREP: a peer that vanished never answers the DREP
// the stopping daemon sends it; the daemon waits its grace for it
// (--stop-grace, 2 s by default), not the minute of CM retries (16 tries
// of 4.3 s with the peer's REQ's timeouts).
func TestServeStopsWithoutDREP(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		grace time.Duration
	}{{nil, daemon.DefaultStopGrace}, {[]string{"--stop-grace", "300ms"}, 300 * time.Millisecond}} {
		t.Run(tc.grace.String(), func(t *testing.T) {
			d := startDaemon(t, tc.args...)
			var vanished atomic.Bool
			dialDaemonFrom(t, d, nic.Config{SendHook: func([]byte) nic.SendAction {
				if vanished.Load() {
					return nic.SendDrop
				}
				return nic.SendPass
			}})
			// The daemon has the connection (the RTU reached it) before the
			// peer vanishes.
			if n := d.counterReaches(t, "connections_active", 1); n != 1 {
				t.Fatalf("connections_active %d, want 1", n)
			}
			vanished.Store(true)
			start := time.Now()
			if code := d.shutdown(t); code != 0 {
				t.Errorf("exit status %d", code)
			}
			if took := time.Since(start); took < tc.grace || took > tc.grace+2*time.Second {
				t.Errorf("the daemon took %v to stop, want its grace of %v and at most 2 s more", took, tc.grace)
			}
			if want := fmt.Sprintf(`"waited": %v}`, tc.grace.Seconds()); !strings.Contains(d.stderr.String(), want) {
				t.Errorf("the log does not say the daemon waited %v:\n%s", tc.grace, d.stderr)
			}
		})
	}
}

// TestServeControlSocketPrivate: the control socket is the daemon's user's
// alone, whatever the umask: attaching maps memory through the daemon.
func TestServeControlSocketPrivate(t *testing.T) {
	d := startDaemon(t)
	fi, err := os.Stat(d.control)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("control socket mode %v, want -rw-------", perm)
	}
}

// TestServeStopsWithSilentClient: a client connected to the control socket
// that sends nothing does not hold up the daemon's shutdown until its
// read times out.
func TestServeStopsWithSilentClient(t *testing.T) {
	d := startDaemon(t)
	c, err := net.Dial("unix", d.control)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // the daemon is reading its request
	start := time.Now()
	if code := d.shutdown(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	if took := time.Since(start); took > control.Timeout/2 {
		t.Errorf("the daemon took %v to stop", took)
	}
}

// TestServeConnectionsFreed: thousands of connections, each ended by the
// client (its DREQ) or by an error on the daemon's side (a WRITE with a bad
// rkey fails the daemon's QP, which then disconnects), leave nothing
// behind: the daemon's QPs, `softnic qp`, its connections, goroutines and
// live heap are back where they started. Before, every ended connection
// kept its QP (about 117 KiB and a QP number) until the daemon, after
// 16,383 of them, refused every new one.
func TestServeConnectionsFreed(t *testing.T) {
	const conns, workers = 2000, 8
	d := startDaemon(t, "--region", "mem:64k:rwa")
	mem := d.ready.Regions[0]
	before := d.usage(t)
	var rows []control.QPRow
	d.inspect(t, "qp", &rows)

	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddrPort(d.ready.Listen)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() {
			errs <- func() error {
				cq, err := dev.CreateCQ(4)
				if err != nil {
					return err
				}
				buf, err := pd.RegMR(make([]byte, 8), mr.LocalWrite)
				if err != nil {
					return err
				}
				for i := next.Add(1); i <= conns; i = next.Add(1) {
					c, err := dev.Dial(ctx, peer, d.ready.CMPort, nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
					if err != nil {
						return fmt.Errorf("connection %d: %w", i, err)
					}
					wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.SGE(0, 8)}, RemoteAddr: mem.Addr, RKey: mem.RKey}
					want := verbs.Success
					// One connection in 128 ends by the daemon's error: a
					// peer failing more than 16 R_Key checks in a row is
					// taken for a key guesser and held back (nic's guard).
					if i%128 == 0 {
						wr.RKey, want = mem.RKey+0x10000, verbs.RemAccessErr
					}
					if err := c.QP().PostSend(&wr); err != nil {
						return err
					}
					var wc [1]verbs.WC
					if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != want {
						return fmt.Errorf("connection %d: %v, %v; want %v", i, wc[0].Status, err, want)
					}
					c.Close()
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := d.counterReaches(t, "connections_accepted", conns); n != conns {
		t.Fatalf("connections_accepted %d, want %d", n, conns)
	}
	// A destroyed QP's last timer (its ACK timeout, 67 ms) holds it until
	// it is due.
	const heapSlack = 16 << 20
	deadline := time.Now().Add(10 * time.Second)
	after := d.usage(t)
	for (after.qps != before.qps || after.conns != 0 || after.heap > before.heap+heapSlack) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		after = d.usage(t)
	}
	if after.qps != before.qps || after.conns != 0 {
		t.Errorf("after %d connections: %d QPs and %d connections; want %d and 0", conns, after.qps, after.conns, before.qps)
	}
	var rowsAfter []control.QPRow
	d.inspect(t, "qp", &rowsAfter)
	if len(rowsAfter) != len(rows) || len(rows) != int(before.qps) {
		t.Errorf("softnic qp lists %d QPs before, %d after; the device holds %d", len(rows), len(rowsAfter), before.qps)
	}
	if after.goroutines > before.goroutines+2 {
		t.Errorf("%d goroutines before, %d after", before.goroutines, after.goroutines)
	}
	if grown := int64(after.heap) - int64(before.heap); grown > heapSlack {
		t.Errorf("live heap grew by %d bytes over %d connections, from %d", grown, conns, before.heap)
	}
}

// daemonUsage is what a leak would make grow.
type daemonUsage struct {
	qps, conns, goroutines, heap uint64
}

// usage reads the daemon's QPs, connections, goroutines and live heap from
// stat, after garbage collections (the daemon runs in the test's process;
// the second frees what the first left in sync.Pools).
func (d *testDaemon) usage(t *testing.T) daemonUsage {
	t.Helper()
	runtime.GC()
	runtime.GC()
	var m map[string]uint64
	d.inspect(t, "stat", &m)
	return daemonUsage{qps: m["qps"], conns: m["connections_active"], goroutines: m["goroutines"], heap: m["heap_live_bytes"]}
}
