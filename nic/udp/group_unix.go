//go:build unix

package udp

import (
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// listenGroup makes the socket of ListenGroup. Go's net package binds a
// multicast listener to the wildcard address, which would take the port's
// unicast datagrams too, so the socket is made by hand.
func listenGroup(group netip.AddrPort, ifAddr netip.Addr) (*net.UDPConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "udp-group")
	defer f.Close()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, os.NewSyscallError("setsockopt SO_REUSEADDR", err)
	}
	if runtime.GOOS != "linux" {
		// The BSDs share a multicast address and port among sockets
		// that all set SO_REUSEPORT; Linux does with SO_REUSEADDR.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return nil, os.NewSyscallError("setsockopt SO_REUSEPORT", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(group.Port()), Addr: group.Addr().As4()}); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}
	mreq := &unix.IPMreq{Multiaddr: group.Addr().As4(), Interface: ifAddr.As4()}
	if err := unix.SetsockoptIPMreq(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
		return nil, os.NewSyscallError("setsockopt IP_ADD_MEMBERSHIP", err)
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
