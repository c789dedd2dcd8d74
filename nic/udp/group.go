package udp

import (
	"fmt"
	"net/netip"
	"syscall"
)

// ListenGroup opens a Conn that receives the datagrams sent to the IPv4
// multicast group at port, having joined the group on the interface that
// holds ifAddr (the unspecified address lets the kernel choose by route).
//
// A socket bound to a unicast address never sees a datagram sent to a
// group, so a device that wants a group's traffic needs a socket bound to
// the group itself. Its address is shared (SO_REUSEADDR) so that every
// device of the host that joins the group gets each datagram, as every
// socket bound to a group and port does; closing the Conn leaves the
// group. Such a Conn only reads: sends go out through the device's own
// socket, whose bound address chooses the interface they leave by.
func ListenGroup(group netip.AddrPort, ifAddr netip.Addr, opt Options) (*Conn, error) {
	g := group.Addr().Unmap()
	if !g.Is4() || !g.IsMulticast() || !ifAddr.Unmap().Is4() {
		return nil, fmt.Errorf("udp: join %v on %v: not an IPv4 group and interface address: %w", group, ifAddr, syscall.EINVAL)
	}
	group = netip.AddrPortFrom(g, group.Port())
	uc, err := listenGroup(group, ifAddr.Unmap())
	if err != nil {
		return nil, fmt.Errorf("udp: join %v on %v: %w", group, ifAddr, err)
	}
	c := &Conn{uc: uc, local: group}
	if err := c.init(opt.withDefaults()); err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: join %v on %v: %w", group, ifAddr, err)
	}
	return c, nil
}
