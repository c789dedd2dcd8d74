package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
)

// Unmodified RDMA programs on softnic: Debian's perftest, rping,
// ibv_devinfo, the other programs of ibverbs-utils and rdmacm-utils
// (those softnic does not support failing cleanly), and a C program of
// the seeds' rules, each run through libsoftnic (softnic run)
// on a daemon; on one daemon on loopback, and on two daemons in two
// network namespaces the test makes (root). The library is built once per
// go test run.

// libsoftnic is the softnic binary and libsoftnic, built once per run.
var libsoftnic struct {
	once     sync.Once
	dir      string
	bin, lib string
	skip     string // why the tests cannot run here
	err      error  // the build failed
}

func TestMain(m *testing.M) {
	code := m.Run()
	if libsoftnic.dir != "" {
		os.RemoveAll(libsoftnic.dir)
	}
	os.Exit(code)
}

// needLibsoftnic builds softnic and libsoftnic, or skips the test saying
// what is missing; it also skips unless every program named is installed.
func needLibsoftnic(t *testing.T, programs ...string) (bin, lib string) {
	t.Helper()
	libsoftnic.once.Do(buildLibsoftnic)
	if libsoftnic.skip != "" {
		t.Skip(libsoftnic.skip)
	}
	if libsoftnic.err != nil {
		t.Fatal(libsoftnic.err)
	}
	needPrograms(t, programs...)
	return libsoftnic.bin, libsoftnic.lib
}

func buildLibsoftnic() {
	for _, need := range []struct{ path, what string }{
		{"/usr/include/infiniband/verbs.h", "libibverbs-dev"},
		{"/usr/include/rdma/rdma_cma.h", "librdmacm-dev"},
	} {
		if _, err := os.Stat(need.path); err != nil {
			libsoftnic.skip = fmt.Sprintf("libsoftnic needs %s (Debian: apt-get install %s)", need.path, need.what)
			return
		}
	}
	for _, tool := range []string{"go", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			libsoftnic.skip = fmt.Sprintf("libsoftnic is built with %s, which is not installed", tool)
			return
		}
	}
	dir, err := os.MkdirTemp("", "libsoftnic-test-")
	if err != nil {
		libsoftnic.skip = err.Error()
		return
	}
	libsoftnic.dir, libsoftnic.bin, libsoftnic.lib = dir, filepath.Join(dir, "softnic"), filepath.Join(dir, "libsoftnic")
	root, err := filepath.Abs("..")
	if err == nil {
		err = run(exec.Command("go", "build", "-o", libsoftnic.bin, "./cmd/softnic"), root)
	}
	if err == nil {
		err = run(exec.Command(filepath.Join(root, "cmd", "libsoftnic", "build.sh"), libsoftnic.lib), root)
	}
	// A build that fails is a failure, not a reason to skip.
	libsoftnic.err = err
}

