// Package route is what the embedded device knows of its way to each peer
// address: the source address it sends from and the path MTU, what one
// packet toward the peer may carry. rxe takes its active MTU from the
// network interface its device is bound to; a softnic device may listen on
// every interface, so it takes it per peer, from the interface of the
// local address it reaches the peer from, and lowers it for a destination
// whose route turns out to carry less (the kernel answers such a send with
// EMSGSIZE: a smaller route MTU, or an ICMP "fragmentation needed" the
// kernel recorded). The device's MTU caps it.
package route

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/wire"
)

// rxeHeaderAllowance is what rxe subtracts from its network interface's MTU
// before it picks the port's active MTU (RXE_MAX_HDR_LENGTH): room for the
// IP, UDP and InfiniBand headers and the ICRC.
const rxeHeaderAllowance = 80

// RoCEMTU is the RoCE path MTU of a network interface MTU of ifMTU bytes,
// which package nic's RoCEMTU documents.
func RoCEMTU(ifMTU int) int {
	for m := wire.MTU4096; m >= wire.MTU256; m-- {
		if m.Bytes() <= ifMTU-rxeHeaderAllowance {
			return m.Bytes()
		}
	}
	return 0
}

// LocalMTU is the RoCE path MTU of the network interface of local, which
// package nic's LocalMTU documents.
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

// Route is what the device knows of its way to a peer address.
type Route struct {
	Src netip.Addr // our address toward the peer (for a wildcard bind)
	MTU int        // the RoCE path MTU (RoCEMTU of the route's), at most the device's
}

// Table holds, per peer address, the device's Route toward it; bounded
// (maxRoutes). Its zero value is not usable: call Init.
type Table struct {
	local netip.Addr // the device's bound address, unspecified for a wildcard bind
	mtu   int        // the device's MTU, the most any route gets
	m     boundedMap[netip.Addr, Route]
}

// Init sets the table up for a device bound to local with MTU mtu.
func (t *Table) Init(local netip.Addr, mtu int) { t.local, t.mtu = local, mtu }

// Get returns the device's route to dst: asked of the kernel once, with
// a UDP socket connected to dst (bound to the device's address, if it has
// one), for the source address it picks and the MTU of the route
// (IP_MTU: the interface's, or less where a route or an ICMP
// "fragmentation needed" says so), as rxe takes its MTU from its
// interface's. Where that cannot be asked, the MTU is the interface's of
// the source address (LocalMTU); failing that, the device's MTU.
func (t *Table) Get(dst netip.Addr) Route {
	dst = dst.Unmap()
	if r, ok := t.m.load(dst); ok {
		return r
	}
	r := t.Probe(dst)
	t.m.store(dst, r)
	return r
}

// Store replaces the route to dst (an address Unmap'd).
func (t *Table) Store(dst netip.Addr, r Route) { t.m.store(dst, r) }

// Probe asks the kernel for the route to dst (an address Unmap'd) again,
// as Get does the first time, without storing it.
func (t *Table) Probe(dst netip.Addr) Route {
	r := Route{Src: t.local, MTU: t.mtu}
	var laddr *net.UDPAddr
	if !r.Src.IsUnspecified() {
		laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.Src, 0))
	}
	c, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.UDPPort)))
	if err != nil {
		return r
	}
	defer c.Close()
	r.Src = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	if ifMTU, ok := connMTU(c, dst); ok {
		if m := RoCEMTU(ifMTU); m != 0 {
			r.MTU = min(m, t.mtu)
		}
	} else if m, err := LocalMTU(r.Src); err == nil {
		r.MTU = min(m, t.mtu)
	}
	return r
}
