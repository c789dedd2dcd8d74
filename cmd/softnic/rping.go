package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/cmd/softnic/internal/rping"
	"github.com/softnic/softnic/wire"
)

// softnic rping's command line; rping itself is package rping's.

func defineRping(fs *flag.FlagSet) func(*invocation) error {
	server := fs.Bool("s", false, "be the server")
	client := fs.Bool("c", false, "be the client")
	addr := fs.String("a", "", "the server's `ADDR`ess: the client connects to it, the server listens on it (required); a softnic peer on another UDP port as ADDR:PORT")
	source := fs.String("I", "", "the client's local `ADDR`ess (default: its route to the server)")
	count := fs.Int("C", 0, "ping `COUNT` times (default: until interrupted)")
	size := &flagval.Size{Val: rping.DefaultSize}
	fs.Var(size, "S", fmt.Sprintf("ping data `SIZE` in bytes, %d to %d", rping.MinSize, rping.MaxSize))
	verbose := fs.Bool("v", false, "print the ping data")
	fs.Bool("V", true, "validate the ping data (always done: the client compares what comes back, the server what it reads)")
	cmPort := fs.Uint("p", rping.DefaultPort, "the rdma_cm `PORT`")
	udpPort := fs.Uint("udp-port", uint(wire.UDPPort), "the RoCEv2 UDP `PORT` of the device (Linux rxe's is 4791)")
	mtu := addMTUFlag(fs, 0, "the largest path `MTU`: 256 to 4096 (default: what the interface carries, as rxe derives it)")
	counters := fs.Bool("counters", false, "print the device's counters at the end")
	pcap := fs.String("pcap", "", "capture every packet sent and received to `FILE`")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		cfg := rping.Config{Server: *server, Count: *count, Size: size.Val, Verbose: *verbose, MTU: mtu.Val, Counters: *counters, Pcap: *pcap}
		switch {
		case *server == *client:
			return usagef("give either -s (server) or -c (client)")
		case *addr == "":
			return usagef("missing -a ADDR")
		case cfg.Server && *source != "":
			return usagef("-I is for the client; the server listens on -a")
		case cfg.Count < 0:
			return usagef("-C %d: want a count of 0 (for ever) or more", cfg.Count)
		case cfg.Size < rping.MinSize || cfg.Size > rping.MaxSize:
			return usagef("-S %d: want %d to %d bytes", cfg.Size, rping.MinSize, rping.MaxSize)
		case *cmPort == 0 || *cmPort > 0xFFFF || *udpPort == 0 || *udpPort > 0xFFFF:
			return usagef("-p %d, --udp-port %d: want ports from 1 to 65535", *cmPort, *udpPort)
		}
		cfg.CMPort, cfg.UDPPort = uint16(*cmPort), uint16(*udpPort)
		if err := checkMTUFlag(cfg.MTU); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(inv.ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		var err error
		if cfg.Local, cfg.Peer, err = rpingAddresses(ctx, cfg.Server, *addr, *source, cfg.UDPPort); err != nil {
			return err
		}
		return rping.Run(ctx, &cfg, inv.stdout)
	}
}

// rpingAddresses returns the local address of the device and, for the
// client, the server's device (its UDP port defaults to --udp-port), from
// -a addr and -I source.
func rpingAddresses(ctx context.Context, server bool, addr, source string, udpPort uint16) (netip.Addr, netip.AddrPort, error) {
	if server {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return netip.Addr{}, netip.AddrPort{}, usagef("-a %q: the server listens on an IP address", addr)
		}
		return a.Unmap(), netip.AddrPort{}, nil
	}
	peer, err := netip.ParseAddrPort(addr)
	if err != nil {
		host := strings.Trim(addr, "[]")
		if peer, err = resolvePeer(ctx, net.JoinHostPort(host, strconv.Itoa(int(udpPort)))); err != nil {
			return netip.Addr{}, netip.AddrPort{}, usagef("-a: %v", err)
		}
	}
	peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	if source != "" {
		a, err := netip.ParseAddr(source)
		if err != nil {
			return netip.Addr{}, netip.AddrPort{}, usagef("-I %q: want an IP address", source)
		}
		return a.Unmap(), peer, nil
	}
	// The address the kernel routes from toward the server (a connected
	// UDP socket sends nothing).
	probe, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(peer))
	if err != nil {
		return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("no route to %v: %w", peer, err)
	}
	defer probe.Close()
	return probe.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), peer, nil
}
