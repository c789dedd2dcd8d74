package main

import (
	"encoding/json"
	"errors"
	"flag"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/bench"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
)

// softnic bench's command line and its peer process; the measuring is
// package bench's.

func defineBench(fs *flag.FlagSet) func(*invocation) error {
	secs := fs.Duration("time", time.Second, "measure each workload for `D`")
	ops := fs.Int("ops", 0, "and for at most `N` operations (0: no limit; the attached comparison's rounds take 20000 by default)")
	runs := fs.Int("runs", 1, "measure each workload `R` times and report the median, as fi_rmabw -r does")
	one := fs.Bool("one-process", false, "put the peer device in this process instead of a process of its own")
	peerWaits := fs.Bool("peer-waits", false, "let the peer process sleep until packets come instead of polling, as fi_rmabw's target does")
	only := fs.String("only", "", "measure only the workloads named, `KEYS` separated by commas (the keys of --json, raw_udp_gbps, raw_udp_gso_gbps, raw_udp_ping_pong and raw_udp_ping_pong_poll included)")
	attach := fs.String("attach", "", "also measure a device attached to the daemon whose control socket is `PATH` against an embedded one")
	asJSON := fs.Bool("json", false, "print the results as one line of JSON")
	profile := fs.String("cpuprofile", "", "write this process's CPU profile to `FILE`, and the peer process's to FILE.peer")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		cfg := bench.Config{Limit: nicbench.Limit{Ops: *ops, Time: *secs}, Runs: *runs, OneProcess: *one, PeerWaits: *peerWaits, Attach: *attach,
			PeerCommand: benchPeerCommand}
		switch {
		case *secs <= 0 && *ops <= 0:
			return usagef("--time %v and --ops %d: want a limit", *secs, *ops)
		case *ops < 0:
			return usagef("--ops %d: want 0 or more", *ops)
		case *runs < 1 || *runs > 100:
			return usagef("--runs %d: want 1 to 100", *runs)
		case *one && *peerWaits:
			return usagef("--peer-waits: the peer device in this process (--one-process) always leaves its packets to its goroutines")
		}
		if *profile != "" && !*one {
			cfg.PeerCPUProfile = *profile + ".peer"
		}
		if *only != "" {
			for key := range strings.SplitSeq(*only, ",") {
				if _, ok := nicbench.Lookup(key); !ok && !slices.Contains(bench.RawKeys, key) {
					return usagef("--only: no workload %q; the workloads are %s", key, strings.Join(bench.Keys(), ", "))
				}
				cfg.Only = append(cfg.Only, key)
			}
		}
		stop, err := startCPUProfile(*profile)
		if err != nil {
			return err
		}
		res, err := bench.Run(inv.ctx, cfg, inv.stderr)
		if err := errors.Join(err, stop()); err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(inv.stdout).Encode(res.JSON())
		}
		bench.Print(inv.stdout, res)
		return nil
	}
}

// benchPeerCommand is the hidden command softnic bench runs its peer
// device with: this binary again.
const benchPeerCommand = "bench-peer"

func defineBenchPeer(fs *flag.FlagSet) func(*invocation) error {
	wait := fs.Bool("wait", false, "leave the device to its goroutines instead of polling its CQ")
	profile := fs.String("cpuprofile", "", "write the process's CPU profile to `FILE`")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		by := nicbench.Poll
		if *wait {
			by = nicbench.Wait
		}
		stop, err := startCPUProfile(*profile)
		if err != nil {
			return err
		}
		err = nicbench.ServePeer(os.Stdin, inv.stdout, nic.Config{Addr: netip.AddrPortFrom(nic.DefaultAddr.Addr(), 0)}, by)
		return errors.Join(err, stop())
	}
}

// startCPUProfile profiles the process's CPU into the file at path, if
// any, until the function it returns is called.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
