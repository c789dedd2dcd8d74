//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/qp"
)

// The attacks of issue 14 on the local side of the daemon, each repeated
// at a scale that reaches the limit it meets, and the daemon's state
// afterwards.

// conns are connections to a control socket that send nothing, from
// child processes (the daemon awaits control.PerProcess of one process's
// at most).
type conns []*childProc

// silentConns opens n connections to the control socket at path from
// child processes of control.PerProcess connections each, which the
// test's cleanup ends if close has not.
func silentConns(t *testing.T, path string, n int) *conns {
	t.Helper()
	cs := &conns{}
	for ; n > 0; n -= control.PerProcess {
		c := startChild(t, nil, nil, "silent", path, strconv.Itoa(min(n, control.PerProcess)))
		if line := string(c.line(t)); line != "ready\n" {
			t.Fatalf("silent connections: %q; stderr:\n%s", line, c.stderr)
		}
		*cs = append(*cs, c)
	}
	return cs
}

// close closes the connections: the children exit.
func (cs *conns) close(t *testing.T) {
	for _, c := range *cs {
		c.end(t)
	}
	*cs = nil
}

// TestControlSurvivesEMFILE: a daemon whose descriptors run out (a limit
// of 64, and 80 connections that send nothing, control.PerUser of them
// awaited at once) stops accepting while
// they last and answers again once they are gone: its accept loop waits
// out EMFILE instead of taking it for the socket's end, counts it
// (control_accept_errors) and logs it once (at most once a minute).
func TestControlSurvivesEMFILE(t *testing.T) {
	d := startChildDaemon(t, []string{childNoFileEnv + "=64"})
	silent := silentConns(t, d.control, 80)
	const warning = "accept failed"
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.stderr.String(), warning); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not run out of descriptors with 80 connections and a limit of 64; stderr:\n%s", d.stderr)
		}
	}
	silent.close(t)
	// The backoff waits at most a second between tries.
	var info control.Info
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := control.Call(ctx, d.control, "info", &info); err != nil {
		t.Fatalf("info once the connections are gone: %v; stderr:\n%s", err, d.stderr)
	}
	if info.PID != d.cmd.Process.Pid {
		t.Errorf("info answers pid %d, want the daemon's %d", info.PID, d.cmd.Process.Pid)
	}
	var stat map[string]uint64
	if err := control.Call(ctx, d.control, "stat", &stat); err != nil {
		t.Fatal(err)
	}
	if stat["control_accept_errors"] == 0 {
		t.Errorf("control_accept_errors = 0 after the daemon ran out of descriptors")
	}
	if n := strings.Count(d.stderr.String(), warning); n != 1 {
		t.Errorf("%d %q lines within a minute, want 1; stderr:\n%s", n, warning, d.stderr)
	}
}

// attacker is one process's attack on a daemon: the devices it attached
// and what it made on them. It runs in the test's process, or in a child
// (the probe mode) for an attack from several processes or another user.
type attacker struct {
	path string
	devs []*nic.Device
	pd   *nic.PD  // on the first device
	cq   *nic.CQ  // on the first device
	keep []func() // to end what waits
}

// attach attaches one more session.
func (a *attacker) attach() error {
	dev, err := nic.Open(nic.Config{Attach: a.path})
	if err == nil {
		a.devs = append(a.devs, dev)
	}
	return err
}

// prepare gives the attacker a session, a PD and a CQ.
func (a *attacker) prepare() error {
	if len(a.devs) == 0 {
		if err := a.attach(); err != nil {
			return err
		}
	}
	var err error
	if a.pd == nil {
		if a.pd, err = a.devs[0].AllocPD(); err == nil {
			a.cq, err = a.devs[0].CreateCQ(16)
		}
	}
	return err
}

// upTo calls make until it fails or max calls succeeded, and returns how
// many succeeded and the failure.
func upTo(max int, make func() error) (int, error) {
	for n := range max {
		if err := make(); err != nil {
			return n, err
		}
	}
	return max, nil
}

