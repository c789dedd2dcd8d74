package nic_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/softnic/softnic/nic"
)

// TestAttachNotSupported: where attach mode does not work (off Linux, and
// in softnic_portable builds, which CI runs), Open with Config.Attach says
// so with ErrNotSupported before it looks for a daemon.
func TestAttachNotSupported(t *testing.T) {
	if nic.AttachSupported() == nil {
		t.Skip("attach mode is supported here")
	}
	_, err := nic.Open(nic.Config{Attach: filepath.Join(t.TempDir(), "no-daemon.sock")})
	if !errors.Is(err, nic.ErrNotSupported) {
		t.Fatalf("Open attached: %v, want ErrNotSupported", err)
	}
}
