//go:build linux

package udptest

import (
	"encoding/binary"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// SendIPv4 sends payload in a UDP datagram from src to dst whose IPv4
// header carries identification id and DF, as Linux rxe's datagrams do,
// through a raw socket: it needs CAP_NET_RAW, and fails with EPERM
// without it. The UDP checksum is 0 (none, as IPv4 allows).
func SendIPv4(src, dst netip.AddrPort, id uint16, payload []byte) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return os.NewSyscallError("socket AF_INET SOCK_RAW", err)
	}
	defer unix.Close(fd)
	b := make([]byte, 28+len(payload))
	b[0], b[8], b[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], 0x4000) // DF
	copy(b[12:], src.Addr().Unmap().AsSlice())
	copy(b[16:], dst.Addr().Unmap().AsSlice())
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	return os.NewSyscallError("sendto", unix.Sendto(fd, b, 0, &unix.SockaddrInet4{Addr: dst.Addr().Unmap().As4()}))
}