func run(cmd *exec.Cmd, dir string) error {
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// verbsHost is a softnic daemon, in a network namespace of its own or in
// the test's.
type verbsHost struct {
	ns      string // "" for the test's own namespace
	control string
	addr    netip.AddrPort
	mtu     int
	bin     string
	lib     string
	serve   *exec.Cmd
	exited  chan error
	stderr  lockedBuffer
}

// startVerbsHost starts softnic serve in ns (or here) listening on listen,
// with the serve flags of extra.
func startVerbsHost(t *testing.T, bin, lib, ns, listen string, extra ...string) *verbsHost {
	t.Helper()
	h := &verbsHost{ns: ns, control: filepath.Join(t.TempDir(), "ctl.sock"), bin: bin, lib: lib, exited: make(chan error, 1)}
	h.serve = h.command(context.Background(), append([]string{bin, "serve", "--listen", listen, "--control", h.control}, extra...)...)
	stdout, err := h.serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.serve.Stderr = &h.stderr
	if err := h.serve.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.exited <- h.serve.Wait() }()
	t.Cleanup(func() { h.stop() })
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
		io.Copy(io.Discard, stdout)
	}()
	var ready cliReady
	select {
	case l := <-lines:
		if err := json.Unmarshal([]byte(l), &ready); err != nil {
			t.Fatalf("softnic serve: ready line %q: %v\nstderr:\n%s", l, err, h.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("softnic serve: no ready line\nstderr:\n%s", h.stderr.String())
	}
	if h.addr, err = netip.ParseAddrPort(ready.Listen); err != nil {
		t.Fatal(err)
	}
	var info struct{ MTU int }
	h.inspect(t, "info", &info)
	h.mtu = info.MTU
	return h
}

// stop kills the daemon, if it still runs.
func (h *verbsHost) stop() {
	h.serve.Process.Kill()
	if err := <-h.exited; err != nil {
		h.exited <- err
	} else {
		h.exited <- nil
	}
}

// command is the command line args run in the host's namespace.
func (h *verbsHost) command(ctx context.Context, args ...string) *exec.Cmd {
	if h.ns != "" {
		args = append([]string{"ip", "netns", "exec", h.ns}, args...)
	}
	return exec.CommandContext(ctx, args[0], args[1:]...)
}

// program is an RDMA program on the host, through softnic run.
func (h *verbsHost) program(ctx context.Context, args ...string) *exec.Cmd {
	return h.command(ctx, append([]string{h.bin, "run", "--control", h.control, "--lib", h.lib, "--"}, args...)...)
}

// startServer starts a server program that serves until it is stopped, which
// the test's cleanup does. It returns the program's output as it grows,
// and its exit, which a reader that takes it must put back.
func (h *verbsHost) startServer(t *testing.T, ctx context.Context, args ...string) (*lockedBuffer, chan error) {
	t.Helper()
	out := &lockedBuffer{}
	s := h.program(ctx, args...)
	s.Stdout, s.Stderr = out, out
	return out, startUntilCleanup(t, s)
}

// inspect asks the daemon with softnic info, stat, qp or mr --json.
func (h *verbsHost) inspect(t *testing.T, what string, v any) {
	t.Helper()
	out, err := exec.Command(h.bin, what, "--control", h.control, "--json").Output()
	if err != nil {
		t.Fatalf("softnic %s: %v", what, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("softnic %s --json: %v: %s", what, err, out)
	}
}

// counters returns the daemon's counters (softnic stat --json).
func (h *verbsHost) counters() (map[string]uint64, error) {
	out, err := exec.Command(h.bin, "stat", "--control", h.control, "--json").Output()
	if err != nil {
		return nil, fmt.Errorf("softnic stat: %v", err)
	}
	var m map[string]uint64
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("softnic stat --json: %v: %s", err, out)
	}
	return m, nil
}

// ip is the host's address as programs name it.
func (h *verbsHost) ip() string { return h.addr.Addr().String() }

// verbsTopology is where a test's two programs run.
type verbsTopology struct {
	name           string
	server, client *verbsHost
}

// oneDaemon is one daemon on loopback, both programs attached to it.
func oneDaemon(t *testing.T, bin, lib string) verbsTopology {
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	return verbsTopology{"one daemon", h, h}
}

var nsSeq atomic.Int32

// twoNamespaces makes two network namespaces joined by a veth pair, at
// 10.99.N.1 and 10.99.N.2: two hosts. It needs root; the namespaces are
// the test's own and go with it.
func twoNamespaces(t *testing.T) (nsA, nsB, ipA, ipB string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("two hosts in two network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("two hosts in two network namespaces need ip (iproute2)")
	}
	n := int(nsSeq.Add(1))
	id := os.Getpid()%100000*100 + n%100
	nsA, nsB = fmt.Sprintf("snv-%d-a", id), fmt.Sprintf("snv-%d-b", id)
	vethA, vethB := fmt.Sprintf("snv%da", id), fmt.Sprintf("snv%db", id)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsA).Run()
		exec.Command("ip", "netns", "del", nsB).Run()
	})
	ipA, ipB = fmt.Sprintf("10.99.%d.1", n%250), fmt.Sprintf("10.99.%d.2", n%250)
	for _, c := range [][]string{
		{"netns", "add", nsA}, {"netns", "add", nsB},
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB},
		{"link", "set", vethA, "netns", nsA}, {"link", "set", vethB, "netns", nsB},
		{"-n", nsA, "addr", "add", ipA + "/24", "dev", vethA}, {"-n", nsB, "addr", "add", ipB + "/24", "dev", vethB},
		// A jumbo link: the daemons' MTU is 4096 (softnic serve does not
		// take it from the interface), and a datagram of a full packet
		// must not exceed the link's.
		{"-n", nsA, "link", "set", vethA, "mtu", "9000", "up"}, {"-n", nsB, "link", "set", vethB, "mtu", "9000", "up"},
		{"-n", nsA, "link", "set", "lo", "up"}, {"-n", nsB, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Skipf("cannot make network namespaces: ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return nsA, nsB, ipA, ipB
}

// twoDaemons is a daemon in each of two network namespaces, on RoCEv2's
// port: two hosts.
func twoDaemons(t *testing.T, bin, lib string) verbsTopology {
	nsA, nsB, ipA, ipB := twoNamespaces(t)
	a := startVerbsHost(t, bin, lib, nsA, ipA+":4791")
	b := startVerbsHost(t, bin, lib, nsB, ipB+":4791")
	return verbsTopology{"two daemons", a, b}
}

var portSeq atomic.Int32

// freePort is a TCP or rdma_cm port for one pair of programs, distinct
// within the run and unlikely to meet another run's: from 10000 to 32767,
// below Linux's ephemeral ports (32768-60999), which the kernel hands to
// connections' local ends and softnic to rdma_cm listeners of port 0, so
// that a server never finds its port taken by one of them (perftest's
// "Couldn't listen to port 35655" in a .ci/run).
func freePort() string {
	return fmt.Sprint(10000 + (os.Getpid()*37+int(portSeq.Add(1)))%22768)
}

// notYetListening tells a client that found no server yet: perftest's or
// a pingpong's TCP connection refused, rping's or ucmatose's rdma_cm
// connection rejected for want of a listener, udaddy's resolution
// unreachable with status 1 (SIDR_REP "service ID not supported"), or
// rdma_client's synchronous rdma_connect failing so (ECONNREFUSED).
var notYetListening = regexp.MustCompile(`Couldn't connect to|RDMA_CM_EVENT_REJECTED|RDMA_CM_EVENT_UNREACHABLE, error: 1\b|rdma_connect: Connection refused`)

// perftestReady is what a perftest server prints as it starts waiting for
// its client. A perftest client over rdma_cm (-R) must not start before
// the server listens, which comes later and which the daemon's log tells
// (verbsHost.listening): one that is rejected retries with the rdma_cm_ids
// it destroyed (perftest's error path), and crashes.
var perftestReady = regexp.MustCompile(`Waiting for client to connect`)

// runPair runs a server program on tp.server, then its client on
// tp.client, until both exit; both must exit with status 0 within limit.
// A perftest client waits for its server to say it is ready.
func runPair(t *testing.T, tp verbsTopology, limit time.Duration, server, client []string) (sout, cout string) {
	t.Helper()
	listening := always
	if i := slices.Index(server, "-p"); i >= 0 && i+1 < len(server) && slices.Contains(server, "-R") {
		listening = tp.server.listening(server[i+1])
	}
	return runCmds(t, limit, tp.server.program, server, listening, tp.client.program, client)
}

// always is runCmds's listening for servers that need no wait.
func always() bool { return true }

// listening returns a function that reports whether a program attached to
// the daemon listens for rdma_cm connections on port, as the daemon logs.
func (h *verbsHost) listening(port string) func() bool {
	line := regexp.MustCompile(`process listens for rdma_cm connections.*"port": ` + regexp.QuoteMeta(port) + `\b`)
	return func() bool { return line.MatchString(h.stderr.String()) }
}

// runCmds runs server with the command maker srv, then client with cli,
// as runPair does. A perftest server's output is line-buffered (stdbuf),
// and its client starts once it says it waits and listening reports true;
// other clients that find no server listening yet are started again.
func runCmds(t *testing.T, limit time.Duration, srv func(context.Context, ...string) *exec.Cmd, server []string,
	listening func() bool, cli func(context.Context, ...string) *exec.Cmd, client []string) (sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	perftest := strings.HasPrefix(server[0], "ib_")
	var sbuf lockedBuffer
	s := srv(ctx, server...)
	if perftest {
		s = srv(ctx, append([]string{"stdbuf", "-oL"}, server...)...)
	}
	s.Stdout, s.Stderr = &sbuf, &sbuf
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	for perftest && !(perftestReady.MatchString(sbuf.String()) && listening()) {
		select {
		case err := <-done:
			t.Fatalf("server %s exited (%v) before it waited for its client:\n%s", strings.Join(server, " "), err, sbuf.String())
		case <-ctx.Done():
			t.Fatalf("server %s did not wait for its client:\n%s", strings.Join(server, " "), sbuf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	var out []byte
	var err error
	for {
		out, err = cli(ctx, client...).CombinedOutput()
		if err == nil || !notYetListening.Match(out) || ctx.Err() != nil {
			break
		}
		select {
		case serverErr := <-done:
			t.Fatalf("%s: server exited (%v) before a client reached it:\n%s", server[0], serverErr, sbuf.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		cancel()
		<-done
		t.Fatalf("client %s: %v\n%s\nserver %s:\n%s", strings.Join(client, " "), err, out, strings.Join(server, " "), sbuf.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server %s: %v\n%s\nclient:\n%s", strings.Join(server, " "), err, sbuf.String(), out)
	}
	return sbuf.String(), string(out)
}

// TestVerbsDevices: ibv_devices and ibv_devinfo -v list the daemon's
// device, port active on Ethernet, its MTU and its address in the GID
// table; with no daemon, no device and one line on stderr saying how to
// start one.
func TestVerbsDevices(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ibv_devices", "ibv_devinfo")
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := h.program(ctx, "ibv_devices").CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^\s+softnic0\s+02[0-9a-f]{14}$`).Match(out) {
		t.Errorf("ibv_devices: %v\n%s", err, out)
	}
	out, err = h.program(ctx, "ibv_devinfo", "-v").CombinedOutput()
	mtu := fmt.Sprintf("%d (", h.mtu)
	for _, want := range []string{"hca_id:\tsoftnic0", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet", "active_mtu:\t\t" + mtu,
		"GID[  0]:\t\t::ffff:127.0.0.1, RoCE v2", "phys_state:\t\tLINK_UP (5)"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("ibv_devinfo -v (%v) does not say %q:\n%s", err, want, out)
			break
		}
	}
	// The device's limits are nic.Device.Query's.
	for _, want := range []string{fmt.Sprintf(`max_qp_wr:\s+%d\n`, qp.MaxQPWR), fmt.Sprintf(`max_sge:\s+%d\n`, qp.MaxSGE),
		fmt.Sprintf(`max_cqe:\s+%d\n`, qp.MaxCQE), fmt.Sprintf(`max_qp_init_rd_atom:\s+%d\n`, qp.MaxRdAtomicLimit), `atomic_cap:\s+ATOMIC_HCA`,
		`max_mcast_grp:\s+64\n`, `max_mcast_qp_attach:\s+56\n`, `max_total_mcast_qp_attach:\s+3584\n`} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("ibv_devinfo -v does not match %q:\n%s", want, out)
		}
	}
	cmd := exec.CommandContext(ctx, bin, "run", "--control", filepath.Join(t.TempDir(), "nobody.sock"), "--lib", lib, "--", "ibv_devices")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil || strings.Contains(stdout.String(), "softnic0") || strings.Count(stderr.String(), "softnic serve --control") != 1 {
		t.Errorf("ibv_devices without a daemon: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}

// perftestCase is one run of a perftest tool.
type perftestCase struct {
	tool string
	args []string
}

// perftestCases are perftest's bandwidth and latency tests at the sizes
// that matter at path MTU mtu: 1 byte, one packet, several packets and a
// pad, 1 MiB; the atomics, which have one size; and, with rdma_cm (-R),
// with four QPs (-q 4) and on on-demand paging regions (--odp, which
// perftest runs once ibv_query_device_ex offers ODP; its atomics refuse
// it), the bandwidth tests. To keep the run short, each
// topology (0 or 1) takes half the sizes of each test, the other half
// another's, so that both see every size and every test.
func perftestCases(mtu, topology int) []perftestCase {
	var cs []perftestCase
	sizes := []int{1, mtu, 3*mtu + 3, 1 << 20}
	for i, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"} {
		for j, s := range sizes {
			if (i+j)%2 != topology {
				continue
			}
			// Few iterations: a latency test's sides both spin, and on a
			// small machine share the daemon's CPUs.
			n := 100
			switch {
			case s == 1<<20:
				n = 5
			case strings.HasSuffix(tool, "_lat"):
				n = 20
			}
			cs = append(cs, perftestCase{tool, []string{"-s", fmt.Sprint(s), "-n", fmt.Sprint(n)}})
		}
	}
	cs = append(cs,
		perftestCase{"ib_atomic_bw", []string{"-A", "FETCH_AND_ADD", "-n", "100"}},
		perftestCase{"ib_atomic_bw", []string{"-A", "CMP_AND_SWAP", "-n", "100"}},
		perftestCase{"ib_atomic_lat", []string{"-A", "FETCH_AND_ADD", "-n", "20"}},
		perftestCase{"ib_atomic_lat", []string{"-A", "CMP_AND_SWAP", "-n", "20"}},
	)
	for _, tool := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		cs = append(cs, perftestCase{tool, []string{"-s", fmt.Sprint(3*mtu + 3), "-n", "100", "-R"}},
			perftestCase{tool, []string{"-s", fmt.Sprint(3*mtu + 3), "-n", "100", "-q", "4"}},
			perftestCase{tool, []string{"-s", fmt.Sprint(3*mtu + 3), "-n", "100", "--odp"}})
	}
	return append(cs, perftestCase{"ib_write_lat", []string{"-s", "8", "-n", "20", "-R"}})
}

// TestVerbsPerftest runs perftest's tests, both sides through libsoftnic,
// on one daemon and on two; every run must exit with status 0 and report
// its figures.
func TestVerbsPerftest(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ib_write_bw")
	for i, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			for _, c := range perftestCases(tp.server.mtu, i) {
				t.Run(c.tool+strings.Join(c.args, ""), func(t *testing.T) {
					port := freePort()
					args := append([]string{c.tool, "-F", "-p", port}, c.args...)
					_, out := runPair(t, tp, 30*time.Second, args, append(args, tp.server.ip()))
					if !regexp.MustCompile(`(?m)^ *#bytes`).MatchString(out) {
						t.Errorf("%s reported no figures:\n%s", c.tool, out)
					}
				})
			}
		})
	}
}

