package main

import (
	"os"
	"testing"
)

// Some tests need a process of their own: a peer of softnic bench, a
// daemon whose descriptor limit they lower, or a program run under another
// user (these on Linux: child_linux_test.go). The test binary is that
// process: started with childEnv set, it runs the softnic command of its
// arguments (or a child mode of childModes) instead of the tests, after
// the setup the environment asks for (prepareChild).
const childEnv = "SOFTNIC_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild(os.Args[1:]))
	}
	code := m.Run()
	removeSharedExe()
	os.Exit(code)
}

// runChild sets the child up as the environment says and runs args.
func runChild(args []string) int {
	if code := prepareChild(); code != 0 {
		return code
	}
	if len(args) > 0 {
		if f := childModes[args[0]]; f != nil {
			return f(args[1:])
		}
	}
	return run(args, os.Stdout, os.Stderr)
}
