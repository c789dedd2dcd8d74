package shm

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
)

// Conn carries messages, one line each, and the file descriptors that
// travel with them, over a unix stream socket. Send writes a line and its
// descriptors with one sendmsg; the reader takes lines (ReadLine) and the
// descriptors a line announces (TakeFDs) from the queue of those received,
// in order. The kernel delivers a sendmsg's descriptors with its first
// byte, so a line's descriptors have arrived once the line has.
//
// Send is safe for concurrent use; ReadLine and TakeFDs belong to one
// reading goroutine.
type Conn struct {
	c   *net.UnixConn
	wmu sync.Mutex

	max  int    // the longest line accepted
	buf  []byte // bytes read and not yet returned, from off
	off  int
	rbuf []byte
	oob  []byte
	fds  []int
}

// Limits of the reading side: a peer cannot make it buffer more.
const (
	// MaxFDsQueued bounds the descriptors received and not yet taken.
	MaxFDsQueued  = 64
	maxFDsPerRead = 16
)

// ErrProtocol is returned for a peer that breaks the transport's rules: a
// line longer than the limit, descriptors beyond MaxFDsQueued, a line
// announcing descriptors that did not come.
var ErrProtocol = errors.New("attach protocol violation")

// NewConn wraps c; lines longer than maxLine bytes are refused.
func NewConn(c *net.UnixConn, maxLine int) *Conn {
	return &Conn{c: c, max: maxLine, rbuf: make([]byte, 16<<10), oob: make([]byte, rightsSpace(maxFDsPerRead))}
}

// Unix returns the socket.
func (c *Conn) Unix() *net.UnixConn { return c.c }

// Send writes line, which must not contain a newline, and the descriptors
// fds, which stay open on this side. Descriptors cannot travel where the
// system has no SCM_RIGHTS (Windows): sending them is mr.ErrNotSupported.
func (c *Conn) Send(line []byte, fds []int) error {
	if bytes.IndexByte(line, '\n') >= 0 {
		return fmt.Errorf("message with a newline: %w", ErrProtocol)
	}
	if len(fds) > maxFDsPerRead {
		return fmt.Errorf("%d descriptors in one message: %w", len(fds), ErrProtocol)
	}
	msg := make([]byte, 0, len(line)+1)
	msg = append(append(msg, line...), '\n')
	var oob []byte
	if len(fds) > 0 {
		var err error
		if oob, err = unixRights(fds); err != nil {
			return err
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(msg) > 0 {
		n, _, err := c.c.WriteMsgUnix(msg, oob, nil)
		if err != nil {
			return err
		}
		msg, oob = msg[n:], nil
	}
	return nil
}

// ReadLine returns the next line, without its newline; it is valid until
// the next call.
func (c *Conn) ReadLine() ([]byte, error) {
	for {
		i := bytes.IndexByte(c.buf[c.off:], '\n')
		if i > c.max || i < 0 && len(c.buf)-c.off > c.max {
			return nil, fmt.Errorf("a line of more than %d bytes: %w", c.max, ErrProtocol)
		}
		if i >= 0 {
			line := c.buf[c.off : c.off+i]
			c.off += i + 1
			return line, nil
		}
		if c.off > 0 {
			c.buf = append(c.buf[:0], c.buf[c.off:]...)
			c.off = 0
		}
		n, oobn, flags, _, err := c.c.ReadMsgUnix(c.rbuf, c.oob)
		n, oobn = max(n, 0), max(oobn, 0) // both are -1 with some errors
		if oobn > 0 {
			if perr := c.takeRights(c.oob[:oobn], flags); perr != nil {
				return nil, perr
			}
		}
		c.buf = append(c.buf, c.rbuf[:n]...)
		if err != nil {
			return nil, err
		}
	}
}

func (c *Conn) takeRights(oob []byte, flags int) error {
	fds, truncated, err := parseRights(oob, flags)
	c.fds = append(c.fds, fds...)
	switch {
	case err != nil:
		return fmt.Errorf("control message: %v: %w", err, ErrProtocol)
	case truncated:
		return fmt.Errorf("descriptors truncated: %w", ErrProtocol)
	case len(c.fds) > MaxFDsQueued:
		return fmt.Errorf("%d descriptors queued: %w", len(c.fds), ErrProtocol)
	}
	return nil
}

// TakeFDs returns the next n descriptors received, which the caller then
// owns.
func (c *Conn) TakeFDs(n int) ([]int, error) {
	if n < 0 || n > len(c.fds) {
		return nil, fmt.Errorf("a message announces %d descriptors, %d came: %w", n, len(c.fds), ErrProtocol)
	}
	fds := append([]int(nil), c.fds[:n]...)
	c.fds = append(c.fds[:0], c.fds[n:]...)
	return fds, nil
}

// Close closes the socket; a ReadLine in progress returns an error.
func (c *Conn) Close() error { return c.c.Close() }

// DropFDs closes the descriptors received and not taken. The reading
// goroutine calls it when it is done.
func (c *Conn) DropFDs() {
	CloseFDs(c.fds)
	c.fds = nil
}

// CloseFDs closes every descriptor of fds.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		CloseFD(fd)
	}
}
