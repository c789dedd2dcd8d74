//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
)

// TestControlSocketMode: the control socket is the daemon's user's alone
// (0600), or with --allow-group its group's too (0660); the private
// directory it was bound in is gone, and so is the socket once the daemon
// stops.
func TestControlSocketMode(t *testing.T) {
	tests := []struct {
		name string
		args []string
		mode os.FileMode
		gid  int
	}{
		{"alone", nil, 0o600, -1},
		{"with a group", []string{"--allow-group", "nogroup"}, 0o660, 65534},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.gid >= 0 {
				needRoot(t) // chown to a group of another user
			}
			d := startDaemon(t, tt.args...)
			fi, err := os.Lstat(d.control)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != tt.mode || int(st.Uid) != os.Geteuid() || (tt.gid >= 0 && int(st.Gid) != tt.gid) {
				t.Errorf("control socket %v uid %d gid %d, want a socket of mode %v of uid %d (gid %d)", fi.Mode(), st.Uid, st.Gid, tt.mode, os.Geteuid(), tt.gid)
			}
			ents, err := os.ReadDir(filepath.Dir(d.control))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 {
				t.Errorf("the control socket's directory holds %v, want the socket alone", ents)
			}
			if code := d.shutdown(t); code != 0 {
				t.Fatalf("exit status %d", code)
			}
			if _, err := os.Lstat(d.control); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the control socket is still there after the daemon stopped: %v", err)
			}
		})
	}
}

// TestControlSocketUmaskRace: with umask 000, another user connecting in
// a loop while the daemon starts in a world-writable directory never gets
// a connection: the socket has its mode before it has its path. (Bound
// first and chmod'ed after, it let such a user in at the first try.)
func TestControlSocketUmaskRace(t *testing.T) {
	path := filepath.Join(sharedDir(t, 0o1777), "ctl.sock")
	racer := startNobody(t, "connect-loop", path)
	d := startChildDaemonAt(t, path, []string{childUmaskEnv + "=0"})
	var info control.Info
	if err := control.Call(context.Background(), d.control, "info", &info); err != nil {
		t.Fatal(err)
	}
	var seen struct{ Tries, Conns int }
	racer.finish(t, &seen)
	if seen.Tries == 0 || seen.Conns != 0 {
		t.Errorf("another user connected %d times in %d tries while the daemon started", seen.Conns, seen.Tries)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket of mode %v under umask 000, want 0600", fi.Mode().Perm())
	}
}

// TestControlSocketImpostor: another user who created the control
// socket's path first, in a world-writable directory, gets nothing: the
// CLI and the attach client refuse the socket, naming its owner, and send
// no byte; once its file is made to look like root's, they refuse the
// process listening on it (SO_PEERCRED); the daemon refuses to start on
// that path.
func TestControlSocketImpostor(t *testing.T) {
	nictest.MustHaveAttach(t)
	path := filepath.Join(sharedDir(t, 0o1777), "ctl.sock")
	imp := startNobody(t, "impostor", path)
	const owner = "uid 65534 (nobody)"
	check := func(what string) {
		t.Helper()
		code, _, stderr := runCmd("info", "--control", path)
		if code != 1 || !strings.Contains(stderr, what+" "+owner) || !strings.Contains(stderr, "EACCES") {
			t.Errorf("info: exit status %d, stderr %q; want 1 and %q", code, stderr, what+" "+owner)
		}
		_, err := nic.Open(nic.Config{Attach: path})
		if !errors.Is(err, nic.ErrAccess) || !strings.Contains(err.Error(), what+" "+owner) {
			t.Errorf("attach: %v, want ErrAccess naming %s", err, owner)
		}
	}
	check("control socket " + path + " belongs to")
	if err := os.Lchown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	check("runs as")
	code, _, stderr := runCmd("serve", "--listen", "127.0.0.1:0", "--control", path)
	if code != 2 || !strings.Contains(stderr, "is in use by another softnic serve of uid 65534") {
		t.Errorf("serve on the impostor's path: exit status %d, stderr %q", code, stderr)
	}
	var seen struct{ Conns, Bytes int }
	imp.finish(t, &seen)
	if seen.Bytes != 0 {
		t.Errorf("the impostor received %d bytes", seen.Bytes)
	}
}

// TestControlRefusesOtherUser: a user who is neither the daemon's nor
// root nor of an admitted group is refused on connecting (SO_PEERCRED),
// whatever the socket's mode lets through, with an error that says so
// (EACCES); the refusal is counted. With --allow-group, a member of the
// group is admitted.
func TestControlRefusesOtherUser(t *testing.T) {
	needRoot(t)
	for _, admitted := range []bool{false, true} {
		var args []string
		if admitted {
			args = []string{"--allow-group", "nogroup"}
		}
		dir := sharedDir(t, 0o755)
		path := filepath.Join(dir, "ctl.sock")
		d := startDaemonAt(t, path, args...)
		if err := os.Chmod(path, 0o666); err != nil { // as a careless operator would
			t.Fatal(err)
		}
		c := startChild(t, nobody, nil, "info", "--control", path)
		err := <-c.done
		c.done <- err
		refused := d.counter(t, "control_refused_peers")
		if admitted {
			if err != nil || refused != 0 {
				t.Errorf("a member of the allowed group: %v, %d refused; stderr:\n%s", err, refused, c.stderr)
			}
			continue
		}
		const want = "uid 65534 (nobody)"
		if err == nil || !strings.Contains(c.stderr.String(), want) || !strings.Contains(c.stderr.String(), "EACCES") || refused != 1 {
			t.Errorf("another user: %v, %d refused, stderr %q; want a refusal naming %s", err, refused, c.stderr, want)
		}
	}
}

// startDaemonAt is startDaemon with its control socket at path.
func startDaemonAt(t *testing.T, path string, args ...string) *testDaemon {
	t.Helper()
	d := startDaemon(t, append([]string{"--control", path}, args...)...) // the last --control counts
	d.control = path
	return d
}
