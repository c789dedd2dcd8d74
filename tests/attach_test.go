package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// shmRingSize is the size of the send ring of a QP with n WRs and the
// default SGEs and inline size.
func shmRingSize(n int) int {
	return shm.RingSize(n, shm.SendSlotSize(qp.DefaultMaxSGE, qp.DefaultMaxInline))
}

// The attach tests run what attach mode is for: several processes
// sharing one softnic serve. The daemon is the real command; the attached
// processes are this test binary started again as a worker
// (TestAttachedWorker), told what to do through the environment.

// serveDaemon is a softnic serve started by a test.
type serveDaemon struct {
	bin     string
	control string
	ready   cliReady
	stderr  *lockedBuffer
}

// startServe runs softnic serve on a free loopback port, with the further
// flags args, until the test ends.
func startServe(t *testing.T, bin string, args ...string) *serveDaemon {
	t.Helper()
	nictest.MustHaveAttach(t)
	d := &serveDaemon{bin: bin, control: filepath.Join(t.TempDir(), "ctl.sock"), stderr: &lockedBuffer{}}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--control", d.control, "--log-level", "info"}, args...)...)
	cmd.Stderr = d.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || json.Unmarshal([]byte(line), &d.ready) != nil {
		t.Fatalf("softnic serve: ready line %q, %v\nstderr:\n%s", line, err, d.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return d
}

// inspect runs softnic CMD --json against the daemon and decodes it into v.
func (d *serveDaemon) inspect(t *testing.T, cmd string, v any) {
	t.Helper()
	code, out, errOut := softnicCmd(t, d.bin, cmd, "--control", d.control, "--json")
	if code != 0 || json.Unmarshal([]byte(out), v) != nil {
		t.Fatalf("softnic %s: exit status %d, stdout %q, stderr %q", cmd, code, out, errOut)
	}
}

// owned is what the listings show of one resource: its owner.
type owned struct {
	PID   int    `json:"pid"`
	QPN   uint32 `json:"qpn"`
	LKey  uint32 `json:"lkey"`
	State string `json:"state"`
}

// pids returns, for each PID, how many of the daemon's QPs and regions it
// owns.
func (d *serveDaemon) pids(t *testing.T) (qps, regions map[int]int) {
	t.Helper()
	var q, r []owned
	d.inspect(t, "qp", &q)
	d.inspect(t, "mr", &r)
	qps, regions = map[int]int{}, map[int]int{}
	for _, x := range q {
		qps[x.PID]++
	}
	for _, x := range r {
		regions[x.PID]++
	}
	return qps, regions
}

// The worker's environment.
const (
	envWorker = "SOFTNIC_TEST_WORKER" // the worker's index; set only in workers
	envTarget = "SOFTNIC_TEST_TARGET" // address,cm port,rkey,addr of the remote region
	envRounds = "SOFTNIC_TEST_ROUNDS"
)

// workerSize is what each worker writes and reads back per round.
const workerSize = 1 << 20

// pattern fills b with the bytes worker i writes in round r.
func pattern(b []byte, i, r int) {
	fillRandom(rand.New(rand.NewPCG(uint64(i), uint64(r))), b)
}

// TestAttachedWorker is not a test of its own: it is the body of the
// attached processes of the tests below, which run this binary again with
// -test.run=^TestAttachedWorker$ and the worker's environment.
//
// A worker attaches through SOFTNIC_SOCKET, as a program written for an
// embedded NIC would, connects to the target through the daemon's
// connection manager (its index as private data), prints "ready PID QPN",
// waits for a line on stdin, then each round WRITEs a MiB of its pattern
// to its area of the target's region and READs it back, printing "round
// N ok"; then "done", and it exits when stdin closes.
func TestAttachedWorker(t *testing.T) {
	if os.Getenv(envWorker) == "" {
		t.Skip("run by the attach tests as an attached process")
	}
	if err := runWorker(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runWorker() error {
	index, _ := strconv.Atoi(os.Getenv(envWorker))
	rounds, _ := strconv.Atoi(os.Getenv(envRounds))
	var addr string
	var port uint16
	var rkey uint32
	var base uint64
	if _, err := fmt.Sscanf(os.Getenv(envTarget), "%s %d %d %d", &addr, &port, &rkey, &base); err != nil {
		return fmt.Errorf("%s: %w", envTarget, err)
	}
	target, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	dev, err := nic.Open(nic.Config{}) // attached: SOFTNIC_SOCKET is set
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(16)
	if err != nil {
		return err
	}
	m, err := pd.AllocMR(2*workerSize, mr.LocalWrite)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := dev.Dial(ctx, target, port, nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}, PrivateData: []byte{byte(index)}})
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Printf("ready %d %d\n", os.Getpid(), conn.QP().Num())
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err != nil {
		return err
	}
	remote := base + uint64(index*workerSize)
	src, back := m.Bytes()[:workerSize], m.Bytes()[workerSize:]
	var wc [1]verbs.WC
	for r := range rounds {
		pattern(src, index, r)
		for i, wr := range []verbs.SendWR{
			{ID: 1, Opcode: verbs.WRWrite, SGL: []verbs.SGE{m.SGE(0, workerSize)}, RemoteAddr: remote, RKey: rkey},
			{ID: 2, Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(workerSize, workerSize)}, RemoteAddr: remote, RKey: rkey},
		} {
			if err := conn.QP().PostSend(&wr); err != nil {
				return fmt.Errorf("round %d, post %d: %w", r, i, err)
			}
		}
		if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
			return fmt.Errorf("round %d: completion %v, %v", r, wc[0].String(), err)
		}
		if !bytes.Equal(src, back) {
			return fmt.Errorf("round %d: the MiB read back differs from the MiB written", r)
		}
		fmt.Printf("round %d ok\n", r)
	}
	fmt.Println("done")
	io.Copy(io.Discard, stdin)
	return nil
}

