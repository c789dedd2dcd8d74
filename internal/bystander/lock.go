package bystander

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Measurements of a bystander compare its figures with an attack and
// without, on a machine of a few cores: two of them at once (go test runs
// packages in parallel, and the attack tests of tests/ and of cmd/softnic
// each spin an attacker) would each measure the other. exclusive makes a
// test wait for the machine's other measurements to end, by an exclusive
// lock on a file every test process opens, held until the test ends; a
// process takes it once however many of its tests ask (its tests run one
// at a time).
var machine struct {
	sync.Mutex
	held int
	lock *os.File
}

// lockPath is the file whose lock the measurements share.
var lockPath = filepath.Join(os.TempDir(), "softnic-bystander.lock")

// exclusive holds the machine's lock of measurements until t ends.
func exclusive(t testing.TB) {
	t.Helper()
	machine.Lock()
	defer machine.Unlock()
	if machine.held == 0 {
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			t.Fatalf("the lock of measurements: %v", err)
		}
		if err := lockFile(f); err != nil {
			f.Close()
			t.Fatalf("the lock of measurements %s: %v", lockPath, err)
		}
		machine.lock = f
	}
	machine.held++
	t.Cleanup(func() {
		machine.Lock()
		defer machine.Unlock()
		if machine.held--; machine.held == 0 {
			machine.lock.Close() // which lets the lock go
			machine.lock = nil
		}
	})
}
