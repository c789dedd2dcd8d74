//go:build linux

package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two hosts: network namespaces the test makes, joined by a veth pair of
// MTU 1500, a softnic serve in each (the built binary), as on an ordinary
// Ethernet network between two machines.

// hostPair is the two namespaces, their addresses and their daemons.
type hostPair struct {
	ns   [2]string // network namespace names
	addr [2]string // 10.99.0.1 and 10.99.0.2
	link [2]string // the veth ends
	bin  string
	d    [2]*hostDaemon
}

// hostDaemon is a softnic serve in one namespace.
type hostDaemon struct {
	cmd    *exec.Cmd
	ready  cliReady
	socket string // the control socket
	stderr lockedBuffer
	exited chan error
}

// netnsPair makes the namespaces, or skips the test without root or ip.
func netnsPair(t *testing.T) *hostPair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the multi-host test makes network namespaces: it needs root")
	}
	for _, tool := range []string{"ip", "ss"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the multi-host test needs iproute2's %s command (Debian's iproute2)", tool)
		}
	}
	pid := os.Getpid()
	h := &hostPair{
		ns:   [2]string{fmt.Sprintf("sn%d-a", pid), fmt.Sprintf("sn%d-b", pid)},
		addr: [2]string{"10.99.0.1", "10.99.0.2"},
		link: [2]string{fmt.Sprintf("sn%da", pid), fmt.Sprintf("sn%db", pid)},
	}
	for _, ns := range h.ns {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Skipf("cannot make a network namespace: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	h.ip(t, "link", "add", h.link[0], "netns", h.ns[0], "mtu", "1500", "type", "veth", "peer", "name", h.link[1], "netns", h.ns[1], "mtu", "1500")
	for i := range 2 {
		h.ipIn(t, i, "link", "set", "lo", "up")
		h.ipIn(t, i, "addr", "add", h.addr[i]+"/24", "dev", h.link[i])
		h.ipIn(t, i, "link", "set", h.link[i], "up")
	}
	return h
}

func (h *hostPair) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// ipIn runs ip in host i's namespace.
func (h *hostPair) ipIn(t *testing.T, i int, args ...string) {
	t.Helper()
	h.ip(t, append([]string{"-n", h.ns[i]}, args...)...)
}

// in returns a command running the softnic binary in host i's namespace.
func (h *hostPair) in(ctx context.Context, i int, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns[i], h.bin}, args...)...)
}

