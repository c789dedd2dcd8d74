//go:build unix

package bystander

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExclusive: a test that asks for the lock of measurements twice (an
// attacker and a check) holds it once, until its end, and another open
// description of the file (another process's) cannot take it meanwhile.
func TestExclusive(t *testing.T) {
	defer func(path string) { lockPath = path }(lockPath)
	lockPath = filepath.Join(t.TempDir(), "lock") // not the machine's, which other tests may hold
	other, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	try := func() error { return unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB) }
	t.Run("held", func(t *testing.T) {
		exclusive(t)
		exclusive(t)
		if err := try(); err != unix.EWOULDBLOCK {
			t.Errorf("another description locked the file while a test held it: %v", err)
		}
	})
	if machine.held != 0 || machine.lock != nil {
		t.Errorf("after the test: held %d, file %v", machine.held, machine.lock)
	}
	if err := try(); err != nil {
		t.Errorf("the lock was not let go at the test's end: %v", err)
	}
}