// run carries out one attack: sessions N, qps N (of the smallest queues),
// regions N SIZE, cq DEPTH or waits N (accept_request calls that wait,
// run at once); it returns how many it made and the refusal that stopped
// it.
func (a *attacker) run(cmd string, args ...int) (int, error) {
	if cmd != "sessions" {
		if err := a.prepare(); err != nil {
			return 0, err
		}
	}
	switch cmd {
	case "sessions":
		return upTo(args[0], a.attach)
	case "qps":
		return upTo(args[0], func() error {
			_, err := a.pd.CreateQP(nic.QPConfig{SendCQ: a.cq, MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 1})
			return err
		})
	case "regions":
		return upTo(args[0], func() error {
			_, err := a.pd.AllocMR(args[1], mr.LocalWrite)
			return err
		})
	case "cq":
		_, err := a.devs[0].CreateCQ(args[0])
		return 0, err
	case "waits":
		return a.waits(args[0])
	}
	return 0, fmt.Errorf("no attack %q", cmd)
}

// waits has n accept_request calls wait on a listener at once, and
// returns how many wait and a refusal of those that do not.
func (a *attacker) waits(n int) (int, error) {
	port := uint16(20000 + os.Getpid()%20000 + len(a.keep)) // one the attacking processes do not share
	l, err := a.devs[0].Listen(port, nic.ListenOptions{PD: a.pd, QP: nic.QPConfig{SendCQ: a.cq}})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.keep = append(a.keep, cancel)
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := l.AcceptRequest(ctx)
			errs <- err
		}()
	}
	// The calls past the limit fail at once, each with EAGAIN; the others
	// wait, as the daemon counts them, until the attacker lets go.
	key := fmt.Sprintf("pid%d_waits", os.Getpid())
	refusal, nrefused := error(nil), 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-errs:
			if !errors.Is(err, nic.ErrAgain) {
				return 0, fmt.Errorf("an accept_request ended with %v", err)
			}
			refusal, nrefused = err, nrefused+1
			continue
		default:
		}
		var stat map[string]int
		if err := control.Call(context.Background(), a.path, "stat", &stat); err != nil {
			return 0, err
		}
		if stat[key]+nrefused == n {
			return stat[key], refusal
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("of %d accept_requests, %d refused and the rest not all waiting", n, nrefused)
}

// close detaches every session.
func (a *attacker) close() {
	for _, f := range a.keep {
		f()
	}
	for _, d := range a.devs {
		d.Close()
	}
	*a = attacker{path: a.path}
}

// probeResult is what a probe child answers for one command.
type probeResult struct {
	N      int    `json:"n"`
	Error  string `json:"error,omitempty"`
	Errno  string `json:"errno,omitempty"` // EAGAIN, ENOMEM or EACCES
	Stdout string `json:"stdout,omitempty"`
}

// runProbe attacks the daemon at args[0] from a process of its own: each
// line of stdin is an attacker's command and its numbers, or "run" and a
// softnic command line; each gets a line of JSON (probeResult). It
// detaches when stdin closes.
func runProbe(args []string) int {
	a := &attacker{path: args[0]}
	defer a.close()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var r probeResult
		var err error
		switch f[0] {
		case "run":
			var out, stderr strings.Builder
			r.N = run(f[1:], &out, &stderr)
			r.Stdout, r.Error = out.String(), stderr.String()
		default:
			nums := make([]int, len(f)-1)
			for i, s := range f[1:] {
				nums[i], _ = strconv.Atoi(s)
			}
			r.N, err = a.run(f[0], nums...)
		}
		if err != nil {
			r.Error, r.Errno = err.Error(), errnoName(err)
		}
		enc.Encode(&r)
	}
	return 0
}

