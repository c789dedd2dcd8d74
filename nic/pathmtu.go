package nic

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"log/slog"

	"github.com/softnic/softnic/nic/internal/route"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
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

func (d *embeddedDevice) PathMTU(dst netip.AddrPort) int { return d.routes.Get(dst.Addr()).MTU }

// pathTooBig handles the kernel's EMSGSIZE for a packet of q to dst: the
// route carries less than q's path MTU (a route's MTU changed, or an ICMP
// "fragmentation needed" came). It counts it, lowers the path MTU the
// device uses toward dst for new connections (to what the kernel now says
// the route carries, or one step below q's), and fails a connected q at
// once (its work requests complete with WR_FLUSH_ERR) rather than let it
// send the packet again until its retries run out. q.mu is held.
func (d *embeddedDevice) pathTooBig(q *embeddedQP, dst netip.AddrPort) {
	d.devc.inc(PathMTUExceeded)
	qpMTU := q.qp.Attr().PathMTU
	if qpMTU == 0 || q.qp.Type() == verbs.UD {
		qpMTU = d.cfg.MTU // a UD QP's datagrams are at most the device's MTU
	}
	old := d.routes.Get(dst.Addr())
	r := d.routes.Probe(dst.Addr().Unmap())
	if r.MTU >= qpMTU {
		r.MTU = max(qpMTU/2, wire.MTU256.Bytes())
	}
	r.MTU = min(r.MTU, old.MTU)
	d.routes.Store(dst.Addr().Unmap(), r)
	if r.MTU < old.MTU {
		d.log.Warn("softnic: the route to a peer carries less than a QP's path MTU: new connections use the smaller MTU",
			slog.Any("peer", dst), slog.String("qpn", fmt.Sprintf("%#x", q.num)), slog.Int("qp_mtu", qpMTU), slog.Int("path_mtu", r.MTU))
	}
	if t := q.qp.Type(); t == verbs.RC || t == verbs.UC {
		q.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
}

// isMsgSize reports whether err is the kernel's EMSGSIZE.
func isMsgSize(err error) bool { return errors.Is(err, syscall.EMSGSIZE) }
