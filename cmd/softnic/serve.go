package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"go.uber.org/zap/zapcore"
)

// softnic serve's command line; the daemon is package daemon's.

// defaultRegion is what serve hosts when no --region is given.
const defaultRegion = "mem:1m:rwa"

func defineServe(fs *flag.FlagSet) func(*invocation) error {
	listen := fs.String("listen", nic.DefaultAddr.String(), "the device's UDP `ADDR:PORT` (RoCEv2 uses port 4791; port 0 picks a free one)")
	cmPort := fs.Uint("cm-port", defaultCMPort, "the rdma_cm `PORT` connections are accepted on")
	var regions flagval.Regions
	fs.Var(&regions, "region", "host a NIC-owned memory region `NAME:SIZE[:ACCESS]`: SIZE such as 4096, 64k or 1MiB; "+
		"ACCESS a combination of r (read), w (write), a (atomic), default rw; repeat for more regions (default "+defaultRegion+")")
	pcap := fs.String("pcap", "", "capture every packet sent and received to `FILE` (flushed each second and on exit)")
	controlPath := fs.String("control", defaultControlPath(), "the control socket's `PATH`, where info, stat, mr and qp find the daemon")
	level := fs.String("log-level", "info", "log `LEVEL` on stderr: debug, info, warn or error")
	faults := fs.String("faults", "", "inject faults into the packets the daemon sends: `SPEC` such as drop=0.01,dup=0.01,seed=7 (see SOFTNIC_FAULTS)")
	busyPoll := fs.Duration("busy-poll", 0, "keep polling the socket and the attached programs' queues for `DURATION` after the last packet or post "+
		"(such as 50us) instead of sleeping: lower latency for a CPU while traffic flows; 0 sleeps at once")
	var limits flagval.Limits
	fs.Var(&limits, "limit", "set a limit on what attached processes hold, `SCOPE.RESOURCE=N`: SCOPE process, uid or total; "+
		"RESOURCE sessions, waits, objects, qps, cq_entries, srq_entries, memory, mappings, heap or descriptors; "+
		"N a number (k, m, g allowed) or unlimited; repeat for more (softnic stat shows each with its use)")
	mtu := addMTUFlag(fs, 0, "cap the path `MTU` of every connection: 256 to 4096 (default: what the interface toward each peer carries, "+
		"as rxe derives it: 1024 on 1500-byte Ethernet)")
	strict := fs.Bool("strict-icrc", false, "accept an IPv4 packet only if its ICRC verifies with identification 0 (softnic's) or with the one "+
		"a raw socket saw it carry (CAP_NET_RAW): no recovery of Linux rxe's identifications from the ICRC")
	halfOpen := fs.Int("cm-half-open", 0, "accept at most `N` connection requests at once whose handshake has not completed "+
		"(default 256); more are rejected, reason no resources")
	halfOpenPerSource := fs.Int("cm-half-open-per-source", 0, "the same, from one IPv4 address or IPv6 /64: at most `N` (default 32)")
	rejectRate := fs.Int("cm-reject-rate", 0, "answer at most `N` connection requests a second from one IPv4 address or IPv6 /64 "+
		"with a reject, after a burst of 32 (default 100); beyond, a request that would be rejected is dropped unanswered and counted")
	handshake := fs.Duration("cm-handshake-timeout", 0, "drop a connection request whose handshake has not completed within `DURATION` "+
		"(default 20s), whatever timeouts and retries the request asks for")
	accessRefusals := fs.Int("access-refusals", 0, "hold back a source (a peer's IP address, or an attached program's user) once it has failed `N` "+
		"R_Key checks in a row, as one guessing keys does (default 16)")
	accessRate := fs.Int("access-refusal-rate", 0, "then let a held-back source fail `N` R_Key checks a second (default 2)")
	accessSources := fs.Int("access-sources", 0, "remember the failed R_Key checks of `N` sources (default 256); a new one takes the place of the least suspect")
	doorbellBurst := fs.Int("doorbell-burst", 0, "throttle an attached program once its doorbell has woken the daemon `N` times for nothing (default 256)")
	doorbellRate := fs.Int("doorbell-rate", 0, "then heed `N` such wakeups a second (default 1000), and one more for each work request it posts")
	doorbellSpin := fs.Duration("doorbell-spin", 0, "once it has taken an attached program's work requests, stay awake for its next post, driving the "+
		"device, until `DURATION` after the program's last completion, twice that after the post at most (default 50us; negative: sleep at once)")
	attachBurst := fs.Int("attach-burst", 0, "let one user's programs attach `N` times at once (default 64)")
	attachRate := fs.Int("attach-rate", 0, "then `N` times a second (default 100): an attach beyond waits its turn")
	logRate := fs.Int("log-rate", 0, "log at most `N` lines a second of each kind of event (a connection, a SEND, a program attaching ...), "+
		"and count those left out (default 10)")
	sendRate := fs.Int("send-rate", 0, "take at most `N` SENDs a second from the peers (default 10000), 64 at once: beyond, the receive buffers "+
		"run out and the peers' SENDs are answered with RNR NAKs, on which a requester waits before it sends again")
	stopGrace := fs.Duration("stop-grace", 0, "on SIGTERM, wait at most `DURATION` for the peers to answer their disconnects (default 2s)")
	allowGroup := fs.String("allow-group", "", "let the members of `GROUP` (a name or a number) use the control socket, attach and inspect "+
		"their own processes, besides the daemon's user and root")
	web := webFlags(fs)
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		cfg := daemon.Config{Pcap: *pcap, Control: *controlPath, Regions: regions, FaultSpec: *faults, BusyPoll: *busyPoll, AllowGroup: -1, Limits: limits,
			Version: buildVersion()}
		if *allowGroup != "" {
			gid, err := lookupGroup(*allowGroup)
			if err != nil {
				return usagef("--allow-group: %v", err)
			}
			cfg.AllowGroup = gid
		}
		cfg.CM = nic.CMLimits{HalfOpen: *halfOpen, HalfOpenPerSource: *halfOpenPerSource, Handshake: *handshake, RejectRate: *rejectRate}
		if err := checkMTUFlag(mtu.Val); err != nil {
			return err
		}
		cfg.MTU, cfg.StrictICRC = mtu.Val, *strict
		if *halfOpen < 0 || *halfOpenPerSource < 0 || *handshake < 0 || *rejectRate < 0 {
			return usagef("--cm-half-open %d, --cm-half-open-per-source %d, --cm-handshake-timeout %v, --cm-reject-rate %d: want 0 (the default) or more",
				*halfOpen, *halfOpenPerSource, *handshake, *rejectRate)
		}
		cfg.Access = nic.AccessLimits{Refusals: *accessRefusals, Rate: float64(*accessRate), Sources: *accessSources}
		if err := cfg.Access.Check(); err != nil || *accessRate < 0 {
			return usagef("--access-refusals %d, --access-refusal-rate %d, --access-sources %d: want 0 (the default) or more, and at most %d sources",
				*accessRefusals, *accessRate, *accessSources, 1<<20)
		}
		cfg.Doorbell = attachd.DoorbellLimits{Burst: *doorbellBurst, Rate: *doorbellRate, Spin: *doorbellSpin}
		if *doorbellSpin > time.Second {
			return usagef("--doorbell-spin %v: want at most 1s, such as 50us", *doorbellSpin)
		}
		cfg.Attaches = attachd.AttachPace{Burst: *attachBurst, Rate: *attachRate}
		cfg.LogRate, cfg.SendRate, cfg.StopGrace = *logRate, *sendRate, *stopGrace
		if *doorbellBurst < 0 || *doorbellRate < 0 || *attachBurst < 0 || *attachRate < 0 || *logRate < 0 || *sendRate < 0 || *stopGrace < 0 {
			return usagef("--doorbell-burst %d, --doorbell-rate %d, --attach-burst %d, --attach-rate %d, --log-rate %d, --send-rate %d, --stop-grace %v: want 0 (the default) or more",
				*doorbellBurst, *doorbellRate, *attachBurst, *attachRate, *logRate, *sendRate, *stopGrace)
		}
		if cfg.BusyPoll < 0 || cfg.BusyPoll > time.Second {
			return usagef("--busy-poll %v: want a duration from 0 to 1s, such as 50us", cfg.BusyPoll)
		}
		var err error
		if cfg.Listen, err = netip.ParseAddrPort(*listen); err != nil {
			return usagef("--listen %q: want an IP address and a UDP port, such as 127.0.0.1:4791", *listen)
		}
		if *cmPort == 0 || *cmPort > 0xFFFF {
			return usagef("--cm-port %d: want a port from 1 to 65535", *cmPort)
		}
		cfg.CMPort = uint16(*cmPort)
		if cfg.LogLevel, err = zapcore.ParseLevel(*level); err != nil {
			return usagef("--log-level %q: want debug, info, warn or error", *level)
		}
		if *faults != "" {
			f, err := netem.ParseFaults(*faults)
			if err != nil {
				return usagef("--faults: %v", err)
			}
			cfg.Faults = &f
		}
		if cfg.Control == "" {
			return usagef("--control: want a path")
		}
		if cfg.Web, err = web(); err != nil {
			return err
		}
		if len(cfg.Regions) == 0 {
			r, _ := flagval.ParseRegion(defaultRegion)
			cfg.Regions = []flagval.Region{r}
		}
		ctx, stop := signal.NotifyContext(inv.ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		go func() {
			// The first signal stops the daemon; from then on a second one
			// ends the process at once, as it would without a handler.
			<-ctx.Done()
			stop()
		}()
		return daemon.Run(ctx, &cfg, inv.stdout, inv.stderr)
	}
}

// lookupGroup returns the number of the group named name, or numbered so.
func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if g, err = user.LookupGroupId(name); err != nil {
			return 0, fmt.Errorf("no group %q", name)
		}
	}
	return strconv.Atoi(g.Gid)
}