// TestVerbsRping: rping -s and rping -c -V -C 100, at 64 bytes and at
// 65535, the most rping takes (its -S must be below its 64 KiB buffer),
// and with QPs each side connects itself (-q).
func TestVerbsRping(t *testing.T) {
	bin, lib := needLibsoftnic(t, "rping")
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			// 64 and 65535 bytes, and -q: each side creates its QP
			// itself and connects it with rdma_init_qp_attr's RTR and
			// RTS attributes, the client after CONNECT_RESPONSE, then
			// rdma_establish.
			for _, c := range []struct {
				name string
				args []string
			}{
				{"64", []string{"-S", "64"}},
				{"65535", []string{"-S", "65535"}},
				{"self-connected QP", []string{"-S", "64", "-q"}},
			} {
				t.Run(c.name, func(t *testing.T) {
					port := freePort()
					// -V: each side compares what it received, and fails
					// on a difference. The server ends when the client
					// disconnects.
					out, _ := runPair(t, tp, time.Minute,
						append([]string{"rping", "-s", "-a", tp.server.ip(), "-p", port, "-C", "100", "-V"}, c.args...),
						append([]string{"rping", "-c", "-a", tp.server.ip(), "-p", port, "-C", "100", "-V"}, c.args...))
					if !strings.Contains(out, "server DISCONNECT EVENT") {
						t.Errorf("rping -s did not end with the client's disconnect:\n%s", out)
					}
				})
			}
		})
	}
}

