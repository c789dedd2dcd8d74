package attachd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
)

// otherVersions are attach lines of clients that speak another version of
// the attach protocol than the daemon, and the version each names.
var otherVersions = []struct {
	name    string
	line    string
	version int
}{
	{"a client of before versions", `{"cmd":"attach"}`, 0},
	{"a later client", string(attachproto.AttachLine(attachproto.Version + 1)), attachproto.Version + 1},
	{"an earlier client", string(attachproto.AttachLine(attachproto.Version - 1)), attachproto.Version - 1},
}

// refusedAttach sends line on c, and returns the daemon's answer, which
// must be its last word: the daemon closes the connection after it.
func refusedAttach(t *testing.T, c *net.UnixConn, line string) attachproto.Msg {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // a daemon that never answers: fail, not hang
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	conn := shm.NewConn(c, attachproto.MaxLine)
	answer, err := conn.ReadLine()
	if err != nil {
		t.Fatalf("no answer to %s: %v", line, err)
	}
	var m attachproto.Msg
	if err := json.Unmarshal(answer, &m); err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	if m.ID != 0 || m.FDs != 0 || m.Result != nil {
		t.Errorf("answer %q: want a refusal, with no result or descriptor", answer)
	}
	if more, err := conn.ReadLine(); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %q, %v; want the daemon to close the connection", more, err)
	}
	return m
}

// checkRefusal checks that m refuses a client of version with a
// VersionError that names the daemon's version and the client's.
func checkRefusal(t *testing.T, m attachproto.Msg, version int) {
	t.Helper()
	err := m.Err()
	var ver *attachproto.VersionError
	if !errors.Is(err, nic.ErrProtoNotSupported) || !errors.As(err, &ver) || ver.Daemon != attachproto.Version || ver.Client != version {
		t.Errorf("refusal %#v (%v), want a VersionError{Daemon: %d, Client: %d}, errors.Is ErrProtoNotSupported",
			m, err, attachproto.Version, version)
	}
	if want := fmt.Sprintf("the daemon speaks attach protocol %d, the library ", attachproto.Version); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %v: want it to say %q, for a client of before versions that shows it as it is", err, want)
	}
}

// TestAttachOtherVersionRefused: the daemon refuses a client of another
// attach protocol version, or of none, with an answer that names both
// versions, counts it and logs it once (then at most once a minute), and
// serves a client of its own version afterwards.
func TestAttachOtherVersionRefused(t *testing.T) {
	var logged messageCounter
	logged.msg = []byte("another attach protocol version")
	_, srv, path := serveTest(t, Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	for _, tt := range otherVersions {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			checkRefusal(t, refusedAttach(t, c, tt.line), tt.version)
		})
	}
	if n := srv.RefusedVersions(); n != uint64(len(otherVersions)) {
		t.Errorf("RefusedVersions %d, want %d", n, len(otherVersions))
	}
	if n := srv.RefusedPeers(); n != 0 {
		t.Errorf("RefusedPeers %d, want 0: the clients were admitted, and refused for their version", n)
	}
	if n := logged.n.Load(); n != 1 {
		t.Errorf("%d lines logged for %d refused versions in a minute, want 1", n, len(otherVersions))
	}
	dev, err := nic.Open(nic.Config{Attach: path})
	if err != nil {
		t.Fatalf("a client of the daemon's version after the refusals: %v", err)
	}
	defer dev.Close()
	if _, err := dev.AllocPD(); err != nil {
		t.Errorf("AllocPD: %v", err)
	}
	if n := len(srv.Processes()); n != 1 {
		t.Errorf("%d processes attached, want 1", n)
	}
}

// TestServeConnOtherVersion: a control socket that reads the attach line
// itself (softnic serve's) hands it to ServeConn, which refuses a client
// of another version and says why.
func TestServeConnOtherVersion(t *testing.T) {
	_, srv, _ := serveTest(t, Config{})
	path := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tt := range otherVersions {
		t.Run(tt.name, func(t *testing.T) {
			served := make(chan error, 1)
			go func() {
				c, err := l.AcceptUnix()
				if err != nil {
					served <- err
					return
				}
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				line, err := ReadControlLine(c, 4096)
				c.SetReadDeadline(time.Time{})
				if err != nil {
					c.Close()
					served <- err
					return
				}
				served <- srv.ServeConn(c, line)
			}()
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			checkRefusal(t, refusedAttach(t, c, tt.line), tt.version)
			c.Close() // the daemon reads what the client sent to its end before it closes
			if err := <-served; !errors.Is(err, nic.ErrProtoNotSupported) {
				t.Errorf("ServeConn: %v, want ErrProtoNotSupported", err)
			}
		})
	}
	if n := srv.RefusedVersions(); n != uint64(len(otherVersions)) {
		t.Errorf("RefusedVersions %d, want %d", n, len(otherVersions))
	}
}
