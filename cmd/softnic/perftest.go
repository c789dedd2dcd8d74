package main

import (
	"flag"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/cmd/softnic/internal/perftest"
	"github.com/softnic/softnic/wire"
)

// softnic perftest's command line; the test itself is package perftest's.

func definePerftest(fs *flag.FlagSet) func(*invocation) error {
	bind := fs.String("bind", "", "the local IP `ADDR` for TCP and RoCEv2 (default: the server's any address, the client's route to the server)")
	size := fs.String("s", "", "message `SIZE` in bytes, such as 4096, 64k or 1MiB (default 65536 for the bandwidth tests, 2 for write_lat; atomics are 8)")
	iters := fs.Int("n", 0, "`ITERS` messages (default 5000 for the bandwidth tests, 1000 for write_lat)")
	atomic := fs.String("A", "FETCH_AND_ADD", "the atomic_bw `OPERATION`: FETCH_AND_ADD or CMP_AND_SWAP")
	timeout := fs.Uint("u", perftest.DefaultQPTimeout, "the QP's ACK `TIMEOUT` exponent: 4.096 µs × 2^TIMEOUT before it sends again (14: 67 ms)")
	tclass := fs.Uint("tclass", 0, "the IP traffic `CLASS` of the QP's packets, DSCP and ECN, 0 to 255 (perftest's --tclass)")
	mtu := addMTUFlag(fs, 0, "the path `MTU` offered: 256 to 4096 (default: what the interface carries, as rxe derives it: 1024 on 1500-byte Ethernet)")
	port := fs.Uint("port", uint(wire.UDPPort), "the RoCEv2 UDP `PORT` of the device, and where the peer's is (Linux rxe's is 4791)")
	oobPort := fs.Uint("oob-port", perftest.DefaultOOBPort, "perftest's TCP `PORT` for the out-of-band exchange")
	cqMod := fs.Int("Q", 0, "a bandwidth test's client asks for a completion every `N` messages (default, as perftest: 100, 1 for messages over 8 KiB)")
	poll := fs.Bool("poll", false, "a bandwidth test's client polls its CQ in a loop, as perftest's does, instead of sleeping until a completion comes")
	counters := fs.Bool("counters", false, "print the device's counters after the test")
	pcap := fs.String("pcap", "", "capture every packet sent and received to `FILE`")
	return func(inv *invocation) error {
		if err := inv.parse(1, 2); err != nil {
			return err
		}
		cfg := perftest.Config{MTU: mtu.Val, Counters: *counters, Pcap: *pcap, Iters: *iters, CQMod: *cqMod, Poll: *poll}
		var ok bool
		if cfg.Test, ok = perftest.ParseTest(inv.args[0]); !ok {
			return usagef("unknown test %q: want write_bw, read_bw, send_bw, atomic_bw or write_lat", inv.args[0])
		}
		if len(inv.args) == 2 {
			cfg.Host = inv.args[1]
		}
		if *bind != "" {
			a, err := netip.ParseAddr(*bind)
			if err != nil {
				return usagef("--bind %q: want an IP address", *bind)
			}
			cfg.Bind = a.Unmap()
		}
		switch *atomic {
		case "FETCH_AND_ADD":
			cfg.Atomic = perftest.FetchAndAdd
		case "CMP_AND_SWAP":
			cfg.Atomic = perftest.CmpAndSwap
		default:
			return usagef("-A %q: want FETCH_AND_ADD or CMP_AND_SWAP", *atomic)
		}
		if *timeout > 31 {
			return usagef("-u %d: want a timeout exponent from 0 to 31", *timeout)
		}
		cfg.Timeout = uint8(*timeout)
		if *tclass > 255 {
			return usagef("--tclass %d: want a traffic class from 0 to 255", *tclass)
		}
		cfg.TrafficClass = uint8(*tclass)
		if *cqMod < 0 {
			return usagef("-Q %d: want a positive number of messages per completion", *cqMod)
		}
		if *port == 0 || *port > 0xFFFF || *oobPort == 0 || *oobPort > 0xFFFF {
			return usagef("--port %d, --oob-port %d: want ports from 1 to 65535", *port, *oobPort)
		}
		cfg.Port, cfg.OOBPort = uint16(*port), uint16(*oobPort)
		if err := checkMTUFlag(cfg.MTU); err != nil {
			return err
		}
		if err := setPerftestSizes(&cfg, *size); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(inv.ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return perftest.Run(ctx, &cfg, inv.stdout)
	}
}

// setSizes fills in the message size and iteration count, with perftest's
// defaults for the test.
func setPerftestSizes(c *perftest.Config, size string) error {
	switch {
	case c.Test == perftest.AtomicBW:
		if size != "" && size != "8" {
			return usagef("-s %s: atomic_bw moves 8 bytes per operation", size)
		}
		c.Size = perftest.AtomicSize
	case size == "":
		c.Size = perftest.DefaultBWSize
		if c.Test == perftest.WriteLat {
			c.Size = perftest.DefaultLatSize
		}
	default:
		n, err := flagval.ParseSize(size)
		if err != nil {
			return usagef("-s: %v", err)
		}
		c.Size = n
	}
	if c.Size > perftest.MaxSize {
		return usagef("-s %d: at most %s", c.Size, flagval.FormatSize(perftest.MaxSize))
	}
	if c.Iters == 0 {
		c.Iters = perftest.DefaultBWIters
		if c.Test == perftest.WriteLat {
			c.Iters = perftest.DefaultLatIters
		}
	}
	if c.Iters < 1 || c.Iters > perftest.MaxIters || c.Test == perftest.WriteLat && c.Iters < 2 {
		return usagef("-n %d: want 1 to %d iterations (write_lat: at least 2)", c.Iters, perftest.MaxIters)
	}
	return nil
}
