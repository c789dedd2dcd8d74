//go:build !linux

package nic

import (
	"context"
	"fmt"
	"net"
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

// dialUnix connects to the unix socket at path.
func dialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
