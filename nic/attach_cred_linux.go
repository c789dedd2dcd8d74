package nic

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

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

// dialUnix connects to the unix socket at path with a blocking connect,
// bounded by ctx's deadline or ConnectWait: while the listener's backlog
// is full the kernel holds the caller in the queue of those connecting
// and lets them in one at a time, in order, as room comes. (A
// non-blocking connect fails with EAGAIN instead, and a caller that tries
// again now and then loses every turn to a flooder waiting in connect.)
// After the wait it fails with EAGAIN.
func dialUnix(ctx context.Context, path string) (*net.UnixConn, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(ConnectWait)
	}
	fail := func(err error) (*net.UnixConn, error) {
		return nil, &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: err}
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(os.NewSyscallError("socket", err))
	}
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			err = unix.EAGAIN
			break
		}
		tv := unix.NsecToTimeval(max(wait, time.Microsecond).Nanoseconds())
		if err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			break
		}
		if err = unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return fail(os.NewSyscallError("connect", err))
	}
	f := os.NewFile(uintptr(fd), path)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