// run runs softnic in host i's namespace and returns its exit status,
// stdout and stderr, failing the test if it takes longer than limit.
func (h *hostPair) run(t *testing.T, limit time.Duration, i int, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := h.in(ctx, i, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("softnic %s on host %d did not end within %v\nstderr: %s", strings.Join(args, " "), i, limit, stderr.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// serve starts softnic serve on host i with args and waits for its ready
// line; the test's cleanup kills it if it is still running.
func (h *hostPair) serve(t *testing.T, i int, args ...string) *hostDaemon {
	t.Helper()
	d := &hostDaemon{socket: filepath.Join(t.TempDir(), "ctl.sock"), exited: make(chan error, 1)}
	d.cmd = h.in(context.Background(), i, append([]string{"serve", "--listen", h.addr[i] + ":4791", "--control", d.socket}, args...)...)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		err := <-d.exited
		d.exited <- err
	})
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &d.ready); err != nil {
			t.Fatalf("host %d: ready line %q: %v\nstderr:\n%s", i, l, err, d.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("host %d: no ready line; stderr:\n%s", i, d.stderr.String())
	}
	h.d[i] = d
	return d
}

// control sends one control request to the daemon (its socket is a path:
// reachable from any namespace) and decodes the result into v.
func (d *hostDaemon) control(t *testing.T, cmd string, v any) {
	t.Helper()
	c, err := net.DialTimeout("unix", d.socket, 5*time.Second)
	if err != nil {
		t.Fatalf("control %s: %v", cmd, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "{\"cmd\":%q}\n", cmd)
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("control %s: %v", cmd, err)
	}
	var reply struct {
		Result json.RawMessage `json:"result"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(line, &reply); err != nil || reply.Error != "" {
		t.Fatalf("control %s: %v %s", cmd, err, reply.Error)
	}
	if err := json.Unmarshal(reply.Result, v); err != nil {
		t.Fatalf("control %s: %v", cmd, err)
	}
}

// daemonUse is what a leak in a daemon would make grow.
type daemonUse struct {
	qps, conns, goroutines, heap uint64
}

// use reads the daemon's use from stat, after a garbage collection that
// began after the call: the daemon collects as it allocates, and each stat
// answer allocates, so asking often enough brings one.
func (d *hostDaemon) use(t *testing.T) daemonUse {
	t.Helper()
	var m map[string]uint64
	d.control(t, "stat", &m)
	gc := m["gc_cycles"]
	for deadline := time.Now().Add(20 * time.Second); m["gc_cycles"] < gc+2; {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon collected no garbage in 20 s of stat requests (gc_cycles %d)", m["gc_cycles"])
		}
		d.control(t, "stat", &m)
	}
	return daemonUse{qps: m["qps"], conns: m["connections_active"], goroutines: m["goroutines"], heap: m["heap_live_bytes"]}
}

// qpCount is how many QPs softnic qp lists.
func (d *hostDaemon) qpCount(t *testing.T) int {
	t.Helper()
	var rows []json.RawMessage
	d.control(t, "qp", &rows)
	return len(rows)
}

// TestMultiHost: between two hosts on a 1500-byte network, softnic write,
// read and fadd of 1 B to 4 MiB, and softnic perftest write_bw, read_bw,
// send_bw and atomic_bw attached to the daemons, all complete with correct
// data; the path MTU is rxe's for the link (1024); and the daemons' QPs,
// softnic qp and their live heap return to where they were. Then the route
// between them shrinks under a connection the daemon had: the kernel's
// EMSGSIZE fails that QP at once (path_mtu_exceeded), and the next
// connection gets through with the smaller MTU.
func TestMultiHost(t *testing.T) {
	h := netnsPair(t)
	h.bin = buildSoftnic(t)
	a := h.serve(t, 0, "--region", "mem:8m:rwa")
	b := h.serve(t, 1, "--region", "mem:8m:rwa")
	var info struct {
		MTU  int    `json:"mtu"`
		ICRC string `json:"icrc"`
	}
	a.control(t, "info", &info)
	t.Logf("daemon info: MTU cap %d, ICRC of rxe's packets: %s", info.MTU, info.ICRC)
	before := [2]daemonUse{a.use(t), b.use(t)}
	beforeQPs := [2]int{a.qpCount(t), b.qpCount(t)}
	mem := a.ready.Regions[0]
	dir := t.TempDir()
	peer := h.addr[0]
	op := func(args ...string) []string {
		return append([]string{args[0], "--peer", peer, "--rkey", fmt.Sprint(mem.RKey), "--timeout", "60s"}, args[1:]...)
	}

	t.Run("one-shot", func(t *testing.T) {
		for _, size := range []int{1, 1000, 1024, 1025, 4096, 65536, 1 << 20, 4 << 20} {
			data := make([]byte, size)
			rng := rand.New(rand.NewPCG(uint64(size), 7))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
			if err := os.WriteFile(in, data, 0o644); err != nil {
				t.Fatal(err)
			}
			addr := fmt.Sprintf("%#x", mem.Addr+uint64(size%4096))
			start := time.Now()
			if code, _, stderr := h.run(t, time.Minute, 1, op("write", "--addr", addr, "--file", in)...); code != 0 {
				t.Fatalf("write of %d bytes: %s", size, stderr)
			}
			wrote := time.Since(start)
			if code, _, stderr := h.run(t, time.Minute, 1, op("read", "--addr", addr, "--len", fmt.Sprint(size), "--out", out)...); code != 0 {
				t.Fatalf("read of %d bytes: %s", size, stderr)
			}
			if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (%v) that differ from the %d written", len(got), err, size)
			}
			t.Logf("%d bytes written in %v, read back the same", size, wrote.Round(time.Millisecond))
		}
		word := fmt.Sprintf("%#x", mem.Addr+(6<<20))
		for i, want := range []string{"0\n", "5\n"} {
			if code, stdout, stderr := h.run(t, time.Minute, 1, op("fadd", "--addr", word, "--add", "5")...); code != 0 || stdout != want {
				t.Fatalf("fadd %d: %d %q %s; want %q", i, code, stdout, stderr, want)
			}
		}
		var stat map[string]uint64
		a.control(t, "stat", &stat)
		if stat["path_mtu_exceeded"] != 0 || stat["send_err"] != 0 || stat["retry_exceeded_err"] != 0 {
			t.Errorf("path_mtu_exceeded %d, send_err %d, retry_exceeded_err %d; want 0 on a 1500-byte link",
				stat["path_mtu_exceeded"], stat["send_err"], stat["retry_exceeded_err"])
		}
	})

	t.Run("perftest", func(t *testing.T) {
		// Attached to the daemons (SOFTNIC_SOCKET): their QPs are the
		// daemons', and so is their traffic.
		var stat map[string]uint64
		a.control(t, "stat", &stat)
		rcvd := stat["rcvd_pkts"]
		defer func() {
			a.control(t, "stat", &stat)
			// At least write_bw's and send_bw's 200 messages of 64 packets
			// reached the daemon of the server.
			if got := stat["rcvd_pkts"] - rcvd; got < 2*200*64 {
				t.Errorf("the server's daemon received %d packets during perftest: was perftest attached to it?", got)
			}
		}()
		for _, test := range []string{"write_bw", "read_bw", "send_bw", "atomic_bw"} {
			t.Run(test, func(t *testing.T) {
				args := []string{"perftest", test, "-n", "200", "--port", "4791"}
				if test != "atomic_bw" {
					args = append(args, "-s", "65536")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				srv := h.in(ctx, 0, append(args, "--bind", h.addr[0])...)
				srv.Env = append(os.Environ(), "SOFTNIC_SOCKET="+a.socket)
				var srvOut lockedBuffer
				srv.Stdout, srv.Stderr = &srvOut, &srvOut
				if err := srv.Start(); err != nil {
					t.Fatal(err)
				}
				srvDone := make(chan error, 1)
				go func() { srvDone <- srv.Wait() }()
				if !waitFor(20*time.Second, func() bool {
					out, _ := exec.Command("ip", "netns", "exec", h.ns[0], "ss", "-ltn").Output()
					return bytes.Contains(out, []byte(h.addr[0]+":18515"))
				}) {
					t.Fatalf("the perftest server does not listen:\n%s", srvOut.String())
				}
				cli := h.in(ctx, 1, append(args, "--bind", h.addr[1], h.addr[0])...)
				cli.Env = append(os.Environ(), "SOFTNIC_SOCKET="+b.socket)
				out, err := cli.CombinedOutput()
				if err != nil {
					t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srvOut.String())
				}
				if err := <-srvDone; err != nil {
					t.Fatalf("server: %v\n%s", err, srvOut.String())
				}
				if !strings.Contains(string(out), "Mtu             : 1024[B]") {
					t.Errorf("the path MTU on a 1500-byte link is not 1024:\n%s", out)
				}
				t.Logf("%s", lastLines(string(out), 3))
			})
		}
	})

	// Everything the transfers made is gone.
	for i, d := range []*hostDaemon{a, b} {
		var after daemonUse
		ok := waitFor(20*time.Second, func() bool {
			after = d.use(t)
			return after.qps == before[i].qps && after.conns == 0 && after.heap <= before[i].heap+16<<20
		})
		if !ok {
			t.Errorf("host %d: QPs %d, connections %d, live heap %d; before: %d, 0, %d", i, after.qps, after.conns, after.heap, before[i].qps, before[i].heap)
		}
		if n := d.qpCount(t); n != beforeQPs[i] {
			t.Errorf("host %d: softnic qp lists %d QPs, %d before", i, n, beforeQPs[i])
		}
		if after.goroutines > before[i].goroutines+4 {
			t.Errorf("host %d: %d goroutines, %d before", i, after.goroutines, before[i].goroutines)
		}
		t.Logf("host %d: QPs %d, goroutines %d → %d, live heap %d → %d bytes", i, after.qps,
			before[i].goroutines, after.goroutines, before[i].heap, after.heap)
	}

	t.Run("route shrinks", func(t *testing.T) {
		// The daemon on host a knows its route to b carries 1500 bytes
		// (path MTU 1024). Now the route carries 1000: READ responses of
		// 1024 bytes no longer fit.
		h.ipIn(t, 0, "route", "replace", h.addr[1]+"/32", "dev", h.link[0], "mtu", "lock", "1000")
		start := time.Now()
		code, _, stderr := h.run(t, time.Minute, 1, op("read", "--addr", fmt.Sprintf("%#x", mem.Addr), "--len", "65536", "--out", filepath.Join(dir, "x"))...)
		failed := time.Since(start)
		var stat map[string]uint64
		a.control(t, "stat", &stat)
		if code != 1 || stat["path_mtu_exceeded"] == 0 || failed > 10*time.Second {
			t.Fatalf("read over the shrunk route: exit status %d after %v (%s), path_mtu_exceeded %d; want a failure at once, counted",
				code, failed, strings.TrimSpace(stderr), stat["path_mtu_exceeded"])
		}
		t.Logf("the first read failed after %v: %s", failed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if code, _, stderr := h.run(t, time.Minute, 1, op("read", "--addr", fmt.Sprintf("%#x", mem.Addr), "--len", "65536", "--out", filepath.Join(dir, "x"))...); code != 0 {
			t.Fatalf("the next read, with the smaller MTU: %s", stderr)
		}
	})

	// Both daemons still answer, and stop within their grace period.
	for i, d := range []*hostDaemon{a, b} {
		var in map[string]any
		d.control(t, "info", &in)
		start := time.Now()
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-d.exited:
			d.exited <- err
			if err != nil {
				t.Errorf("host %d: softnic serve after SIGTERM: %v\n%s", i, err, d.stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("host %d: softnic serve did not stop within 10 s of SIGTERM", i)
		}
		t.Logf("host %d stopped in %v", i, time.Since(start).Round(time.Millisecond))
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
