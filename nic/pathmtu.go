package nic

import (
	"net/netip"

	"github.com/softnic/softnic/nic/internal/route"
)

// The path MTU: what one packet toward a peer may carry, per peer, is
// package nic/internal/route's; Config.MTU caps it.

// RoCEMTU returns the largest RoCE path MTU (256 to 4096) whose packets
// fit a network interface MTU of ifMTU bytes, as rxe chooses its active
// MTU: 1024 on a 1500-byte Ethernet link, 4096 on a 9000-byte one. It
// returns 0 if not even 256 fits.
func RoCEMTU(ifMTU int) int { return route.RoCEMTU(ifMTU) }

// LocalMTU returns the RoCE path MTU (RoCEMTU) of the network interface
// that holds the address local, or whose network contains it (127.0.0.2
// is on lo, whose address is 127.0.0.1/8).
func LocalMTU(local netip.Addr) (int, error) { return route.LocalMTU(local) }

// PathMTU returns the path MTU the device uses toward dst: the RoCE MTU of
// its route there, lowered when the kernel refused a packet as too large
// for it, at most Config.MTU. An attached device returns the
// daemon's Config.MTU: the daemon picks the path MTU of the connections
// it makes.
func (d *Device) PathMTU(dst netip.AddrPort) int { return d.prov.PathMTU(dst) }
