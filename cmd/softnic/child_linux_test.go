package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/nic/nictest"
	"golang.org/x/sys/unix"
)

// What a child (see child_test.go) needs of Linux: a lower descriptor
// limit, a umask, no CAP_NET_RAW, another user's credentials, and death
// with its parent.
const (
	childNoFileEnv = "SOFTNIC_TEST_NOFILE"     // first lower RLIMIT_NOFILE to this
	childUmaskEnv  = "SOFTNIC_TEST_UMASK"      // first set the umask to this (octal)
	childNoRawEnv  = "SOFTNIC_TEST_NO_NET_RAW" // first give up CAP_NET_RAW (through setpriv), as a daemon without the privilege runs
)

// removeSharedExe removes the test binary's copy for other users.
func removeSharedExe() {
	if sharedExeDir != "" {
		os.RemoveAll(sharedExeDir)
	}
}

// A copy of the test binary that other users may run: go test builds it
// in a directory of the user's alone.
var (
	sharedExeOnce sync.Once
	sharedExeDir  string
	sharedExePath string
	sharedExeErr  error
)

// sharedExe returns the path of the test binary's copy for other users.
func sharedExe() (string, error) {
	sharedExeOnce.Do(func() {
		exe, err := os.Executable()
		if err == nil {
			sharedExeDir, err = os.MkdirTemp("", "softnic-test-exe")
		}
		if err == nil {
			err = os.Chmod(sharedExeDir, 0o755)
		}
		var b []byte
		if err == nil {
			b, err = os.ReadFile(exe)
		}
		if err == nil {
			sharedExePath = filepath.Join(sharedExeDir, "softnic.test")
			err = os.WriteFile(sharedExePath, b, 0o755)
		}
		sharedExeErr = err
	})
	return sharedExePath, sharedExeErr
}

// prepareChild sets the child up as the environment says; it returns the
// exit code of a child that cannot be, or 0.
func prepareChild() int {
	if os.Getenv(childNoRawEnv) != "" {
		// Capabilities are per thread, and the runtime's threads run
		// already: the child runs itself again under setpriv, which
		// execs it with CAP_NET_RAW out of its bounding set.
		os.Unsetenv(childNoRawEnv)
		exe, err := os.Executable()
		setpriv := ""
		if err == nil {
			setpriv, err = exec.LookPath("setpriv")
		}
		if err == nil {
			err = syscall.Exec(setpriv, append([]string{"setpriv", "--bounding-set=-net_raw", "--inh-caps=-net_raw", "--", exe}, os.Args[1:]...), os.Environ())
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", childNoRawEnv, err)
		return 2
	}
	if v := os.Getenv(childNoFileEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			err = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n})
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%s: %v\n", childNoFileEnv, v, err)
			return 2
		}
	}
	if v := os.Getenv(childUmaskEnv); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%s: %v\n", childUmaskEnv, v, err)
			return 2
		}
		syscall.Umask(int(m))
	}
	return 0
}

// childModes are what a child runs instead of a softnic command. Each
// prints "ready" when it is, runs until its stdin closes, and then prints
// one line of JSON with what it saw.
var childModes = map[string]func(args []string) int{
	"impostor":      runImpostor,
	"connect-loop":  runConnectLoop,
	"probe":         runProbe,
	"silent":        runSilent,
	"remote-attack": runRemoteAttack,
}

// runSilent opens args[1] connections to the unix socket args[0] that
// send nothing, and holds them until its stdin closes.
func runSilent(args []string) int {
	n, err := strconv.Atoi(args[1])
	var cs []net.Conn
	for i := 0; err == nil && i < n; i++ {
		var c net.Conn
		if c, err = net.Dial("unix", args[0]); err == nil {
			cs = append(cs, c)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range cs {
		c.Close()
	}
	fmt.Println("{}")
	return 0
}

// runImpostor listens on the unix socket args[0], as another user would
// who created a daemon's control socket path first, and counts the
// connections it gets and the bytes they send.
func runImpostor(args []string) int {
	l, err := net.Listen("unix", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Chmod(args[0], 0o777)
	var conns, bytes atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				bytes.Add(n)
			}()
		}
	}()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	l.Close()
	json.NewEncoder(os.Stdout).Encode(map[string]int64{"conns": conns.Load(), "bytes": bytes.Load()})
	return 0
}

