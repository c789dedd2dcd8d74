package nic

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"log/slog"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The path MTU: what one packet toward a peer may carry. rxe takes its
// active MTU from the network interface its device is bound to; a softnic
// device may listen on every interface, so it takes it per peer, from the
// interface of the local address it reaches the peer from, and lowers it
// for a destination whose route turns out to carry less (the kernel
// answers such a send with EMSGSIZE: a smaller route MTU, or an ICMP
// "fragmentation needed" the kernel recorded). Config.MTU caps it.

// rxeHeaderAllowance is what rxe subtracts from its network interface's MTU
// before it picks the port's active MTU (RXE_MAX_HDR_LENGTH): room for the
// IP, UDP and InfiniBand headers and the ICRC.
const rxeHeaderAllowance = 80

// RoCEMTU returns the largest RoCE path MTU (256 to 4096) whose packets
// fit a network interface MTU of ifMTU bytes, as rxe chooses its active
// MTU: 1024 on a 1500-byte Ethernet link, 4096 on a 9000-byte one. It
// returns 0 if not even 256 fits.
func RoCEMTU(ifMTU int) int {
	for m := wire.MTU4096; m >= wire.MTU256; m-- {
		if m.Bytes() <= ifMTU-rxeHeaderAllowance {
			return m.Bytes()
		}
	}
	return 0
}

// LocalMTU returns the RoCE path MTU (RoCEMTU) of the network interface
// that holds the address local, or whose network contains it (127.0.0.2
// is on lo, whose address is 127.0.0.1/8).
func LocalMTU(local netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	local = local.Unmap()
	exact, containing := 0, 0
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			switch {
			case err != nil:
			case p.Addr().Unmap() == local:
				exact = ifc.MTU
			case containing == 0 && p.Contains(local):
				containing = ifc.MTU
			}
		}
	}
	ifMTU := cmp.Or(exact, containing)
	if ifMTU == 0 {
		return 0, fmt.Errorf("no network interface has the address %v", local)
	}
	m := RoCEMTU(ifMTU)
	if m == 0 {
		return 0, fmt.Errorf("the interface of %v has an MTU of %d bytes: too small for RoCE", local, ifMTU)
	}
	return m, nil
}

// maxRoutes bounds the device's table of routes: a peer that sends from
// ever new (spoofed) addresses makes the device answer ever new
// destinations.
const maxRoutes = 4096

// boundedMap is a sync.Map of at most about maxRoutes entries: storing a
// new key into a full one first drops an entry, whichever Range yields
// first. Loads take no lock (the data path looks up a route per packet).
type boundedMap[K comparable, V any] struct {
	m    sync.Map
	size atomic.Int64
}

func (b *boundedMap[K, V]) load(k K) (V, bool) {
	v, ok := b.m.Load(k)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (b *boundedMap[K, V]) store(k K, v V) {
	if _, loaded := b.m.Swap(k, v); loaded {
		return
	}
	if b.size.Add(1) <= maxRoutes {
		return
	}
	b.m.Range(func(old, _ any) bool {
		if old == any(k) {
			return true
		}
		if _, ok := b.m.LoadAndDelete(old); ok {
			b.size.Add(-1)
		}
		return false
	})
}

// route is what the device knows of its way to a peer address.
type route struct {
	src netip.Addr // our address toward the peer (for a wildcard bind)
	mtu int        // the RoCE path MTU (RoCEMTU of the route's), at most Config.MTU
}

// route returns the device's route to dst: asked of the kernel once, with
// a UDP socket connected to dst (bound to the device's address, if it has
// one), for the source address it picks and the MTU of the route
// (IP_MTU: the interface's, or less where a route or an ICMP
// "fragmentation needed" says so), as rxe takes its MTU from its
// interface's. Where that cannot be asked, the MTU is the interface's of
// the source address (LocalMTU); failing that, Config.MTU.
func (d *embeddedDevice) route(dst netip.Addr) route {
	dst = dst.Unmap()
	if r, ok := d.routes.load(dst); ok {
		return r
	}
	r := d.probeRoute(dst)
	d.routes.store(dst, r)
	return r
}

func (d *embeddedDevice) probeRoute(dst netip.Addr) route {
	r := route{src: d.local.Addr(), mtu: d.cfg.MTU}
	var laddr *net.UDPAddr
	if !r.src.IsUnspecified() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.src, 0))
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.UDPPort)))
	if err != nil {
		return r
	}
	defer c.Close()
	r.src = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	if ifMTU, ok := connMTU(c, dst); ok {
		if m := RoCEMTU(ifMTU); m != 0 {
			r.mtu = min(m, d.cfg.MTU)
		}
	} else if m, err := LocalMTU(r.src); err == nil {
		r.mtu = min(m, d.cfg.MTU)
	}
	return r
}

// PathMTU returns the path MTU the device uses toward dst: the RoCE MTU of
// its route there (see route), lowered when the kernel refused a packet as
// too large for it, at most Config.MTU. An attached device returns the
// daemon's Config.MTU: the daemon picks the path MTU of the connections
// it makes.
func (d *Device) PathMTU(dst netip.AddrPort) int { return d.prov.PathMTU(dst) }

func (d *embeddedDevice) PathMTU(dst netip.AddrPort) int { return d.route(dst.Addr()).mtu }

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
	old := d.route(dst.Addr())
	r := d.probeRoute(dst.Addr().Unmap())
	if r.mtu >= qpMTU {
		r.mtu = max(qpMTU/2, wire.MTU256.Bytes())
	}
	r.mtu = min(r.mtu, old.mtu)
	d.routes.store(dst.Addr().Unmap(), r)
	if r.mtu < old.mtu {
		d.log.Warn("softnic: the route to a peer carries less than a QP's path MTU: new connections use the smaller MTU",
			slog.Any("peer", dst), slog.String("qpn", fmt.Sprintf("%#x", q.num)), slog.Int("qp_mtu", qpMTU), slog.Int("path_mtu", r.mtu))
	}
	if t := q.qp.Type(); t == verbs.RC || t == verbs.UC {
		q.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	}
}

// isMsgSize reports whether err is the kernel's EMSGSIZE.
func isMsgSize(err error) bool { return errors.Is(err, syscall.EMSGSIZE) }
