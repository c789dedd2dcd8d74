package nic_test

import (
	"net"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/softnic/softnic/nic"
)

// emfileListener fails its first accepts with EMFILE, as a process out of
// descriptors does.
type emfileListener struct {
	net.Listener
	fail atomic.Int32
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.fail.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServeOutlastsEMFILE: Serve waits out a process out of descriptors,
// counts it, and attaches the next process; it ends only when its
// listener closes.
func TestServeOutlastsEMFILE(t *testing.T) {
	dev, err := nic.Open(nic.Config{Addr: loopback, Embed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srv := nic.NewAttachServer(dev, nic.AttachServerConfig{})
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "softnic.sock")
	ul, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l := &emfileListener{Listener: ul}
	l.fail.Store(3)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	att, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatalf("attach after three EMFILEs: %v", err)
	}
	att.Close()
	if n := srv.AcceptErrors(); n != 3 {
		t.Errorf("AcceptErrors = %d, want 3", n)
	}
	l.Close()
	if err := <-served; err == nil {
		t.Error("Serve returned nil once its listener closed")
	}
}
