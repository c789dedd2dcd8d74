package nic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"time"

	"github.com/softnic/softnic/nic/internal/hooks"
)

// Who may talk to whom over a daemon's control socket. Whoever attaches
// can map memory through the daemon and use its device, as whoever opens
// /dev/infiniband/uverbs0 can: the daemon serves its own user, root, and
// the members of the groups it was told to admit (package nic/attachd),
// and checks the kernel's word for who connected (SO_PEERCRED) on every
// connection, whatever the socket file's mode. A client, in turn, sends
// nothing to a socket that neither it nor root owns, nor to a listener
// running as another user, unless told to trust that user
// (EnvSocketOwner): whoever created the path first would otherwise
// receive its regions' memory.

// EnvSocketOwner names the environment variable with the user (a name or
// a uid) a client trusts to run the daemon besides itself and root, for a
// daemon of another user that admits the client's group.
const EnvSocketOwner = "SOFTNIC_SOCKET_OWNER"

// PeerCred is the process at the other end of a unix socket as the kernel
// saw it when it connected, or listened for a client's connection.
type PeerCred struct {
	PID, UID, GID int
}

// PeerCredOf returns the credentials of the process at the other end of c
// (SO_PEERCRED). Where the system does not tell (all but Linux) it returns
// ErrNotSupported.
func PeerCredOf(c *net.UnixConn) (PeerCred, error) {
	var cred PeerCred
	var cerr error
	err := control(c, func(fd int) { cred, cerr = peerCred(fd) })
	if err = errors.Join(err, cerr); err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	return cred, nil
}

// control runs f on c's descriptor.
func control(c *net.UnixConn, f func(fd int)) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(func(fd uintptr) { f(int(fd)) })
}

// DialControl connects to the control socket of a softnic daemon at path,
// once it has checked, before sending anything, that the socket file and
// the process listening on it belong to the caller's user or root, or to
// the user EnvSocketOwner names. Otherwise it fails with ErrAccess,
// naming the owner: whoever created the path first would receive what the
// caller sends, the memory of its regions included. While the daemon's
// backlog is full (it paces its accepts; a flood of connections fills it)
// DialControl waits for room, in turn with the other processes
// connecting, until ctx's deadline or for ConnectWait, and then fails
// with an error wrapping syscall.EAGAIN (the wait is the kernel's: ctx's
// cancellation ends it no sooner).
func DialControl(ctx context.Context, path string) (*net.UnixConn, error) {
	trusted, err := trustedOwners()
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("%s is not a socket (%v): %w", path, fi.Mode(), ErrInvalid)
	}
	uid, err := fileOwner(fi)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if !slices.Contains(trusted, uid) {
		return nil, untrusted(fmt.Sprintf("control socket %s belongs to", path), uid, trusted)
	}
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	cred, err := PeerCredOf(c)
	if err == nil && !slices.Contains(trusted, cred.UID) {
		err = untrusted(fmt.Sprintf("the process listening on control socket %s (pid %d) runs as", path, cred.PID), cred.UID, trusted)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ConnectWait is how long DialControl waits for room in a daemon's
// backlog when its context has no deadline.
const ConnectWait = 5 * time.Second

// trustedOwners returns the users a client trusts to run its daemon: its
// own, root, and the one EnvSocketOwner names.
func trustedOwners() ([]int, error) {
	trusted := []int{os.Geteuid(), 0}
	name := os.Getenv(EnvSocketOwner)
	if name == "" {
		return trusted, nil
	}
	if uid, err := strconv.Atoi(name); err == nil {
		return append(trusted, uid), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %v: %w", EnvSocketOwner, name, err, ErrInvalid)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return append(trusted, uid), nil
}

// untrusted is the error for a socket or listener of user uid.
func untrusted(what string, uid int, trusted []int) error {
	want := "you (" + hooks.UserName(trusted[0]) + ") or root"
	if len(trusted) > 2 {
		want += " or " + hooks.UserName(trusted[2]) + " (" + EnvSocketOwner + ")"
	}
	return fmt.Errorf("%s %s, not %s: not connecting (%s=USER trusts another user's daemon): %w",
		what, hooks.UserName(uid), want, EnvSocketOwner, ErrAccess)
}
