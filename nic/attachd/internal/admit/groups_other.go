//go:build !linux

package admit

import (
	"fmt"
	"runtime"

	"github.com/softnic/softnic/nic"
)

// Only Linux tells a socket's peer's supplementary groups
// (SO_PEERGROUPS); elsewhere nic.PeerCredOf fails first anyway.

func peerGroupsOf(int) ([]int, error) {
	return nil, fmt.Errorf("SO_PEERGROUPS on %s: %w", runtime.GOOS, nic.ErrNotSupported)
}
