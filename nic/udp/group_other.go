//go:build !unix

package udp

import (
	"net"
	"net/netip"
	"syscall"
)

// listenGroup: joining a group is implemented for Unix systems only.
func listenGroup(netip.AddrPort, netip.Addr) (*net.UDPConn, error) {
	return nil, syscall.EOPNOTSUPP
}