// errnoName names the errno of an attach refusal.
func errnoName(err error) string {
	for _, e := range []struct {
		name string
		err  error
	}{{"EAGAIN", nic.ErrAgain}, {"ENOMEM", nic.ErrNoMem}, {"EACCES", nic.ErrAccess}} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return ""
}

// probe is a probe child.
type probe struct{ *childProc }

// startProbe starts a probe of the daemon at path, as cred (nil: the
// test's user).
func startProbe(t *testing.T, cred *syscall.Credential, path string) probe {
	t.Helper()
	if cred != nil {
		needRoot(t)
	}
	c := startChild(t, cred, nil, "probe", path)
	if got := string(c.line(t)); got != "ready\n" {
		t.Fatalf("probe: %q; stderr:\n%s", got, c.stderr)
	}
	return probe{c}
}

// do sends the probe one command and returns its answer.
func (p probe) do(t *testing.T, cmd string) probeResult {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		t.Fatal(err)
	}
	var r probeResult
	if err := json.Unmarshal(p.line(t), &r); err != nil {
		t.Fatalf("probe %q: %v", cmd, err)
	}
	return r
}

// daemonLoad is what an attack could leave behind in a daemon.
type daemonLoad struct {
	goroutines, heap, fds, qps uint64
	shared                     uint64 // mappings of shared memory (memfds): regions, rings, doorbells
	held                       uint64 // sessions, objects and mappings the attached processes hold
}

func (l daemonLoad) String() string {
	return fmt.Sprintf("%d goroutines, %s of live heap, %d descriptors, %d mappings of shared memory, %d QPs, %d held by attached processes",
		l.goroutines, quota.FormatSize(int64(l.heap)), l.fds, l.shared, l.qps, l.held)
}

// loadOf reads the load of the daemon at ctlPath, process pid: its
// stat, and its descriptors and mappings in /proc. A daemon in the test's
// process is collected first, so that its live heap is now's.
func loadOf(t *testing.T, ctlPath string, pid int) daemonLoad {
	t.Helper()
	if pid == os.Getpid() {
		runtime.GC()
		runtime.GC() // what the first left in sync.Pools
	}
	var m map[string]uint64
	if err := control.Call(context.Background(), ctlPath, "stat", &m); err != nil {
		t.Fatalf("stat: %v", err)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return daemonLoad{goroutines: m["goroutines"], heap: m["heap_live_bytes"], fds: uint64(openFiles(t, pid)),
		shared: uint64(bytes.Count(maps, []byte(" /memfd:"))), qps: m["qps"],
		held: m["quota_total_sessions"] + m["quota_total_objects"] + m["quota_total_mappings"]}
}

// settles waits until the daemon's load is back near before (a detach is
// the daemon's to finish) and fails t if it is not within 10 s. The heap
// is compared only for a daemon in the test's process, collected.
func settles(t *testing.T, ctlPath string, pid int, before daemonLoad) {
	t.Helper()
	near := func(l daemonLoad) bool {
		return l.goroutines <= before.goroutines+8 && l.fds <= before.fds+8 && l.shared == before.shared && l.qps == before.qps &&
			l.held == 0 && (pid != os.Getpid() || l.heap <= before.heap+32<<20)
	}
	var l daemonLoad
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if l = loadOf(t, ctlPath, pid); near(l) || time.Now().After(deadline) {
			break
		}
	}
	if !near(l) {
		t.Errorf("the daemon's load did not come back:\nbefore: %v\nafter:  %v", before, l)
	}
	var info control.Info
	if err := control.Call(context.Background(), ctlPath, "info", &info); err != nil || info.PID != pid {
		t.Errorf("info after the attack: pid %d, %v", info.PID, err)
	}
}

