//go:build !linux || softnic_portable

package shm

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/mr"
)

// TestNoMemfd: without memfds and eventfds, attach mode's shared memory and
// wakeups say they are not supported.
func TestNoMemfd(t *testing.T) {
	if err := Supported(); !errors.Is(err, mr.ErrNotSupported) {
		t.Errorf("Supported = %v, want ErrNotSupported", err)
	}
	if _, err := Create("shm-test", PageSize); !errors.Is(err, mr.ErrNotSupported) {
		t.Errorf("Create = %v, want ErrNotSupported", err)
	}
	if _, err := MapRange(-1, 0, PageSize); !errors.Is(err, mr.ErrNotSupported) {
		t.Errorf("MapRange = %v, want ErrNotSupported", err)
	}
	if _, err := NewEventFD(); !errors.Is(err, mr.ErrNotSupported) {
		t.Errorf("NewEventFD = %v, want ErrNotSupported", err)
	}
}
