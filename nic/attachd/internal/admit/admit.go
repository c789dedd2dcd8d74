// Package admit decides who may attach to a daemon: its own user, root,
// and the members of the groups it was told to admit, by the kernel's word
// for who connected (SO_PEERCRED, SO_PEERGROUPS), whatever the socket
// file's mode (see nic.DialControl for the client's side of the rule).
package admit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/hooks"
)

// Admit returns who is at the other end of c, a connection to the
// daemon's control socket, or nic.ErrAccess when that is neither the
// daemon's user nor root nor a member of one of groups.
func Admit(c *net.UnixConn, groups []int) (nic.PeerCred, error) {
	cred, err := nic.PeerCredOf(c)
	if err != nil {
		return cred, err
	}
	self := os.Geteuid()
	if cred.UID == self || cred.UID == 0 || slices.Contains(groups, cred.GID) {
		return cred, nil
	}
	if len(groups) > 0 {
		if sup, err := peerGroups(c); err == nil && slices.ContainsFunc(sup, func(g int) bool { return slices.Contains(groups, g) }) {
			return cred, nil
		}
	}
	allowed := "the daemon's user"
	if len(groups) > 0 {
		allowed += " and the members of " + groupNames(groups)
	}
	return cred, fmt.Errorf("%s (pid %d) may not use this daemon of %s: it serves %s and root (softnic serve --allow-group admits a group): %w",
		hooks.UserName(cred.UID), cred.PID, hooks.UserName(self), allowed, nic.ErrAccess)
}

// peerGroups returns the supplementary groups of the process at the other
// end of c (SO_PEERGROUPS).
func peerGroups(c *net.UnixConn) ([]int, error) {
	var gids []int
	var gerr error
	raw, err := c.SyscallConn()
	if err == nil {
		err = raw.Control(func(fd uintptr) { gids, gerr = peerGroupsOf(int(fd)) })
	}
	if err = errors.Join(err, gerr); err != nil {
		return nil, fmt.Errorf("peer groups: %w", err)
	}
	return gids, nil
}

// groupNames names gids as "group N (name)", joined.
func groupNames(gids []int) string {
	s := ""
	for i, g := range gids {
		if i > 0 {
			s += ", "
		}
		s += "group " + strconv.Itoa(g)
		if gr, err := user.LookupGroupId(strconv.Itoa(g)); err == nil {
			s += " (" + gr.Name + ")"
		}
	}
	return s
}
