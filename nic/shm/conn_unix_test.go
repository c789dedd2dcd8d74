//go:build unix

package shm

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func socketPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *Conn {
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		return NewConn(c.(*net.UnixConn), 1024)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestConnRefusesLongLines(t *testing.T) {
	a, b := socketPair(t)
	go a.Send(bytes.Repeat([]byte("x"), 5000), nil)
	if _, err := b.ReadLine(); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReadLine of a 5000-byte line with a limit of 1024: %v", err)
	}
	if err := a.Send([]byte("two\nlines"), nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("Send of a line with a newline: %v", err)
	}
}
