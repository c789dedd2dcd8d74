//go:build !linux

package shm

import (
	"fmt"
	"runtime"

	"github.com/softnic/softnic/mr"
)

// Attach mode shares memory through sealed memfds and wakes through
// eventfds, which only Linux has: elsewhere they are not supported.

func createSealed(string, int) (int, []byte, error) {
	return -1, nil, fmt.Errorf("memfd_create on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

func mapSealed(int, int64, int) ([]byte, error) {
	return nil, fmt.Errorf("sealed memfds on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

// NewEventFD returns mr.ErrNotSupported: the system has no eventfds.
func NewEventFD() (int, error) {
	return -1, fmt.Errorf("eventfd on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

// Signal does nothing: NewEventFD makes no eventfd to signal.
func Signal(int) {}
