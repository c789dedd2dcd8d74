package nic_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softnic/softnic/nic"
)

// TestDialControlChecksOwner: DialControl connects to a socket of the
// caller's own user or root, refuses one of another user (ErrAccess,
// naming the owner) unless SOFTNIC_SOCKET_OWNER trusts that user, and
// refuses what is not a socket.
func TestDialControlChecksOwner(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ctl.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, err := nic.DialControl(context.Background(), path)
	if err != nil {
		t.Fatalf("DialControl to a socket of one's own: %v", err)
	}
	c.Close()

	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := nic.DialControl(context.Background(), file); !errors.Is(err, nic.ErrInvalid) {
		t.Errorf("DialControl to a file: %v, want ErrInvalid", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("skipped: giving the socket to another user takes root")
	}
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = nic.DialControl(context.Background(), path)
	if !errors.Is(err, nic.ErrAccess) || !strings.Contains(err.Error(), "belongs to uid 65534 (nobody)") {
		t.Errorf("DialControl to a socket of nobody: %v, want ErrAccess naming uid 65534 (nobody)", err)
	}
	t.Setenv(nic.EnvSocketOwner, "nobody")
	if c, err := nic.DialControl(context.Background(), path); err != nil {
		t.Errorf("DialControl with %s=nobody: %v", nic.EnvSocketOwner, err)
	} else {
		c.Close()
	}
}