// workerProc is a running worker.
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line; closed at EOF
	pid   int
	qpn   uint32
}

// startWorker starts worker index attached to d, with target as the
// remote side.
func startWorker(t *testing.T, d *serveDaemon, index, rounds int, target string) *workerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttachedWorker$")
	cmd.Env = append(os.Environ(), nic.EnvSocket+"="+d.control, envWorker+"="+strconv.Itoa(index),
		envRounds+"="+strconv.Itoa(rounds), envTarget+"="+target)
	w := &workerProc{cmd: cmd, lines: make(chan string, 1024)}
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	line := w.expect(t, "ready")
	if _, err := fmt.Sscanf(line, "ready %d %d", &w.pid, &w.qpn); err != nil {
		t.Fatalf("worker %d: %q", index, line)
	}
	return w
}

// expect waits for the worker's next line starting with prefix; any other
// line but progress fails the test.
func (w *workerProc) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-w.lines:
			switch {
			case !ok:
				t.Fatalf("worker exited before printing %q", prefix)
			case strings.HasPrefix(l, prefix):
				return l
			case !strings.HasPrefix(l, "round "):
				t.Fatalf("worker: %s", l)
			}
		case <-timeout:
			t.Fatalf("worker printed no %q within a minute", prefix)
		}
	}
}

// target is the remote NIC the workers talk to: an embedded device in the
// test process with a region of an area per worker, accepting their
// connections.
type target struct {
	dev   *nic.Device
	mr    *nic.MR
	ln    *nic.Listener
	mu    sync.Mutex
	conns map[int]*nic.Conn // by worker index
}

