//go:build linux && !softnic_portable

package udp

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Control message sizes. A received datagram carries its destination address
// (IP_PKTINFO or IPV6_PKTINFO), with GRO its segment size (UDP_GRO, an int)
// and, if asked, its traffic class (IP_TOS, a byte, or IPV6_TCLASS, an
// int); a send carries its segment size if it is a GSO run (UDP_SEGMENT, a
// uint16) and its traffic class if not 0 (IP_TOS or IPV6_TCLASS, an int).
var (
	// readOOBSpace is twice what pktinfo, GRO and the traffic class need, so
	// that an unexpected control message cannot crowd them out (which would
	// drop the datagram with MSG_CTRUNC). A multiple of 8, so every slot
	// stays cmsghdr-aligned.
	readOOBSpace  = 2 * (unix.CmsgSpace(unix.SizeofInet6Pktinfo) + 2*unix.CmsgSpace(4))
	writeOOBSpace = unix.CmsgSpace(2) + unix.CmsgSpace(4)
)

// The three calls on the socket never block (it is non-blocking; the Go
// netpoller, or poll(2), does the waiting), so they are raw system calls:
// the runtime's bookkeeping of a call that may block, which lets it hand
// the calling thread's P on, buys nothing here and cost a busy poller a
// thread handoff now and then. A busy-polled 8-byte ping-pong of raw UDP
// between two processes took a 99th percentile of 31 µs with it and 9 µs
// without (median 7.5 and 7.3 µs); softnic's busy-polled 8-byte WRITE
// took 0.26 µs less, 64 KiB and 4 KiB WRITEs moved 3-7% more (softnic
// bench, alternated runs, 2-CPU VM).

// recvmmsg reads up to len(hdrs) datagrams without blocking.
func recvmmsg(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(hdrs))), uintptr(len(hdrs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// sendmmsg sends up to len(hdrs) entries without blocking and returns how many
// went out; the kernel reports an entry's error only when it is the first.
func sendmmsg(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(hdrs))), uintptr(len(hdrs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// sendto sends b, one datagram, to the address h names, without blocking.
func sendto(fd int, b []byte, h *unix.Msghdr) syscall.Errno {
	_, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), 0,
		uintptr(unsafe.Pointer(h.Name)), uintptr(h.Namelen))
	return errno
}

// putSockaddr writes ap into sa as a sockaddr_in6 (v6) or, in its first bytes,
// a sockaddr_in, and returns the length to pass the kernel. It refuses an
// invalid address (EINVAL) and one of the other family (EAFNOSUPPORT): an IPv6
// socket is v6-only, so it cannot reach IPv4-mapped addresses either.
// An IPv6 zone is not carried: the scope ID stays 0.
func putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, v6 bool) (uint32, syscall.Errno) {
	a := ap.Addr()
	switch {
	case !ap.IsValid():
		return 0, syscall.EINVAL
	case v6 && a.Is6() && !a.Is4In6():
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		putPort(&sa.Port, ap.Port())
		return unix.SizeofSockaddrInet6, 0
	case !v6 && a.Unmap().Is4():
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Unmap().As4()}
		putPort(&sa4.Port, ap.Port())
		return unix.SizeofSockaddrInet4, 0
	}
	return 0, syscall.EAFNOSUPPORT
}

// sockaddrAddrPort reads the sender address the kernel wrote into sa.
func sockaddrAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), getPort(&sa4.Port))
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), getPort(&sa.Port))
	}
	return netip.AddrPort{}
}

// putPort and getPort access a sockaddr port, which is in network byte order.
func putPort(p *uint16, port uint16) {
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(p))[:], port)
}

func getPort(p *uint16) uint16 {
	return binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(p))[:])
}

// parseControl returns the destination address (IP_PKTINFO's ipi_addr, the
// address in the IP header, or IPV6_PKTINFO's), the GRO segment size (0
// without one) and the traffic class (0 without one) carried by the
// control messages of one received datagram.
func parseControl(b []byte) (local netip.Addr, segment int, tclass uint8) {
	for len(b) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(b)
		if err != nil {
			break
		}
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo { int ipi_ifindex; in_addr ipi_spec_dst; in_addr ipi_addr; }
			local = netip.AddrFrom4([4]byte(data[8:12]))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			// struct in6_pktinfo { in6_addr ipi6_addr; int ipi6_ifindex; }
			local = netip.AddrFrom16([16]byte(data[:16]))
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			segment = int(binary.NativeEndian.Uint32(data))
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tclass = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tclass = uint8(binary.NativeEndian.Uint32(data))
		}
		b = rest
	}
	return local, segment, tclass
}

// putSendControl writes into b, of writeOOBSpace bytes, the control
// messages of a send and returns their length, 0 for none: with segment
// above 0 a UDP_SEGMENT one, asking the kernel to cut the send into
// datagrams of segment bytes; with tclass above 0 the traffic class of
// the send's datagrams, IPV6_TCLASS on an IPv6 socket (v6), IP_TOS on an
// IPv4 one.
func putSendControl(b []byte, segment uint16, tclass uint8, v6 bool) int {
	n := 0
	if segment > 0 {
		putCmsg(b, unix.SOL_UDP, unix.UDP_SEGMENT, 2)
		binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], segment)
		n = unix.CmsgSpace(2)
	}
	if tclass > 0 {
		level, typ := unix.IPPROTO_IP, unix.IP_TOS
		if v6 {
			level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
		}
		putCmsg(b[n:], int32(level), int32(typ), 4)
		binary.NativeEndian.PutUint32(b[n+unix.CmsgLen(0):], uint32(tclass))
		n += unix.CmsgSpace(4)
	}
	return n
}

// putCmsg writes at the start of b the header of a control message of
// size bytes of data.
func putCmsg(b []byte, level, typ int32, size int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(unsafe.SliceData(b)))
	h.Level = level
	h.Type = typ
	h.SetLen(unix.CmsgLen(size))
}