// runConnectLoop connects to the unix socket args[0] again and again, as
// another user racing a daemon's start would, and counts the connections
// the kernel let it make.
func runConnectLoop(args []string) int {
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	fmt.Println("ready")
	tries, conns := 0, 0
	for {
		select {
		case <-stop:
			json.NewEncoder(os.Stdout).Encode(map[string]int{"tries": tries, "conns": conns})
			return 0
		default:
		}
		tries++
		if c, err := net.Dial("unix", args[0]); err == nil {
			conns++
			c.Close()
		}
	}
}

// childProc is the test binary running as softnic in a child process.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *syncBuffer
	done   chan error // Wait's result, once
}

// startChild starts the test binary as `softnic args...` with the extra
// environment env (childEnv is set), under cred when it is not nil. The
// test's cleanup ends it (SIGTERM, then SIGKILL after 10 s).
func startChild(t *testing.T, cred *syscall.Credential, env []string, args ...string) *childProc {
	t.Helper()
	exe, err := os.Executable()
	if cred != nil {
		exe, err = sharedExe()
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	c := &childProc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdout = bufio.NewReader(out)
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-c.done
			t.Errorf("child %v did not stop on SIGTERM; stderr:\n%s", args, c.stderr)
		}
	})
	return c
}

// line reads the child's next line of output.
func (c *childProc) line(t *testing.T) []byte {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		b, err := c.stdout.ReadBytes('\n')
		got <- result{b, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("child: no line: %v; stderr:\n%s", r.err, c.stderr)
		}
		return r.b
	case <-time.After(20 * time.Second):
		t.Fatalf("child: no line in 20 s; stderr:\n%s", c.stderr)
		return nil
	}
}

// end closes the child's stdin, which ends a child mode that reads it,
// and waits for the child to exit: its pipes and the goroutines that
// read them are gone.
func (c *childProc) end(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatalf("child: did not exit; stderr:\n%s", c.stderr)
	}
}

// finish closes the child's stdin, which ends a child mode, decodes the
// line it prints into v, and waits for it to exit.
func (c *childProc) finish(t *testing.T, v any) {
	t.Helper()
	c.stdin.Close()
	if err := json.Unmarshal(c.line(t), v); err != nil {
		t.Fatalf("child: %v; stderr:\n%s", err, c.stderr)
	}
	c.end(t)
}

// nobody is the credentials of the user nobody, for a child that plays
// another user; tests that need it skip unless they run as root.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// needRoot skips t unless it runs as root, which it needs to run children
// as another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: runs children as another user (nobody), which takes root")
	}
}

// startNobody runs a child mode as nobody (skipping t unless it runs as
// root) and waits until it is ready.
func startNobody(t *testing.T, mode string, args ...string) *childProc {
	t.Helper()
	needRoot(t)
	c := startChild(t, nobody, nil, append([]string{mode}, args...)...)
	if got := string(c.line(t)); got != "ready\n" {
		t.Fatalf("%s: %q; stderr:\n%s", mode, got, c.stderr)
	}
	return c
}

// sharedDir returns a new directory that every user may reach, with mode
// (such as 01777, as /tmp), removed by the test's cleanup.
func sharedDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "softnic-shared")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

// childDaemon is softnic serve in a child process.
type childDaemon struct {
	*childProc
	ready   daemon.ReadyLine
	control string
}

// startChildDaemon runs serve in a child process, on a free loopback port
// with a control socket in a directory of the test and the extra
// arguments, and waits for its ready line.
func startChildDaemon(t *testing.T, env []string, args ...string) *childDaemon {
	t.Helper()
	return startChildDaemonAt(t, filepath.Join(t.TempDir(), "ctl.sock"), env, args...)
}

// startChildDaemonAt is startChildDaemon with its control socket at path.
func startChildDaemonAt(t *testing.T, control string, env []string, args ...string) *childDaemon {
	t.Helper()
	nictest.MustHaveAttach(t)
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--control", control}, args...)
	d := &childDaemon{childProc: startChild(t, nil, env, args...), control: control}
	if err := json.Unmarshal(d.line(t), &d.ready); err != nil {
		t.Fatalf("ready line: %v; stderr:\n%s", err, d.stderr)
	}
	return d
}

// openFiles counts the descriptors process pid has open.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
