package nic

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerCred returns the credentials of the process at the other end of the
// unix socket fd (SO_PEERCRED).
func peerCred(fd int) (PeerCred, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return PeerCred{}, err
	}
	return PeerCred{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi os.FileInfo) (int, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, fmt.Errorf("no owner in %T", fi.Sys())
	}
	return int(st.Uid), nil
}