// refused checks that err is a refusal with errno naming the limit
// (scope.resource) and the flag that raises it.
func refused(t *testing.T, what string, err error, errno, limit string) {
	t.Helper()
	if err == nil || errnoName(err) != errno || !strings.Contains(err.Error(), "softnic serve --limit "+limit+"=N raises it") {
		t.Errorf("%s: %v, want %s naming softnic serve --limit %s", what, err, errno, limit)
	}
}

// probeRefused is refused for a probe's answer.
func probeRefused(t *testing.T, what string, r probeResult, errno, limit string) {
	t.Helper()
	if r.Errno != errno || !strings.Contains(r.Error, "softnic serve --limit "+limit+"=N raises it") {
		t.Errorf("%s: %q (%s), want %s naming softnic serve --limit %s", what, r.Error, r.Errno, errno, limit)
	}
}

// fromUser repeats attack cmd from four more processes of the test's
// user, after the test's process made n of what it makes: the first three
// reach their own limit of resource (process.resource), the fourth finds
// the user's spent (uid.resource), refused with errno; each process but
// the last makes per. It returns the probes, for the caller to end.
func fromUser(t *testing.T, control string, n, per int, cmd, errno, resource string) []probe {
	t.Helper()
	made := []int{n}
	var probes []probe
	for i := range 4 {
		p := startProbe(t, nil, control)
		probes = append(probes, p)
		r := p.do(t, cmd)
		made = append(made, r.N)
		if i < 3 {
			probeRefused(t, "another process's "+cmd, r, errno, "process."+resource)
		} else {
			probeRefused(t, "the user's "+cmd, r, errno, "uid."+resource)
		}
	}
	if want := fmt.Sprint([]int{per, per, per, per, 0}); fmt.Sprint(made) != want {
		t.Errorf("%s from five processes of one user: %v made, want %s", cmd, made, want)
	}
	return probes
}

// TestAttackSessions: one process opening sessions until it runs the
// daemon out of descriptors (about 10,000 did once, and the control
// socket died for good) is refused at its share of them, then each
// further process of the user, then the user; the daemon answers info
// throughout, and once they let go its descriptors and goroutines are
// back where they were. The daemon's limit is 1024 descriptors (320
// under the race detector), of which attached processes get three
// quarters: a process an eighth of those (96, 19 sessions of 5; 30, 6
// sessions), a user half (384 or 120, four processes' worth, which
// leaves a fifth process less than a session's 5 descriptors).
func TestAttackSessions(t *testing.T) {
	nofile := 1024
	if raceEnabled {
		nofile = 320
	}
	per := (nofile - nofile/4) / 8 / 5
	d := startChildDaemon(t, []string{childNoFileEnv + "=" + strconv.Itoa(nofile)})
	pid := d.cmd.Process.Pid
	before := loadOf(t, d.control, pid)
	a := &attacker{path: d.control}
	defer a.close()
	n, err := a.run("sessions", 10000)
	if n != per {
		t.Errorf("%d sessions of one process, want %d", n, per)
	}
	refused(t, "one more session", err, "ENOMEM", "process.descriptors")
	probes := fromUser(t, d.control, n, per, "sessions 10000", "ENOMEM", "descriptors")
	var info control.Info
	if err := control.Call(context.Background(), d.control, "info", &info); err != nil || info.Attached != 4 {
		t.Errorf("info under attack: %d processes attached, %v; want 4", info.Attached, err)
	}
	var stat map[string]uint64
	control.Call(context.Background(), d.control, "stat", &stat)
	if stat["quota_refused_descriptors"] != 5 || stat["control_accept_errors"] != 0 {
		t.Errorf("stat counts %d refusals and %d accept errors, want 5 and 0", stat["quota_refused_descriptors"], stat["control_accept_errors"])
	}
	a.close()
	for _, p := range probes {
		p.end(t)
	}
	settles(t, d.control, pid, before)
}

