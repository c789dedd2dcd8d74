package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// defaultCMPort is the rdma_cm port softnic serve accepts connections to
// its regions on and the one-shot commands dial: 4791, the number of
// RoCEv2's UDP port. The daemon shares its device's rdma_cm ports with the
// programs attached to it, so it leaves free the ports those listen on by
// default: librdmacm's examples' 7471 (rdma_server, rdma_client, cmtime)
// and 7174 (rping, ucmatose, udaddy, mckey), and perftest's 18515.
const defaultCMPort = 4791

// resolvePeer turns HOST[:PORT] into the address of a softnic device; the
// port defaults to 4791, RoCEv2's. A host name is looked up (within ctx).
func resolvePeer(ctx context.Context, s string) (netip.AddrPort, error) {
	if s == "" {
		return netip.AddrPort{}, errors.New("missing --peer HOST:PORT")
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(a, wire.UDPPort), nil
	}
	host, port := s, uint64(wire.UDPPort)
	if h, p, err := net.SplitHostPort(s); err == nil {
		if port, err = strconv.ParseUint(p, 10, 16); err != nil {
			return netip.AddrPort{}, fmt.Errorf("peer %q: bad port %q", s, p)
		}
		host = h
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("peer %q: cannot resolve %q", s, host)
	}
	return netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), nil
}

// defaultControlPath is where softnic serve puts its control socket and
// the inspecting commands look for it: $XDG_RUNTIME_DIR/softnic.sock, or
// without a runtime directory softnic.sock in tempControlDir.
func defaultControlPath() string { return nic.DefaultSocket() }

// addMTUFlag defines a command's --mtu, a size (so "4k" is 4096) with
// the default def; checkMTUFlag checks it.
func addMTUFlag(fs *flag.FlagSet, def int, usage string) *flagval.Size {
	f := &flagval.Size{Val: def}
	fs.Var(f, "mtu", usage)
	return f
}

// checkMTUFlag checks a tool's --mtu: 0 (not given) or a RoCE MTU.
func checkMTUFlag(mtu int) error {
	if _, ok := wire.MTUFromBytes(mtu); !ok && mtu != 0 {
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", mtu)
	}
	return nil
}