// TestVerbsPingpong: ibv_rc_pingpong over GID 0, polling and with
// completion events (-e), with ibv_post_send and with the ibv_wr_* API of
// an extended QP (-N); and the rdma_client/rdma_server examples.
func TestVerbsPingpong(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ibv_rc_pingpong", "rdma_server")
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			for _, extra := range [][]string{nil, {"-e"}, {"-N"}, {"-N", "-e"}} {
				args := append([]string{"ibv_rc_pingpong", "-g", "0", "-n", "200", "-p", freePort()}, extra...)
				_, out := runPair(t, tp, time.Minute, args, append(args, tp.server.ip()))
				if !strings.Contains(out, "200 iters in") {
					t.Errorf("%s:\n%s", strings.Join(args, " "), out)
				}
			}
			// On their default port, 7471, which the daemon leaves to
			// the programs attached to it.
			sout, cout := runPair(t, tp, time.Minute, []string{"rdma_server"},
				[]string{"rdma_client", "-s", tp.server.ip()})
			if !strings.Contains(sout, "rdma_server: end 0") || !strings.Contains(cout, "rdma_client: end 0") {
				t.Errorf("rdma_server:\n%s\nrdma_client:\n%s", sout, cout)
			}
		})
	}
}

// utilsCase is one of rdma-core's example programs as a server and its
// client: the command lines for a server at ip listening on port, and
// what each side's output says when it succeeded.
type utilsCase struct {
	name           string
	server, client func(ip, port string) []string
	sdone, cdone   string
}

// pingpongCase is one of ibverbs-utils' pingpong programs, 50 round trips
// over GID 0, with its extra arguments.
func pingpongCase(prog string, extra ...string) utilsCase {
	args := func(port string) []string {
		return append([]string{prog, "-g", "0", "-n", "50", "-p", port}, extra...)
	}
	return utilsCase{
		name:   strings.Join(append([]string{prog}, extra...), " "),
		server: func(_, port string) []string { return args(port) },
		client: func(ip, port string) []string { return append(args(port), ip) },
		sdone:  "50 iters in", cdone: "50 iters in",
	}
}