// TestAttackMappings: 16 sessions of one process registering regions of
// 4 KiB, each its own mapping in the daemon, until refused (16 × 4,090
// once filled the kernel's map table, after which a CQ of 4 Mi entries
// ended the daemon on its first allocation): the process is refused at
// its share of vm.max_map_count, ENOMEM; of two CQs of qp.MaxCQE entries
// (256 MiB of the daemon's heap each) the second at least is refused,
// ENOMEM, before anything is allocated; the daemon answers throughout,
// and once the process detaches its mappings, descriptors, goroutines and
// heap are back.
func TestAttackMappings(t *testing.T) {
	var args []string
	if raceEnabled {
		args = []string{"--limit", "process.mappings=1024"}
	}
	d := startDaemon(t, args...)
	pid := os.Getpid()
	before := loadOf(t, d.control, pid)
	var attackers []*attacker
	defer func() {
		for _, a := range attackers {
			a.close()
		}
	}()
	var err error
	total := 0
	for range 16 {
		a := &attacker{path: d.control}
		attackers = append(attackers, a)
		var n int
		n, err = a.run("regions", 4090, 4096)
		total += n
		if err != nil {
			break
		}
	}
	refused(t, fmt.Sprintf("region %d", total+1), err, "ENOMEM", "process.mappings")
	prefix := fmt.Sprintf("pid%d_", pid)
	if m := d.counter(t, prefix+"mappings"); m != d.counter(t, prefix+"mappings_limit") || total < 1000 {
		t.Errorf("%d regions, %d mappings of the process, want as many as its limit of %d", total, m, d.counter(t, prefix+"mappings_limit"))
	}
	a := attackers[0]
	_, first := a.run("cq", qp.MaxCQE)
	if first != nil && errnoName(first) != "ENOMEM" {
		t.Errorf("a CQ of %d entries: %v, want success or ENOMEM", qp.MaxCQE, first)
	}
	_, second := a.run("cq", qp.MaxCQE)
	if errnoName(second) != "ENOMEM" || !strings.Contains(second.Error(), "softnic serve --limit process.") {
		t.Errorf("a second CQ of %d entries: %v, want ENOMEM at a limit of the process", qp.MaxCQE, second)
	}
	under := loadOf(t, d.control, pid)
	if limit := d.counter(t, prefix+"heap_limit"); under.heap > before.heap+limit+64<<20 {
		t.Errorf("the daemon's live heap went from %s to %s, past the process's limit of %s", quota.FormatSize(int64(before.heap)),
			quota.FormatSize(int64(under.heap)), quota.FormatSize(int64(limit)))
	}
	for _, a := range attackers {
		a.close()
	}
	settles(t, d.control, pid, before)
}

