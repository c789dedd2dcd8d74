//go:build linux && !softnic_portable

package udp

import (
	"errors"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// rawIPSocket is the raw IPv4 socket of protocol UDP that Options.IPIDs
// opens, non-blocking, filtered by the kernel to the datagrams to one UDP
// port with a non-zero identification.
type rawIPSocket struct{ fd int }

// openIPIDs opens the raw socket for datagrams to local (its port, and its
// address unless it is the wildcard). Without CAP_NET_RAW it fails with
// EPERM.
func openIPIDs(local netip.AddrPort) (*ipids, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket AF_INET SOCK_RAW", err)
	}
	raw := rawIPSocket{fd}
	if err := raw.configure(local); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return newIPIDs(raw), nil
}

func (r rawIPSocket) configure(local netip.AddrPort) error {
	// The packet starts at the IPv4 header. Keep a datagram to the port
	// with a non-zero identification that is not a later fragment, its
	// first ipidSnap bytes; drop the rest.
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 4},                      // identification
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 6, Jf: 0, K: 0},       // 0: drop
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 6},                      // flags and fragment offset
		{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 4, Jf: 0, K: 0x1fff}, // a later fragment: drop
		{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 0},                     // X = header length
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 2},                      // destination port
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(local.Port())},
		{Code: unix.BPF_RET | unix.BPF_K, K: ipidSnap}, // keep
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},        // drop
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(r.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return os.NewSyscallError("setsockopt SO_ATTACH_FILTER", err)
	}
	// What arrived before the filter did is not for us.
	buf := make([]byte, ipidSnap)
	for {
		if n, err := r.read(buf); err != nil || n == 0 {
			break
		}
	}
	if _, err := setBuffer(r.fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, defaultBuffer/2); err != nil {
		return os.NewSyscallError("setsockopt SO_RCVBUF", err)
	}
	if a := local.Addr().Unmap(); !a.IsUnspecified() {
		if err := unix.Bind(r.fd, &unix.SockaddrInet4{Addr: a.As4()}); err != nil {
			return os.NewSyscallError("bind", err)
		}
	}
	return nil
}

// read reads the next copy queued, or returns 0 when none is.
func (r rawIPSocket) read(buf []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(r.fd, buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, nil
		case err != nil:
			return 0, err
		}
		return n, nil
	}
}

func (r rawIPSocket) close() error { return unix.Close(r.fd) }
