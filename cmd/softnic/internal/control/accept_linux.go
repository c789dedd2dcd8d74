package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
)

// take accepts the next connection, at AcceptRate, and returns it,
// recorded as awaited, once it knows who connected (Cred). Each is
// accepted as a descriptor that Go's poller never sees. One whose client
// has closed without a word (a flood's, by the time its turn comes in the
// backlog) is closed at once: three system calls. One whose process or
// user has as many waiting as they may is refused there and then, told the
// refusal by a write that neither blocks (the socket is new, its send
// buffer empty) nor raises SIGPIPE, and closed: five system calls, where a
// net.Conn's would be nine. take goes on to the next after either, and
// returns an error only once the server is closed.
func (s *Server) take() (*net.UnixConn, error) {
	l, err := s.listenerFile()
	if err != nil {
		return nil, err
	}
	rc, err := l.SyscallConn()
	if err != nil {
		return nil, err
	}
	for {
		if !s.pace.Take(s.done) {
			return nil, net.ErrClosed
		}
		var c *net.UnixConn
		var peer nic.PeerCred
		err := s.Accepts.Do(func() error {
			var fd int
			var aerr error
			err := rc.Read(func(l uintptr) bool {
				fd, _, aerr = unix.Accept4(int(l), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				return aerr != unix.EAGAIN
			})
			if err = errors.Join(err, aerr); err != nil {
				return err
			}
			var b [1]byte
			if n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT); n == 0 && err == nil {
				s.silent.Add(1) // the end of the stream, and nothing before it
				unix.Close(fd)
				return nil
			}
			if peer, err = s.Cred(fd); err != nil {
				peer.PID, peer.UID = -1, -1
			}
			busy, ok := s.reserve(peer)
			switch {
			case !ok:
				unix.Close(fd)
				return net.ErrClosed
			case busy != "":
				unix.SendmsgN(fd, s.busyReply(busy), nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
				unix.Close(fd)
				return nil
			}
			f := os.NewFile(uintptr(fd), "control")
			nc, err := net.FileConn(f) // a descriptor of its own, known to the poller
			f.Close()
			if err != nil { // out of descriptors: counted and waited out as accept's errors are
				s.unreserve(peer)
				return err
			}
			c = nc.(*net.UnixConn)
			return nil
		}, s.done)
		switch {
		case err != nil:
			return nil, err
		case c == nil: // refused
			continue
		case !s.awaiting(c, peer):
			c.Close()
			return nil, net.ErrClosed
		}
		return c, nil
	}
}

// listenerFile returns the listener's descriptor as an *os.File of its
// own, made at the first call, which Close closes: Go's poller waits on it
// for connections to accept (a net.Listener's own descriptor does not
// offer that), and it ends the wait when closed.
func (s *Server) listenerFile() (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, net.ErrClosed
	case s.lfile != nil:
		return s.lfile, nil
	}
	sc, ok := s.Listener.(syscall.Conn)
	if !ok {
		return nil, errors.New("control socket: the listener has no descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := rc.Control(func(l uintptr) { fd, derr = unix.FcntlInt(l, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return nil, fmt.Errorf("control socket: %w", errors.Join(err, derr))
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s.lfile = os.NewFile(uintptr(fd), "control socket")
	return s.lfile, nil
}

// peerCred returns the credentials of the process at the other end of the
// unix socket fd (SO_PEERCRED).
func peerCred(fd int) (nic.PeerCred, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nic.PeerCred{}, err
	}
	return nic.PeerCred{PID: int(u.Pid), UID: int(u.Uid), GID: int(u.Gid)}, nil
}

// setBacklog sets the backlog of the listener l's socket to n (listen
// again on a listening socket changes only that).
func setBacklog(l net.Listener, n int) {
	if sc, ok := l.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { unix.Listen(int(fd), n) })
		}
	}
}
