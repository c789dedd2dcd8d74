//go:build linux

package route

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// connMTU returns the MTU of the route of c, a UDP socket connected to
// dst, path MTU exceptions (from ICMP "fragmentation needed") included:
// IP_MTU, or IPV6_MTU.
func connMTU(c *net.UDPConn, dst netip.Addr) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	mtu, serr := 0, error(nil)
	err = rc.Control(func(fd uintptr) {
		if dst.Is4() {
			mtu, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU)
		} else {
			mtu, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU)
		}
	})
	return mtu, err == nil && serr == nil && mtu > 0
}