// utilsCases are the programs of Debian's ibverbs-utils and rdmacm-utils
// that run on an RC, UC and UD device without XRC or multicast, besides
// those TestVerbsPingpong runs.
var utilsCases = []utilsCase{
	pingpongCase("ibv_srq_pingpong"),
	pingpongCase("ibv_srq_pingpong", "-e"),
	pingpongCase("ibv_uc_pingpong"),
	pingpongCase("ibv_ud_pingpong"),
	pingpongCase("ibv_ud_pingpong", "-e"),
	{
		// Two connections, ten messages each way on each.
		name: "ucmatose",
		server: func(ip, port string) []string {
			return []string{"ucmatose", "-b", ip, "-p", port, "-c", "2", "-C", "10"}
		},
		client: func(ip, port string) []string {
			return []string{"ucmatose", "-s", ip, "-p", port, "-c", "2", "-C", "10"}
		},
		sdone: "return status 0", cdone: "return status 0",
	},
	{
		// rdma_migrate_id: each side moves its ids to a new event
		// channel before they disconnect.
		name: "ucmatose -m",
		server: func(ip, port string) []string {
			return []string{"ucmatose", "-b", ip, "-p", port, "-c", "2", "-C", "10", "-m"}
		},
		client: func(ip, port string) []string {
			return []string{"ucmatose", "-s", ip, "-p", port, "-c", "2", "-C", "10", "-m"}
		},
		sdone: "return status 0", cdone: "return status 0",
	},
	{
		// rdma_cm's IB port space: RC connections as in the TCP one,
		// with the IB port space's service ID.
		name: "ucmatose -P ib",
		server: func(ip, port string) []string {
			return []string{"ucmatose", "-b", ip, "-p", port, "-c", "2", "-C", "10", "-P", "ib"}
		},
		client: func(ip, port string) []string {
			return []string{"ucmatose", "-s", ip, "-p", port, "-c", "2", "-C", "10", "-P", "ib"}
		},
		sdone: "return status 0", cdone: "return status 0",
	},
	{
		// rdma_cm's UDP port space: the client resolves the server's
		// port to its UD QP (SIDR) and sends ten messages, which the
		// server answers to the address of each. udaddy's port is
		// 7174 (its -p is the port space), each daemon's own.
		name:   "udaddy",
		server: func(ip, _ string) []string { return []string{"udaddy", "-b", ip} },
		client: func(ip, _ string) []string { return []string{"udaddy", "-s", ip} },
		sdone:  "return status 0", cdone: "return status 0",
	},
	{
		name:   "rdma_xserver",
		server: func(_, port string) []string { return []string{"rdma_xserver", "-p", port} },
		client: func(ip, port string) []string { return []string{"rdma_xclient", "-s", ip, "-p", port} },
		sdone:  "rdma_xserver: end 0", cdone: "rdma_xclient: end 0",
	},
}

// TestVerbsCmtime runs librdmacm's cmtime, which times each step of
// setting up and tearing down connections, 50 at once, on one daemon and
// on two, on its default port, 7471, which the daemon leaves to the
// programs attached to it. Its server serves until it is stopped.
func TestVerbsCmtime(t *testing.T) {
	bin, lib := needLibsoftnic(t, "cmtime")
	steps := regexp.MustCompile(`(?s)create id +:.*resolve addr +:.*create qp +:.*connect +:.*disconnect +:.*destroy +:`)
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sbuf, exited := tp.server.startServer(t, ctx, "cmtime", "-b", tp.server.ip(), "-c", "50")
			for listening := tp.server.listening("7471"); !listening(); {
				select {
				case err := <-exited:
					exited <- err
					t.Fatalf("cmtime's server exited (%v):\n%s", err, sbuf.String())
				case <-ctx.Done():
					t.Fatalf("cmtime's server does not listen:\n%s", sbuf.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			out, err := tp.client.program(ctx, "cmtime", "-s", tp.server.ip(), "-c", "50").CombinedOutput()
			if err != nil || !steps.Match(out) {
				t.Errorf("cmtime -s %s -c 50: %v\n%s\nserver:\n%s", tp.server.ip(), err, out, sbuf.String())
			}
		})
	}
}

// TestVerbsQperf runs qperf's RC tests through rdma_cm (-cm1, as on any
// RoCE device: its tests without it address peers by LID), on one daemon
// and on two. Its server forks a child for each test, which opens the
// device (libsoftnic's Go side is loaded at the first call, so the child
// starts a runtime of its own), binds an rdma_cm id to port 0 and tells the
// client the port rdma_get_src_port gives before it listens.
func TestVerbsQperf(t *testing.T) {
	bin, lib := needLibsoftnic(t, "qperf")
	tests := []string{"rc_bw", "rc_bi_bw", "rc_lat", "rc_rdma_read_bw", "rc_rdma_write_bw", "rc_rdma_write_lat", "rc_compare_swap_mr", "rc_fetch_add_mr"}
	result := regexp.MustCompile(`(?m)^(\w+):\n +(bw|latency|msg_rate) += +[0-9.]+ \S+`)
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort()
			sbuf, _ := tp.server.startServer(t, ctx, "qperf", "-lp", port)
			args := append([]string{"qperf", tp.server.ip(), "-lp", port, "-cm1", "-t", "1"}, tests...)
			var out []byte
			var err error
			for range 50 { // until the server listens on its TCP port
				out, err = tp.client.program(ctx, args...).CombinedOutput()
				if !strings.Contains(string(out), "failed to connect") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			var done []string
			for _, m := range result.FindAllStringSubmatch(string(out), -1) {
				done = append(done, m[1])
			}
			if err != nil || !slices.Equal(done, tests) {
				t.Errorf("%s: %v: measured %v, want %v:\n%s\nserver:\n%s", strings.Join(args, " "), err, done, tests, out, sbuf.String())
			}
		})
	}
}

