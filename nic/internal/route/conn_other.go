//go:build !linux

package route

import (
	"net"
	"net/netip"
)

// connMTU cannot ask the kernel for a route's MTU here: the caller takes
// the interface's.
func connMTU(*net.UDPConn, netip.Addr) (int, bool) { return 0, false }
