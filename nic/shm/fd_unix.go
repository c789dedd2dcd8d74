//go:build unix

package shm

import "golang.org/x/sys/unix"

// CloseFD closes the descriptor fd.
func CloseFD(fd int) { unix.Close(fd) }

// DupFD returns a copy of fd, closed on exec.
func DupFD(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

func munmap(b []byte) error { return unix.Munmap(b) }

// rightsSpace is the room a control message of n descriptors takes.
func rightsSpace(n int) int { return unix.CmsgSpace(n * 4) }

// unixRights encodes fds as an SCM_RIGHTS control message.
func unixRights(fds []int) ([]byte, error) { return unix.UnixRights(fds...), nil }

// parseRights returns the descriptors of the SCM_RIGHTS messages of oob,
// which the caller then owns, and whether the kernel truncated oob
// (MSG_CTRUNC in flags). Other kinds of control message are skipped.
func parseRights(oob []byte, flags int) (fds []int, truncated bool, err error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, false, err
	}
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue // credentials or another kind: nothing to keep
		}
		fds = append(fds, got...)
	}
	return fds, flags&unix.MSG_CTRUNC != 0, nil
}
