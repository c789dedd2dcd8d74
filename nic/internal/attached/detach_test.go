package attached

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// TestDetachFromHungDaemon: Close waits for the daemon to finish the
// detach, but no longer than detachWait: a daemon that answers the attach
// and then never closes the session (stopped, or hung) is cut off, and
// Close still unmaps and returns.
func TestDetachFromHungDaemon(t *testing.T) {
	mustHaveAttach(t)
	defer func(w time.Duration) { detachWait = w }(detachWait)
	detachWait = 100 * time.Millisecond
	path := filepath.Join(t.TempDir(), "hung.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hung := make(chan *net.UnixConn, 1)
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		if !greet(shm.NewConn(c, attachproto.MaxLine)) {
			return
		}
		hung <- c // read nothing more, close nothing
	}()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := Open(uc, path, slog.New(slog.DiscardHandler), 0, noUp{})
	if err != nil {
		t.Fatal(err)
	}
	c := <-hung
	defer c.Close()
	start := time.Now()
	dev.Close()
	if took := time.Since(start); took < detachWait || took > detachWait+5*time.Second {
		t.Errorf("Close took %v; want detachWait (%v), then give up", took, detachWait)
	}
	if _, err := dev.AllocPD(nil); !errors.Is(err, cm.ErrClosed) {
		t.Errorf("AllocPD after Close: %v, want ErrClosed", err)
	}
}

// greet reads the attach line on c and answers it as a daemon does: a
// hello, with a doorbell's eventfd and page. It reports whether the line
// came.
func greet(c *shm.Conn) bool {
	if _, err := c.ReadLine(); err != nil {
		return false
	}
	bell, _ := shm.NewEventFD()
	page, _ := shm.Create("test-doorbell", shm.DoorbellSize)
	hello, _ := json.Marshal(attachproto.Hello{Addr: netip.MustParseAddrPort("127.0.0.1:4791"), MTU: 1024, Version: attachproto.Version})
	line, _ := json.Marshal(attachproto.Msg{FDs: 2, Result: hello})
	c.Send(line, []int{bell, page.FD()})
	shm.CloseFDs([]int{bell})
	page.Close()
	return true
}

// mustHaveAttach skips t unless attach mode works here, as
// nictest.MustHaveAttach does (nictest imports nic, which imports this
// package).
func mustHaveAttach(t testing.TB) {
	t.Helper()
	if err := shm.Supported(); err != nil {
		t.Skipf("attach mode is not supported here: %v", err)
	}
}

// noUp is the device above a provider that makes no QP.
type noUp struct{}

func (noUp) WrapQP(_ any, q provider.QP) any { return q }
func (noUp) QPError(any, verbs.WCStatus)     {}
func (noUp) SRQLimit(any)                    {}