// TestAttackQPs: five sessions of one process creating QPs until refused
// (five once took all 16,384 QPs of the device, and remote peers were
// rejected from then on) stop at the process's limit, ENOMEM; further
// processes of the user at the user's; and a remote peer still connects,
// from the QPs kept for the daemon. The limits are scaled down (100 a
// process, 250 a user, 300 in all) to stay quick; DefaultLimits keeps a
// quarter of the device's QPs from attached processes.
func TestAttackQPs(t *testing.T) {
	path := filepath.Join(sharedDir(t, 0o755), "ctl.sock")
	d := startDaemonAt(t, path, "--region", "mem:4k:rw", "--allow-group", "nogroup",
		"--limit", "process.qps=100", "--limit", "uid.qps=250", "--limit", "total.qps=300")
	pid := os.Getpid()
	before := loadOf(t, d.control, pid)
	var made []int
	var attackers []*attacker
	defer func() {
		for _, a := range attackers {
			a.close()
		}
	}()
	for i := range 5 {
		a := &attacker{path: d.control}
		attackers = append(attackers, a)
		n, err := a.run("qps", 20000)
		made = append(made, n)
		refused(t, fmt.Sprintf("session %d's QPs", i), err, "ENOMEM", "process.qps")
	}
	remote := func(when string) {
		t.Helper()
		if code, _, stderr := d.op(0, "write", "--addr", d.addr(0, 0), "--data", "still here"); code != 0 {
			t.Errorf("a remote peer's WRITE %s: exit status %d, %s", when, code, stderr)
		}
	}
	remote("once one process is at its limit")
	p1, p2 := startProbe(t, nil, d.control), startProbe(t, nil, d.control)
	r := p1.do(t, "qps 20000")
	made = append(made, r.N)
	probeRefused(t, "another process's QPs", r, "ENOMEM", "process.qps")
	r = p2.do(t, "qps 20000")
	made = append(made, r.N)
	probeRefused(t, "the user's QPs", r, "ENOMEM", "uid.qps")
	if fmt.Sprint(made) != "[100 0 0 0 0 100 50]" {
		t.Errorf("QPs made by five sessions of one process, then two processes: %v, want [100 0 0 0 0 100 50]", made)
	}
	remote("once the user is at its limit")
	if os.Geteuid() == 0 {
		other := startProbe(t, nobody, d.control)
		r = other.do(t, "qps 20000")
		if r.N != 50 {
			t.Errorf("another user made %d QPs, want the 50 left of 300", r.N)
		}
		probeRefused(t, "the attached processes' QPs", r, "ENOMEM", "total.qps")
		remote("once every attached process together is at the limit")
		other.end(t)
	} else {
		t.Log("not root: the total's limit, which takes another user, is not tried")
	}
	for _, a := range attackers {
		a.close()
	}
	p1.end(t)
	p2.end(t)
	settles(t, d.control, pid, before)
}

// TestAttackWaits: accept_request calls that wait, each a goroutine of
// the daemon (100,000 once took 100,012 goroutines and 758 MB), are
// refused past the process's limit, then the user's, EAGAIN at once: five
// processes of a user calling 2,000 times each have 4,096 calls wait (a
// quarter of that under the race detector); the daemon's goroutines stay
// within that, and come back once the processes let go.
func TestAttackWaits(t *testing.T) {
	per, calls := 1024, 2000
	var args []string
	if raceEnabled {
		per, calls = 256, 500
		args = []string{"--limit", "process.waits=256", "--limit", "uid.waits=1024"}
	}
	d := startChildDaemon(t, nil, args...)
	pid := d.cmd.Process.Pid
	before := loadOf(t, d.control, pid)
	a := &attacker{path: d.control}
	defer a.close()
	n, err := a.run("waits", calls)
	refused(t, "one more call", err, "EAGAIN", "process.waits")
	probes := fromUser(t, d.control, n, per, fmt.Sprintf("waits %d", calls), "EAGAIN", "waits")
	under := loadOf(t, d.control, pid)
	if under.goroutines > before.goroutines+uint64(4*per)+64 {
		t.Errorf("%d goroutines under attack, from %d, with %d calls waiting", under.goroutines, before.goroutines, 4*per)
	}
	var stat map[string]uint64
	control.Call(context.Background(), d.control, "stat", &stat)
	if want := uint64(5*calls - 4*per); stat["quota_refused_waits"] != want {
		t.Errorf("quota_refused_waits = %d, want %d", stat["quota_refused_waits"], want)
	}
	a.close()
	for _, p := range probes {
		p.end(t)
	}
	settles(t, d.control, pid, before)
}

