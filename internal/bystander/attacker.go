package bystander

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

// An attacker is a process of its own (the test binary run again) that
// makes an attack when its test tells it to: a line "on" or "off" on its
// stdin, which it echoes once heard. While off it spins in a loop of its
// own, so that it takes as much of a CPU either way.

// RunAttacker is the body of an attacker process: it prints "ready", then
// repeats step while the attack is on and spins while it is off, until
// its stdin closes, when it exits. An error of step is printed
// ("error: ...") and ends the process.
func RunAttacker(step func() error) {
	var on atomic.Bool
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			on.Store(sc.Text() == "on")
			fmt.Println(sc.Text()) // the test waits for the echo
		}
		os.Exit(0)
	}()
	fmt.Println("ready")
	for {
		if on.Load() {
			if err := step(); err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
		}
	}
}

// Attacker is an attacker process, seen from its test.
type Attacker struct {
	PID   int
	stdin io.Writer
	lines chan string // its stdout
}

// StartAttacker starts cmd, an attacker process (RunAttacker) whose
// environment or arguments say what attack to make, and waits until it is
// ready, idle. It is killed when the test ends. It runs alone among the
// machine's measurements (exclusive) from its start to its end.
func StartAttacker(t testing.TB, cmd *exec.Cmd) *Attacker {
	t.Helper()
	exclusive(t)
	cmd.Stderr = os.Stderr
	a := &Attacker{lines: make(chan string, 16)}
	var err error
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.PID = cmd.Process.Pid
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		defer close(a.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
	}()
	a.expect(t, "ready")
	return a
}

// Attack starts or stops the attack, and returns once the attacker has
// heard.
func (a *Attacker) Attack(t testing.TB, on bool) {
	t.Helper()
	cmd := map[bool]string{true: "on", false: "off"}[on]
	if _, err := io.WriteString(a.stdin, cmd+"\n"); err != nil {
		var said []string
		for line := range a.lines { // it ended: what it said last
			said = append(said, line)
		}
		t.Fatalf("attacker %d: %v; it said %q", a.PID, err, said)
	}
	a.expect(t, cmd)
}

// expect waits for the attacker's next line, which must be want.
func (a *Attacker) expect(t testing.TB, want string) {
	t.Helper()
	select {
	case line, ok := <-a.lines:
		if !ok || line != want {
			t.Fatalf("attacker %d: %q (ended: %v), want %q", a.PID, line, !ok, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("attacker %d: no %q within 30 s", a.PID, want)
	}
}