// TestVerbsUtils runs utilsCases on one daemon and on two: each server
// and client must exit with status 0 and say it succeeded.
func TestVerbsUtils(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			for _, c := range utilsCases {
				t.Run(c.name, func(t *testing.T) {
					port := freePort()
					server, client := c.server(tp.server.ip(), port), c.client(tp.server.ip(), port)
					needPrograms(t, server[0], client[0])
					sout, cout := runPair(t, tp, time.Minute, server, client)
					if !strings.Contains(sout, c.sdone) || !strings.Contains(cout, c.cdone) {
						t.Errorf("%s:\n%s\n%s:\n%s", strings.Join(server, " "), sout, strings.Join(client, " "), cout)
					}
				})
			}
		})
	}
}

// TestVerbsUtilsFail: the programs of ibverbs-utils and rdmacm-utils that
// need what softnic does not support (XRC, rsockets) fail at once with EOPNOTSUPP, saying so, rather
// than hang or crash; and rdma_client, connecting to a port nothing
// listens on, fails as librdmacm's synchronous rdma_connect does, with
// ECONNREFUSED.
func TestVerbsUtilsFail(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	const rsocket = "softnic: rsocket: not supported"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ibv_xsrq_pingpong", "-g", "0", h.ip()}, "Couldn't Open the XRC Domain 95"},
		{[]string{"rdma_xclient", "-c", "x", "-s", h.ip()}, "softnic: rdma_getaddrinfo for QP types other than RC (RDMA_PS_TCP, RDMA_PS_IB) and UD (RDMA_PS_UDP, RDMA_PS_IB): not supported"},
		{[]string{"rstream", "-s", h.ip()}, rsocket},
		{[]string{"riostream", "-s", h.ip()}, rsocket},
		{[]string{"rcopy", src, h.ip() + ":" + filepath.Join(t.TempDir(), "dst")}, rsocket},
		{[]string{"rdma_client", "-s", h.ip(), "-p", freePort()}, "rdma_connect: Connection refused"},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			needPrograms(t, c.args[0])
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := h.program(ctx, c.args...).CombinedOutput()
			var exit *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() <= 0 || !strings.Contains(string(out), c.want) {
				t.Errorf("%s: %v (%v), want a failure saying %q:\n%s", strings.Join(c.args, " "), err, ctx.Err(), c.want, out)
			}
		})
	}
}

var groupSeq atomic.Int32

// newGroup returns a multicast group of 239.0.0.0/8 that no other test
// of this process, nor likely of another, has used.
func newGroup() string {
	n := os.Getpid()*7 + int(groupSeq.Add(1))
	return fmt.Sprintf("239.%d.%d.%d", 1+n/65536%254, n/256%256, 1+n%254)
}

// TestVerbsMckey: rdma_cm's multicast on RoCEv2. mckey joins a group
// (rdma_join_multicast_ex: the group's IPv4-mapped GID, the multicast QPN
// and RDMA_UDP_QKEY in MULTICAST_JOIN's param.ud) and receives ten
// datagrams that a second mckey, joined to the group too, sends to it
// with an address handle of the group's GID; both leave the group and
// say 'return status 0', on one daemon (the sender's device loops the
// group's datagrams back to itself) and on two in two network namespaces
// (sent out on the veth, which the receiver's daemon joined the group on).
// The namespaces need no route for 224.0.0.0/4: a daemon's socket is bound
// to its address, and Linux sends a multicast datagram from a bound
// address out of that address's interface (a veth is multicast-capable).
func TestVerbsMckey(t *testing.T) {
	bin, lib := needLibsoftnic(t, "mckey")
	for _, topology := range []func(*testing.T, string, string) verbsTopology{oneDaemon, twoDaemons} {
		tp := topology(t, bin, lib)
		t.Run(tp.name, func(t *testing.T) {
			group := newGroup()
			recv := []string{"stdbuf", "-oL", "mckey", "-m", group, "-b", tp.server.ip()}
			send := []string{"mckey", "-m", group, "-b", tp.client.ip(), "-s"}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var rbuf lockedBuffer
			r := tp.server.program(ctx, recv...)
			r.Stdout, r.Stderr = &rbuf, &rbuf
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- r.Wait() }()
			// The sender's datagrams reach only receivers joined before.
			for !strings.Contains(rbuf.String(), "mckey: joined dgid: ::ffff:"+group) {
				select {
				case err := <-done:
					t.Fatalf("%s exited (%v) before it joined:\n%s", strings.Join(recv, " "), err, rbuf.String())
				case <-ctx.Done():
					t.Fatalf("%s did not join:\n%s", strings.Join(recv, " "), rbuf.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			sout, err := tp.client.program(ctx, send...).CombinedOutput()
			if err != nil || !strings.Contains(string(sout), "return status 0") {
				t.Errorf("%s: %v:\n%s", strings.Join(send, " "), err, sout)
			}
			select {
			case err = <-done:
			case <-ctx.Done():
				err = ctx.Err()
			}
			if out := rbuf.String(); err != nil || !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
				t.Errorf("%s: %v:\n%s", strings.Join(recv, " "), err, out)
			}
		})
	}
}

// TestVerbsAsyncwatch: ibv_asyncwatch, waiting for the device's
// asynchronous events, prints IBV_EVENT_DEVICE_FATAL when the daemon
// stops, and then ends (status 1, ibv_get_async_event failing) rather
// than wait forever.
func TestVerbsAsyncwatch(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ibv_asyncwatch")
	rest, err := whenDaemonStops(t, bin, lib, "softnic0: async event FD", "stdbuf", "-oL", "ibv_asyncwatch")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(rest, "event_type IBV_EVENT_DEVICE_FATAL") {
		t.Fatalf("ibv_asyncwatch when the daemon stopped: %v, want status 1 after IBV_EVENT_DEVICE_FATAL: %q", err, rest)
	}
}

// whenDaemonStops runs a program on a daemon of its own, stops the daemon
// once the program's first line starts with ready, and returns what the
// program printed on stdout after that line and how it ended (killed
// after 30 s).
func whenDaemonStops(t *testing.T, bin, lib, ready string, args ...string) (rest string, err error) {
	t.Helper()
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := h.program(ctx, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	if l, err := r.ReadString('\n'); !strings.HasPrefix(l, ready) {
		cancel()
		cmd.Wait()
		t.Fatalf("%s did not open the device: %q %v\n%s", args[0], l, err, stderr.String())
	}
	h.stop()
	b, _ := io.ReadAll(r)
	err = cmd.Wait()
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return string(b), err
}

// needPrograms skips the test unless every program named is installed.
func needPrograms(t *testing.T, programs ...string) {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (Debian: apt-get install perftest rdmacm-utils ibverbs-utils): %v", p, err)
		}
	}
}