// TestAttackSnooping: a user the daemon admits (--allow-group) who is not
// its owner sees only their own processes' QPs, regions and counters: the
// QPNs, PSNs, keys and addresses of another's are what it takes to write
// into its memory (a program once did, 3 times of 3, from softnic qp and
// mr --json). The daemon's owner sees everything.
func TestAttackSnooping(t *testing.T) {
	path := filepath.Join(sharedDir(t, 0o755), "ctl.sock")
	victim := &attacker{path: path}
	defer victim.close()
	d := startDaemonAt(t, path, "--allow-group", "nogroup")
	p := startProbe(t, nobody, d.control)
	for _, a := range []struct {
		cmd string
		n   int
	}{{"qps", 1}, {"regions", 1}} {
		if n, err := victim.run(a.cmd, a.n, 4096); n != a.n || err != nil {
			t.Fatalf("the victim's %s: %d, %v", a.cmd, n, err)
		}
		if r := p.do(t, fmt.Sprintf("%s %d 4096", a.cmd, a.n)); r.N != a.n || r.Error != "" {
			t.Fatalf("the other user's %s: %+v", a.cmd, r)
		}
	}
	self, other := os.Getpid(), p.cmd.Process.Pid
	pidsOf := func(out string, rows any) map[int]bool {
		t.Helper()
		if err := json.Unmarshal([]byte(out), rows); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		pids := map[int]bool{}
		switch r := rows.(type) {
		case *[]control.QPRow:
			for _, x := range *r {
				pids[x.PID] = true
			}
		case *[]control.RegionRow:
			for _, x := range *r {
				pids[x.PID] = true
			}
		}
		return pids
	}
	for _, cmd := range []string{"qp", "mr"} {
		var rows any = &[]control.QPRow{}
		if cmd == "mr" {
			rows = &[]control.RegionRow{}
		}
		r := p.do(t, "run "+cmd+" --json --control "+path)
		if seen := pidsOf(r.Stdout, rows); r.N != 0 || len(seen) != 1 || !seen[other] {
			t.Errorf("the other user's %s lists the objects of processes %v (exit status %d, %s), want its own (%d) alone", cmd, seen, r.N, r.Error, other)
		}
		_, out, _ := runCmd(cmd, "--json", "--control", path)
		if seen := pidsOf(out, rows); !seen[self] || !seen[other] {
			t.Errorf("the owner's %s lists the objects of processes %v, want %d's and %d's", cmd, seen, self, other)
		}
	}
	r := p.do(t, "run stat --json --control "+path)
	var stat map[string]uint64
	if err := json.Unmarshal([]byte(r.Stdout), &stat); err != nil {
		t.Fatalf("%v: %q", err, r.Stdout)
	}
	for name := range stat {
		if strings.HasPrefix(name, fmt.Sprintf("pid%d_", self)) || strings.HasPrefix(name, "quota_uid0_") {
			t.Errorf("the other user's stat shows %s", name)
		}
	}
	if stat[fmt.Sprintf("pid%d_qps", other)] != 1 || stat["quota_uid65534_qps"] != 1 {
		t.Errorf("the other user's stat does not show its own process and uid")
	}
}

// TestControlFlood: connections that send nothing, from processes of one
// user, hold at most control.PerUser of the daemon's descriptors; the
// daemon refuses the rest as they come and counts them; once they are
// gone it answers. (That it defers accepts beyond control.Pending, which
// only several users' connections reach, is TestControlLimits in package
// control.)
func TestControlFlood(t *testing.T) {
	const flood = 5 * control.PerProcess
	d := startChildDaemon(t, nil)
	pid := d.cmd.Process.Pid
	before := openFiles(t, pid)
	silent := silentConns(t, d.control, flood)
	most := 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		most = max(most, openFiles(t, pid)-before)
	}
	if most < control.PerUser || most > control.PerUser+8 {
		t.Errorf("%d silent connections held %d more descriptors of the daemon, want about %d", flood, most, control.PerUser)
	}
	silent.close(t)
	var stat map[string]uint64
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := control.Call(ctx, d.control, "stat", &stat); err != nil {
		t.Fatalf("stat after the flood: %v", err)
	}
	if stat["control_refused_busy"] != flood-control.PerUser || stat["control_accept_errors"] != 0 {
		t.Errorf("control_refused_busy %d, control_accept_errors %d; want %d and none",
			stat["control_refused_busy"], stat["control_accept_errors"], flood-control.PerUser)
	}
}
