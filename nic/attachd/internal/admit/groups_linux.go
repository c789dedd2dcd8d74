package admit

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroupsOf returns the supplementary groups of the process at the
// other end of the unix socket fd (SO_PEERGROUPS).
func peerGroupsOf(fd int) ([]int, error) {
	for n := 64; ; n *= 2 {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		if e == unix.ERANGE && n < 1<<16 {
			continue
		}
		if e != 0 {
			return nil, e
		}
		gids := make([]int, size/4)
		for i, g := range buf[:size/4] {
			gids[i] = int(g)
		}
		return gids, nil
	}
}
