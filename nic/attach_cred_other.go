//go:build !linux

package nic

import (
	"fmt"
	"os"
	"runtime"
)

// Attach mode and the daemon's control socket admit a peer by the kernel's
// word for who it is (SO_PEERCRED, SO_PEERGROUPS), which only Linux gives
// in that form: elsewhere they are not supported, and neither is a client
// that cannot check who listens.

func peerCred(int) (PeerCred, error) {
	return PeerCred{}, fmt.Errorf("SO_PEERCRED on %s: %w", runtime.GOOS, ErrNotSupported)
}

func fileOwner(os.FileInfo) (int, error) {
	return -1, fmt.Errorf("checking who owns a control socket on %s: %w", runtime.GOOS, ErrNotSupported)
}
