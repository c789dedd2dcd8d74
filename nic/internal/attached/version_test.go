package attached

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
)

// TestOpenOtherVersion: against a daemon of another attach protocol
// version, or of a release before versions, Open fails at once with an
// error that names both versions (errors.Is ErrProtoNotSupported), and
// closes the descriptors the daemon's answer carried. A daemon of before
// versions either states none in its hello (softnic serve's, which reads
// the attach line for its command alone) or closes the connection on the
// line, which is longer than the one it knows (attachd.Serve's).
func TestOpenOtherVersion(t *testing.T) {
	mustHaveAttach(t)
	v := attachproto.Version
	// answer reads the attach line on uc, checks that it names this
	// client's version, and sends the answer send makes.
	answer := func(send func(c *shm.Conn, bell *os.File)) func(*net.UnixConn, *os.File) {
		return func(uc *net.UnixConn, bell *os.File) {
			c := shm.NewConn(uc, attachproto.MaxLine)
			line, err := c.ReadLine()
			if err != nil {
				t.Errorf("reading the attach line: %v", err)
				return
			}
			if req, err := attachproto.ParseAttachLine(line); err != nil || req.Version != v {
				t.Errorf("the attach line %q (%v), want one of version %d", line, err, v)
			}
			send(c, bell)
		}
	}
	refuse := answer(func(c *shm.Conn, _ *os.File) {
		var m attachproto.Msg
		m.SetError(&attachproto.VersionError{Daemon: attachproto.Version + 1, Client: attachproto.Version})
		line, _ := json.Marshal(&m)
		c.Send(line, nil)
	})
	hello := func(version int) func(*net.UnixConn, *os.File) {
		return answer(func(c *shm.Conn, bell *os.File) {
			page, err := shm.Create("version-doorbell", shm.DoorbellSize)
			if err != nil {
				t.Error(err)
				return
			}
			defer page.Close()
			h, _ := json.Marshal(attachproto.Hello{Addr: netip.MustParseAddrPort("127.0.0.1:4791"), MTU: 1024, Version: version})
			line, _ := json.Marshal(attachproto.Msg{FDs: 2, Result: h})
			c.Send(line, []int{int(bell.Fd()), page.FD()})
		})
	}
	// oldServe reads what an attachd.Serve of before versions read, as
	// many bytes as {"cmd":"attach"} and its newline and one more, finds no
	// newline in them, and closes the connection with the rest unread.
	oldServe := func(uc *net.UnixConn, _ *os.File) {
		io.ReadFull(uc, make([]byte, len(`{"cmd":"attach"}`)+2))
		uc.Close()
	}
	later := fmt.Sprintf("the daemon speaks attach protocol %d, the library %d: use a library and a daemon of one release: protocol not supported (EPROTONOSUPPORT)", v+1, v)
	tests := []struct {
		name   string
		daemon func(uc *net.UnixConn, bell *os.File) // what the daemon does on the connection; bell is a descriptor it may send
		want   string                                // in Open's error
		proto  bool                                  // errors.Is ErrProtoNotSupported
	}{
		{"refused by a later daemon", refuse, later, true},
		{"a hello of a later version", hello(v + 1), later, true},
		{"a hello of an earlier version", hello(v - 1), fmt.Sprintf("the daemon speaks attach protocol %d, the library %d:", v-1, v), true},
		{"a hello that states none", hello(0), fmt.Sprintf("the daemon speaks attach protocol none (a release before protocol versions), the library %d:", v), true},
		{"closed on the line", oldServe, fmt.Sprintf("the daemon closed the connection without answering the attach request, as one of a release "+
			"before attach protocol versions does (this library speaks version %d; use a library and a daemon of one release)", v), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The daemon's doorbell is a pipe's write end here: once
			// every copy of it is closed, the read end reads EOF.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			path := filepath.Join(t.TempDir(), "other.sock")
			l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer w.Close()
				uc, err := l.AcceptUnix()
				if err != nil {
					t.Error(err)
					return
				}
				defer uc.Close()
				tt.daemon(uc, w)
			}()
			uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			dev, err := Open(uc, path, slog.New(slog.DiscardHandler), 0, noUp{})
			<-done
			if err == nil {
				dev.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("Open: %v", err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open: %v\nwant it to say %q", err, tt.want)
			}
			if got := errors.Is(err, attachproto.ErrProtoNotSupported); got != tt.proto {
				t.Errorf("errors.Is(%v, ErrProtoNotSupported) = %v, want %v", err, got, tt.proto)
			}
			r.SetReadDeadline(time.Now().Add(5 * time.Second)) // a descriptor left open: fail, not hang
			if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("the doorbell the daemon sent is still open after Open failed: read %d, %v", n, err)
			}
		})
	}
}