func startTarget(t *testing.T, workers int) *target {
	t.Helper()
	tg := &target{dev: nictest.OpenDevice(t, nic.Config{}), conns: map[int]*nic.Conn{}}
	pd, err := tg.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := tg.dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	if tg.mr, err = pd.AllocMR(workers*workerSize, allAccess); err != nil {
		t.Fatal(err)
	}
	if tg.ln, err = tg.dev.Listen(7471, nic.ListenOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := tg.ln.Accept(ctx)
			if err != nil {
				return
			}
			tg.mu.Lock()
			tg.conns[int(c.PrivateData()[0])] = c
			tg.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tg
}

func (tg *target) env() string {
	return fmt.Sprintf("%v %d %d %d", tg.dev.Addr(), tg.ln.Port(), tg.mr.RKey(), tg.mr.Addr())
}

func (tg *target) conn(i int) *nic.Conn {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.conns[i]
}

// TestAttachedProcessKilled: three processes attached to one daemon write
// and read back to a remote NIC at once; one is killed with SIGKILL in the
// middle of its transfers. The others complete every round correctly, the
// remote memory holds their last round, the killed process's QP and
// regions leave the daemon's listings, and its peer sees the disconnect
// (the daemon's DREQ on its behalf).
func TestAttachedProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds softnic and runs processes")
	}
	bin := buildSoftnic(t)
	d := startServe(t, bin)
	const workers, rounds, victim = 3, 60, 1
	tg := startTarget(t, workers)
	var ws [workers]*workerProc
	for i := range ws {
		ws[i] = startWorker(t, d, i, rounds, tg.env())
	}
	// Each worker's QP and regions are listed under its PID.
	qps, regions := d.pids(t)
	for i, w := range ws {
		if qps[w.pid] != 1 || regions[w.pid] != 1 {
			t.Errorf("worker %d (pid %d): %d QPs and %d regions listed, want 1 and 1", i, w.pid, qps[w.pid], regions[w.pid])
		}
		if tg.conn(i) == nil {
			t.Fatalf("worker %d is not connected to the target", i)
		}
	}
	for _, w := range ws {
		io.WriteString(w.stdin, "go\n")
	}
	ws[victim].expect(t, "round 2 ok")
	if err := ws[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if i != victim {
			w.expect(t, "done")
		}
	}

	// The survivors' last rounds are in the target's memory.
	want := make([]byte, workerSize)
	for i := range ws {
		if i == victim {
			continue
		}
		tg.conn(i).QP().Status() // orders the reads below after the device's writes
		pattern(want, i, rounds-1)
		if !bytes.Equal(tg.mr.Bytes()[i*workerSize:(i+1)*workerSize], want) {
			t.Errorf("worker %d: the target's memory does not hold its last round", i)
		}
	}

	// The killed process's peer saw the disconnect.
	select {
	case <-tg.conn(victim).Done():
		if err := tg.conn(victim).Err(); !errors.Is(err, nic.ErrConnReset) {
			t.Errorf("the killed worker's connection ended with %v, want the peer's disconnect (ErrConnReset)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the killed worker's peer saw no disconnect")
	}
	// Its QP and regions are gone; the survivors' remain.
	deadline := time.Now().Add(10 * time.Second)
	for {
		qps, regions = d.pids(t)
		if qps[ws[victim].pid]+regions[ws[victim].pid] == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := qps[ws[victim].pid] + regions[ws[victim].pid]; n != 0 {
		t.Errorf("%d QPs and regions of the killed process are still listed", n)
	}
	for i, w := range ws {
		if i != victim && (qps[w.pid] != 1 || regions[w.pid] != 1) {
			t.Errorf("worker %d: %d QPs and %d regions listed after the kill, want 1 and 1", i, qps[w.pid], regions[w.pid])
		}
	}
	var stat map[string]uint64
	d.inspect(t, "stat", &stat)
	if stat["attached_processes"] != workers-1 {
		t.Errorf("attached_processes %d, want %d", stat["attached_processes"], workers-1)
	}
	for i, w := range ws {
		if i == victim {
			continue
		}
		w.stdin.Close()
		if err := w.cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
}

// ringOf finds the mapping of this process's memfd named name whose size
// is size, in /proc/self/maps, and returns its address.
func ringOf(t *testing.T, name string, size int) uint64 {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var found []uint64
	for _, l := range strings.Split(string(maps), "\n") {
		var start, end uint64
		if !strings.Contains(l, "/memfd:"+name+" ") {
			continue
		}
		if _, err := fmt.Sscanf(l, "%x-%x", &start, &end); err == nil && end-start == uint64(size) {
			found = append(found, start)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d mappings of memfd %s of %d bytes", len(found), name, size)
	}
	return found[0]
}

// TestAttachedRingCorrupted: an attached process writes garbage over the
// send ring of one of its QPs and rings the doorbell. That QP fails alone
// (a LOC_QP_OP_ERR completion, the error state); the process's other QP,
// another attached process and the daemon go on working.
func TestAttachedRingCorrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("builds softnic and runs processes")
	}
	bin := buildSoftnic(t)
	d := startServe(t, bin)
	tg := startTarget(t, 3)
	w := startWorker(t, d, 0, 60, tg.env())

	dev, err := nic.Open(nic.Config{Attach: d.control})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.AllocMR(workerSize, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(index byte, sendWRs int) *nic.Conn {
		c, err := dev.Dial(ctx, tg.dev.Addr(), tg.ln.Port(), nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq, MaxSendWR: sendWRs}, PrivateData: []byte{index}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The victim's send ring has a size of its own, to find it by.
	const victimWRs = 100
	victim, healthy := dial(1, victimWRs), dial(2, 0)
	write := func(c *nic.Conn, index int) verbs.WC {
		t.Helper()
		wr := verbs.SendWR{ID: 7, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(0, 4096)},
			RemoteAddr: tg.mr.Addr() + uint64(index*workerSize), RKey: tg.mr.RKey()}
		if err := c.QP().PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		var wc [1]verbs.WC
		if _, err := cq.Wait(ctx, wc[:]); err != nil {
			t.Fatal(err)
		}
		return wc[0]
	}
	if wc := write(victim, 1); wc.Status != verbs.Success {
		t.Fatalf("the victim's WRITE before the garbage: %v", wc.String())
	}
	io.WriteString(w.stdin, "go\n")
	w.expect(t, "round 1 ok")

	// Garbage over the whole ring, header and slots, then the doorbell.
	addr := ringOf(t, "softnic-sq", shmRingSize(victimWRs))
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, shmRingSize(victimWRs))
	fillRandom(rand.New(rand.NewPCG(7, 7)), garbage)
	_, err = mem.WriteAt(garbage, int64(addr))
	mem.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.QP().RingDoorbell(); err != nil {
		t.Fatal(err)
	}
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != verbs.LocQPOpErr || wc[0].QPN != victim.QP().Num() {
		t.Fatalf("after the garbage: completion %v, %v; want LOC_QP_OP_ERR of QP %#x", wc[0].String(), err, victim.QP().Num())
	}
	if st := victim.QP().Status(); st.State != verbs.Err {
		t.Errorf("the victim QP is %s, want ERR", st.State)
	}

	// Everything else goes on.
	if wc := write(healthy, 2); wc.Status != verbs.Success {
		t.Errorf("the process's other QP after the garbage: %v", wc.String())
	}
	w.expect(t, "done")
	var rows []owned
	d.inspect(t, "qp", &rows)
	states := map[uint32]string{}
	for _, r := range rows {
		states[r.QPN] = r.State
	}
	if states[victim.QP().Num()] != "ERR" || states[healthy.QP().Num()] != "RTS" || states[w.qpn] != "RTS" {
		t.Errorf("softnic qp shows the victim %s, the other QP %s, the other process's %s; want ERR, RTS, RTS",
			states[victim.QP().Num()], states[healthy.QP().Num()], states[w.qpn])
	}
	var stat map[string]uint64
	d.inspect(t, "stat", &stat)
	if n := stat[fmt.Sprintf("pid%d_bad_queues", os.Getpid())]; n != 1 {
		t.Errorf("pid%d_bad_queues = %d, want 1", os.Getpid(), n)
	}
	w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("worker: %v", err)
	}
}