// TestVerbsSeeds compiles the C program of the seeds' rules
// (testdata/libsoftnic_seeds.c), which checks too an SRQ's limit and its
// IBV_EVENT_SRQ_LIMIT_REACHED, ibv_resize_cq and multicast's errnos and
// MULTICAST_JOIN event, against Debian's headers
// and libraries, and runs it on libsoftnic: every check must pass.
func TestVerbsSeeds(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	prog := compileC(t, "testdata/libsoftnic_seeds.c")
	// Traced, the daemon reads each datagram's traffic class, which a UD
	// receive's GRH then carries.
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0", "--pcap", filepath.Join(t.TempDir(), "seeds.pcap"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := h.program(ctx, prog, h.ip(), freePort(), filepath.Join(t.TempDir(), "scratch")).Output()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "\n0 failed\n") {
		t.Fatalf("the seeds' checks: %v", err)
	}
}

// TestVerbsEventPingpong runs a ping-pong whose two sides wait for each
// receive through their CQs' completion channels
// (testdata/event_pingpong.c), sleeping in poll(2) on the channel's
// descriptor, as a program with an event loop does, and in
// ibv_get_cq_event: every round trip must complete. It logs the round
// trip's median and 99th percentile. When the daemon stops under it, the
// waiting sides wake and the program fails (exit status 1), rather than
// sleep for ever.
func TestVerbsEventPingpong(t *testing.T) {
	bin, lib := needLibsoftnic(t)
	prog := compileC(t, "testdata/event_pingpong.c")
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	for _, mode := range []string{"poll", "block"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := h.program(ctx, prog, mode, "2000").CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("event_pingpong %s: %v\n%s", mode, err, out)
		}
		t.Logf("%s", out)
		_, err = whenDaemonStops(t, bin, lib, "connected", prog, mode, "1000000000")
		if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("event_pingpong %s when the daemon stopped: %v, want exit status 1", mode, err)
		}
	}
}

// compileC compiles a C program of testdata against Debian's libibverbs
// and librdmacm, and the libraries libs names (-lfabric).
func compileC(t *testing.T, src string, libs ...string) string {
	t.Helper()
	prog := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-Wall", "-Wextra", "-Werror", "-o", prog, src, "-libverbs", "-lrdmacm", "-lpthread"}, libs...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return prog
}

// TestVerbsMixed pairs perftest through libsoftnic with softnic perftest,
// softnic's own Go implementation of perftest's protocol, in both
// directions: a daemon in one network namespace, softnic perftest's
// embedded device in the other.
func TestVerbsMixed(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ib_write_bw")
	nsA, nsB, ipA, ipB := twoNamespaces(t)
	h := startVerbsHost(t, bin, lib, nsA, ipA+":4791")
	goPerftest := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nsB, bin, "perftest"}, args...)...)
	}
	size := fmt.Sprint(3*h.mtu + 3)
	for _, c := range []struct {
		test, tool string
		args       []string
	}{
		{"write_bw", "ib_write_bw", []string{"-s", size}},
		{"read_bw", "ib_read_bw", []string{"-s", size}},
		{"send_bw", "ib_send_bw", []string{"-s", size}},
		{"atomic_bw", "ib_atomic_bw", []string{"-A", "FETCH_AND_ADD"}},
		{"write_lat", "ib_write_lat", []string{"-s", size}},
	} {
		t.Run(c.test, func(t *testing.T) {
			port := freePort()
			lib := append([]string{c.tool, "-F", "-n", "100", "-p", port}, c.args...)
			gop := append([]string{c.test, "--bind", ipB, "-n", "100", "--oob-port", port}, c.args...)
			runCmds(t, 30*time.Second, goPerftest, gop, always, h.program, append(lib, ipB))
			port = freePort()
			lib[5], gop[6] = port, port
			runCmds(t, 30*time.Second, h.program, lib, always, goPerftest, append(gop, ipA))
		})
	}
}

