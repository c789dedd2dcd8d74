package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Some tests need a process of their own: a daemon whose descriptor limit
// they lower, or a program run under another user. The test binary is
// that process: started with childEnv set, it runs the softnic command of
// its arguments instead of the tests, after the setup the other variables
// ask for.
const (
	childEnv       = "SOFTNIC_TEST_CHILD"  // run the command line as softnic
	childNoFileEnv = "SOFTNIC_TEST_NOFILE" // first lower RLIMIT_NOFILE to this
	childUmaskEnv  = "SOFTNIC_TEST_UMASK"  // first set the umask to this (octal)
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runChild sets the child up as the environment says and runs args.
func runChild(args []string) int {
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
	return run(args, os.Stdout, os.Stderr)
}

// childProc is the test binary running as softnic in a child process.
type childProc struct {
	cmd    *exec.Cmd
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

// childDaemon is softnic serve in a child process.
type childDaemon struct {
	*childProc
	ready   readyLine
	control string
}

// startChildDaemon runs serve in a child process, on a free loopback port
// with a control socket in a directory of the test and the extra
// arguments, and waits for its ready line.
func startChildDaemon(t *testing.T, env []string, args ...string) *childDaemon {
	t.Helper()
	control := filepath.Join(t.TempDir(), "ctl.sock")
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
