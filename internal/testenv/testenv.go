// Package testenv tells the repository's tests what the system they run on
// offers, and skips those that need what it lacks, with a message that
// says so: the way the Go tree's internal/testenv skips tests that need
// exec or a network (MustHaveExec, MustHaveExternalNetwork). It asks the
// library, not a list of systems.
package testenv

import (
	"testing"

	"github.com/softnic/softnic/nic/shm"
)

// MustHaveAttach skips t unless attach mode works here (Linux, built
// without the softnic_portable tag): nic.AttachSupported, which is the
// shared memory's shm.Supported. A test that opens an attached device,
// starts an attach server or softnic serve with its control socket, or
// sets SOFTNIC_SOCKET calls it first; off Linux those fail with
// ErrNotSupported.
func MustHaveAttach(t testing.TB) {
	t.Helper()
	if err := shm.Supported(); err != nil {
		t.Skipf("attach mode is not supported here: %v", err)
	}
}