// TestVerbsMixedAttached pairs perftest through libsoftnic with softnic
// perftest attached to the same daemon (SOFTNIC_SOCKET), in both
// directions, as cmd/libsoftnic/bench.sh compares them: on an attached
// device softnic perftest's write_lat watches its target for the peer's
// WRITEs (nic.MR.Word) as ib_write_lat polls its buffer.
func TestVerbsMixedAttached(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ib_write_lat")
	h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
	goAttached := func(ctx context.Context, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, bin, append([]string{"perftest"}, args...)...)
		c.Env = append(os.Environ(), "SOFTNIC_SOCKET="+h.control)
		return c
	}
	udp := fmt.Sprint(h.addr.Port())
	for _, c := range []struct {
		test, tool string
		args       []string
	}{
		{"write_lat", "ib_write_lat", []string{"-s", "8"}},
		{"write_lat several packets", "ib_write_lat", []string{"-s", fmt.Sprint(2*h.mtu + 5)}},
		{"write_bw", "ib_write_bw", []string{"-s", "65536"}},
		{"read_bw", "ib_read_bw", []string{"-s", "65536"}},
	} {
		t.Run(c.test, func(t *testing.T) {
			test, _, _ := strings.Cut(c.test, " ")
			port := freePort()
			lib := append([]string{c.tool, "-F", "-n", "100", "-p", port}, c.args...)
			gop := append([]string{test, "--port", udp, "-n", "100", "--oob-port", port}, c.args...)
			runCmds(t, 30*time.Second, goAttached, gop, always, h.program, append(lib, h.ip()))
			port = freePort()
			lib[5], gop[6] = port, port
			runCmds(t, 30*time.Second, h.program, lib, always, goAttached, append(gop, h.ip()))
		})
	}
}

// TestVerbsFaults: a program killed in the middle of a transfer leaves
// nothing in the daemon, and a daemon that stops in the middle of one
// makes the programs' verbs fail, so that they end instead of hanging,
// and raises IBV_EVENT_DEVICE_FATAL for a program waiting for events.
func TestVerbsFaults(t *testing.T) {
	bin, lib := needLibsoftnic(t, "ib_write_bw")
	// transfer starts a 30-second ib_write_bw pair and returns once the
	// daemon has moved a thousand packets for it.
	transfer := func(t *testing.T, h *verbsHost) (server, client *exec.Cmd, done chan error) {
		port := freePort()
		args := []string{"ib_write_bw", "-F", "-p", port, "-D", "30", "-s", "4096"}
		server, client = h.program(context.Background(), args...), h.program(context.Background(), append(args, h.ip())...)
		done = make(chan error, 2)
		for _, c := range []*exec.Cmd{server, client} {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Process.Kill() })
			go func() { done <- c.Wait() }()
			if c != server {
				continue
			}
			// The server listens for its client's TCP connection first.
			waitFor(20*time.Second, func() bool { return len(done) > 0 || tcpListening(t, port) })
			if !tcpListening(t, port) {
				t.Fatalf("the ib_write_bw server does not listen on TCP port %s", port)
			}
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var stat map[string]uint64
			h.inspect(t, "stat", &stat)
			if stat["sent_pkts"] > 1000 {
				return server, client, done
			}
			if time.Now().After(deadline) || len(done) > 0 {
				t.Fatalf("the transfer did not start: %d packets sent", stat["sent_pkts"])
			}
		}
	}
	t.Run("program killed", func(t *testing.T) {
		h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
		// The daemon's own QP and regions, which stay.
		var qps0, regions0 []json.RawMessage
		h.inspect(t, "qp", &qps0)
		h.inspect(t, "mr", &regions0)
		server, client, done := transfer(t, h)
		client.Process.Kill()
		server.Process.Kill()
		<-done
		<-done
		type info struct{ Attached, Regions, Connections int }
		var in info
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			h.inspect(t, "info", &in)
			if in == (info{Regions: 1}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the programs were killed the daemon still has %+v, want its own region alone", in)
			}
		}
		var qps, regions []json.RawMessage
		h.inspect(t, "qp", &qps)
		h.inspect(t, "mr", &regions)
		if len(qps) != len(qps0) || len(regions) != len(regions0) {
			t.Errorf("softnic qp lists %d QPs, softnic mr %d regions; want the daemon's own, %d and %d", len(qps), len(regions), len(qps0), len(regions0))
		}
	})
	t.Run("daemon stopped: IBV_EVENT_DEVICE_FATAL", func(t *testing.T) {
		prog := compileC(t, "testdata/libsoftnic_device_fatal.c")
		if rest, err := whenDaemonStops(t, bin, lib, "ready\n", prog); err != nil || rest != "event: local catastrophic error\n" {
			t.Fatalf("a program waiting in ibv_get_async_event when the daemon stopped: %v: %q", err, rest)
		}
	})
	t.Run("daemon stopped", func(t *testing.T) {
		h := startVerbsHost(t, bin, lib, "", "127.0.0.1:0")
		_, _, done := transfer(t, h)
		h.stop()
		for range 2 {
			select {
			case err := <-done:
				if err == nil {
					t.Error("a program whose daemon stopped in the middle of a transfer exited with status 0")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("a program whose daemon stopped is still running 20 s later")
			}
		}
	})
}

// tcpListening reports whether a socket of this host listens on TCP port
// port, as ss -ltn would show it, without connecting to it (a perftest
// server takes the first connection for its client's).
func tcpListening(t *testing.T, port string) bool {
	t.Helper()
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("port %q: %v", port, err)
	}
	want := fmt.Sprintf(":%04X ", n)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			// sl local_address rem_address st ...: state 0A is LISTEN.
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1]+" ", want) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}
