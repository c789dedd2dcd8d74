package nictest

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// LeakTimeout bounds how long the leak check of CheckLeaks waits for
// goroutines to exit and descriptors to close before it reports them.
var LeakTimeout = 5 * time.Second

// CheckLeaks fails t, when it ends, if goroutines started during it are
// still running or descriptors opened during it are still open: those of
// a device, a daemon or a connection the test did not close. It waits up
// to LeakTimeout for them to go, since closing a device ends its
// goroutines before Close returns but a test's own may take longer, and
// reports each leaked goroutine's stack and each descriptor's target.
//
// Call it before the test opens anything, so that its check runs after
// their cleanups (t.Cleanup runs last in, first out). It cannot tell a
// leak from the goroutines and descriptors of tests running in parallel
// with t (t.Parallel): leave it out of those (Options.NoLeakCheck).
func CheckLeaks(t testing.TB) {
	t.Helper()
	pollerOpen()
	g0, fd0 := goroutines(), descriptors()
	t.Cleanup(func() {
		var g, fd []string
		for deadline := time.Now().Add(LeakTimeout); ; time.Sleep(10 * time.Millisecond) {
			g, fd = newer(goroutines(), g0), newer(descriptors(), fd0)
			if len(g)+len(fd) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, s := range g {
			t.Errorf("nictest: a goroutine leaked:\n%s", s)
		}
		for _, s := range fd {
			t.Errorf("nictest: a descriptor leaked: %s", s)
		}
	})
}

// pollerOpen has the runtime open the descriptor of its network poller
// (epoll, kqueue), which it opens at the first pollable file and keeps: a
// pipe is one. Opened during the first test that checks for leaks, it
// would be taken for that test's leak.
func pollerOpen() {
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
}

// newer returns the entries of now whose keys are not keys of before.
func newer(now map[string]string, before map[string]string) []string {
	var out []string
	for k, v := range now {
		if _, ok := before[k]; !ok {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// goroutines returns the stacks of the running goroutines by ID, except
// the caller's and those of the runtime and the testing package that come
// and go on their own.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := make(map[string]string)
	for i, s := range bytes.Split(buf, []byte("\n\n")) {
		stack := string(s)
		if i == 0 || ignored(stack) { // the first is the caller's
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
		out[id] = stack
	}
	return out
}

// ignored reports whether a stack is one a test does not own: the test
// runner's, the signal handler's, the runtime's.
func ignored(stack string) bool {
	for _, s := range []string{"testing.(*T).Run(", "testing.(*T).Parallel(", "testing.runTests(", "testing.(*M).",
		"os/signal.signal_recv", "runtime.goexit0", "runtime/trace."} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// descriptors returns the process's open descriptors, each with what it
// refers to; none where the system does not list them.
func descriptors() map[string]string {
	dir := "/proc/self/fd"
	if _, err := os.Stat(dir); err != nil {
		dir = "/dev/fd"
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(ents))
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		out[e.Name()+"\t"+target] = fmt.Sprintf("%s → %s", e.Name(), target)
	}
	return out
}
