package nic

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/nic/internal/guard"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// DefaultAddr is where a Device listens when Config.Addr is not set: the
// RoCEv2 port on loopback, which needs no root and reaches no other host.
var DefaultAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), wire.UDPPort)

// EnvFaults names the environment variable read for a fault specification
// (see netem.ParseFaults) when Config.Faults is nil.
const EnvFaults = "SOFTNIC_FAULTS"

// EnvSocket names the environment variable with the control socket of a
// softnic daemon to attach to when a Config names neither Attach nor Embed
// (see Config.Attach).
const EnvSocket = "SOFTNIC_SOCKET"

// DefaultSocket is where softnic serve puts its control socket unless told
// otherwise, and where libsoftnic looks for it without SOFTNIC_SOCKET:
// $XDG_RUNTIME_DIR/softnic.sock, or softnic.sock in PrivateSocketDir.
func DefaultSocket() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "softnic.sock")
	}
	return filepath.Join(PrivateSocketDir(), "softnic.sock")
}

// PrivateSocketDir is /tmp/softnic-UID, the directory of the user's own
// that holds the default control socket without a runtime directory: in
// the shared temporary directory anyone could have put a socket at the
// path first.
func PrivateSocketDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("softnic-%d", os.Getuid()))
}

// Config configures a Device. The zero value is a working device on
// 127.0.0.1:4791, or, with SOFTNIC_SOCKET set, the device of that daemon.
type Config struct {
	// Attach is the control socket of a softnic daemon (softnic serve
	// --control) to attach to instead of running a NIC in this process.
	// An attached device is the daemon's device shared with other
	// processes: its API is the same, its resources (PDs, regions, CQs,
	// QPs, connections) are the process's own, in the daemon, and are
	// destroyed when the process closes the device or exits. Its queues
	// are rings in memory both processes map, and its regions must live
	// in such memory too: PD.AllocMR allocates it, and PD.RegMR takes
	// parts of it (other memory is refused with ErrFault).
	//
	// Which mode: Attach set attaches; otherwise Embed set embeds;
	// otherwise SOFTNIC_SOCKET, if set, names the socket to attach to;
	// otherwise the NIC is embedded. An attached device uses the daemon's
	// address, MTU, socket, faults and capture: with Attach set, setting
	// Addr, MTU, Faults, SendHook, Trace, UDP, MaxQPs, RecoverIPID, CM,
	// Access or BusyPoll is an error (ErrInvalid); when SOFTNIC_SOCKET
	// decides, they are ignored, so that a program written for an
	// embedded NIC runs attached unchanged.
	//
	// Attach mode needs Linux (its memfds, eventfds and SO_PEERCRED):
	// elsewhere, and in builds with the softnic_portable tag, Open
	// returns the error of AttachSupported, which wraps ErrNotSupported.
	// A daemon of another softnic release, whose attach protocol differs
	// from this library's, fails Open with ErrProtoNotSupported.
	Attach string
	// Embed runs the NIC in this process whatever SOFTNIC_SOCKET says, as
	// the daemon itself does.
	Embed bool
	// Addr is the local IP address and UDP port. A port of 0 picks a free
	// one (see Device.Addr); an unspecified address (0.0.0.0, ::) listens
	// on every interface.
	Addr netip.AddrPort
	// MTU caps the path MTU of the device's QPs: 256, 512, 1024, 2048 or
	// 4096 (the default). Below the cap the path MTU toward a peer is what
	// the network interface it is reached through carries, as rxe derives
	// it (1024 on 1500-byte Ethernet; see PathMTU).
	MTU int
	// Logger receives control-path events (a device opened or closed, a
	// connection made or failed, an attached process's failures), never
	// one per packet; nil logs nothing.
	Logger *slog.Logger
	// Faults injects packet faults into everything the device sends, for
	// testing error handling. nil reads SOFTNIC_FAULTS from the environment.
	Faults *netem.Faults
	// SendHook, if set, is asked about every packet the device sends (the
	// sealed RoCEv2 packet, BTH to ICRC; it must not keep or modify it) and
	// may drop or duplicate it: tests use it to lose or repeat one chosen
	// packet, such as the first ConnectReply. It is called from several
	// goroutines at once and counts as fault injection (fault_dropped,
	// fault_duplicated).
	SendHook func(pkt []byte) SendAction
	// Trace, if set, is called with every packet sent and received, on the
	// data path: keep it quick. The demo prints from it; PcapTrace writes
	// a capture.
	Trace func(*TracePacket)
	// UDP tunes the socket (buffer sizes, GSO/GRO).
	UDP udp.Options
	// MaxQPs bounds the QPs the device holds at once (default 16384).
	MaxQPs int
	// RecoverIPID accepts IPv4 packets whose ICRC verifies only under an IP
	// identification other than 0, which the socket does not show: Linux
	// rxe numbers its datagrams, and its ICRC covers the number.
	// RecoverIPID finds the identification the ICRC points at
	// (wire.Envelope.RecoverIPID, counted as icrc_ipid_recovered), which
	// spends 16 of the ICRC's 32 bits of protection on it. With
	// UDP.IPIDs too, where the process may open a raw socket (CAP_NET_RAW),
	// the device sees the identification a packet carries and checks the
	// ICRC with it exactly (counted as icrc_ipid_verified), recovering it
	// only for a packet the raw socket did not see (UDP.IPIDs alone checks
	// exactly and recovers nothing). It is off by default: softnic peers
	// send identification 0 and keep all 32 bits.
	RecoverIPID bool
	// CM bounds what the connection manager holds for the connection
	// requests it receives (see CMLimits).
	CM CMLimits
	// Access bounds how fast a peer may fail R_Key checks, as one guessing
	// keys does, before the device holds it back (see AccessLimits).
	Access AccessLimits
	// BusyPoll keeps the device's receive loop polling, for this long after
	// the last packet or work request, instead of sleeping until the next
	// one: the socket and, in a daemon, the queues of the attached
	// processes, so that neither a packet nor a post waits for a thread to
	// wake (as Linux's net.core.busy_poll does for sockets). It costs a CPU
	// while traffic flows and nothing once it stops. 0, the default, sleeps
	// at once; an attached process posts with a doorbell then.
	BusyPoll time.Duration
	// WaitSpin is how long CQ.Wait (and WaitReady) busy-polls before it
	// sleeps: on an embedded device it processes packets on the calling
	// goroutine as Poll does, on an attached one it watches the CQ's ring,
	// giving up the CPU between looks (sched_yield) to the daemon that
	// writes it. A completion that comes meanwhile is found without a
	// thread woken, a round trip after its post (one 8-byte WRITE in
	// 15 µs against 40 µs asleep, embedded, between two processes on
	// loopback). It costs a CPU for that long per wait that finds its CQ
	// empty; when two spins in a row find nothing, waits sleep at once
	// for a while (see package nic/internal/spin), so that a slow peer or
	// a loaded machine costs a spin per 256 waits at most. 0 takes
	// DefaultWaitSpin, a negative value never spins, more than a second
	// is an error (ErrInvalid); an embedded device that busy-polls
	// (BusyPoll) does not spin in Wait. Unless it is negative, an attached
	// device's calls that the daemon answers at once (allocating a PD,
	// registering a region, creating, modifying or destroying a CQ or QP)
	// also watch for the answer, for up to 200 µs, before they sleep: a
	// verb of a program's set-up then takes one round trip to the daemon
	// (35–50 µs on loopback), where woken it took twice as long; the same
	// policy stops those spins while answers come late.
	WaitSpin time.Duration
	// OnQPError, if set, is called each time one of the device's QPs
	// enters the error state by itself: an error completion moved it
	// there (a retry count exceeded, a remote access error, a bad work
	// request), not Modify, Destroy or a CQ overflow. It is what
	// ibv_get_async_event reports as IBV_EVENT_QP_FATAL. It is called
	// from a goroutine of the device, one call at a time, in order, after
	// the QP's error completions are on its CQs; calls made while it has
	// not returned wait (up to a thousand, then they are dropped). Close
	// waits for the call under way.
	OnQPError func(q *QP, cause verbs.WCStatus)
	// OnSRQLimit, if set, is called each time one of the device's SRQs
	// reaches the limit SRQ.Modify armed: a message took the SRQ's work
	// requests below it, which disarmed it. It is what
	// ibv_get_async_event reports as IBV_EVENT_SRQ_LIMIT_REACHED. It is
	// called as OnQPError is, from the same goroutine, in order with it.
	OnSRQLimit func(s *SRQ)
}

// DefaultWaitSpin is Config.WaitSpin's default: a few round trips between
// two processes on loopback.
const DefaultWaitSpin = embedded.DefaultWaitSpin

// AccessLimits bound how fast one source may fail R_Key checks (guess
// keys); see Config.Access. Zero fields take the defaults noted.
type AccessLimits struct {
	// Refusals is how many R_Key checks a source may fail in a row before
	// it is held back (default 16).
	Refusals int
	// Rate is how many refusals a second a held source earns back
	// (default 2): the pace of a guesser's tries once held.
	Rate float64
	// Sources is how many sources the device remembers (default 256,
	// rounded up to a multiple of 4); a new one takes the place of the
	// least suspect.
	Sources int
}

// Defaults of AccessLimits.
const (
	DefaultAccessRefusals = 16
	DefaultAccessRate     = 2
	DefaultAccessSources  = 256
)

// WithDefaults returns l with its zero fields set to their defaults, and
// Sources rounded up to a multiple of 4.
func (l AccessLimits) WithDefaults() AccessLimits {
	l.Refusals = cmp.Or(l.Refusals, DefaultAccessRefusals)
	l.Rate = cmp.Or(l.Rate, DefaultAccessRate)
	l.Sources = (cmp.Or(l.Sources, DefaultAccessSources) + guard.Ways - 1) / guard.Ways * guard.Ways
	return l
}

// Check returns an error wrapping ErrInvalid if a limit is negative or
// past what the device keeps (a million sources).
func (l AccessLimits) Check() error {
	if l.Refusals < 0 || l.Rate < 0 || l.Sources < 0 || l.Sources > 1<<20 {
		return fmt.Errorf("access limits %+v: negative, or more than %d sources: %w", l, 1<<20, ErrInvalid)
	}
	return nil
}

// Device is a softnic NIC: one run in this process (embedded) or a
// daemon's shared with other processes (attached, see Config.Attach),
// with the same methods. Its methods are safe for concurrent use.
type Device struct {
	prov       provider.Device // the embedded device, or the attachment to a daemon's
	log        *slog.Logger
	events     *hooks.Queue[asyncEvent] // for Config.OnQPError and OnSRQLimit; nil without them
	onQPError  func(*QP, verbs.WCStatus)
	onSRQLimit func(*SRQ)
	wg         sync.WaitGroup // the goroutine that calls them
}

// Open creates a device and starts its goroutines, or attaches to a
// daemon's device (see Config.Attach).
func Open(cfg Config) (*Device, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	path, err := cfg.attachPath()
	switch {
	case err != nil:
		return nil, err
	case cfg.WaitSpin > time.Second:
		return nil, fmt.Errorf("softnic: WaitSpin %v is past 1s: %w", cfg.WaitSpin, ErrInvalid)
	case path != "":
		return attach(cfg, path)
	}
	return openEmbedded(cfg)
}

// Addr returns the address and port the device listens on.
func (d *Device) Addr() netip.AddrPort { return d.prov.Addr() }

// Done is closed when the device closes or, for an attached device, when
// its session with the daemon ends (the daemon stopped): its verbs fail
// from then on, and Poll finds only the completions it already holds.
func (d *Device) Done() <-chan struct{} { return d.prov.Done() }

// MTU returns the device's largest path MTU.
func (d *Device) MTU() int { return d.prov.MTU() }

// MaxQPs returns how many QPs the device holds at once (Config.MaxQPs);
// 0 for an attached device, whose QPs are its daemon's.
func (d *Device) MaxQPs() int {
	if o, ok := d.prov.(nicOwner); ok {
		return o.MaxQPs()
	}
	return 0
}

// Memory returns the device's memory region table; nil for an attached
// device, whose regions are in the daemon's table.
func (d *Device) Memory() *mr.Table {
	if o, ok := d.prov.(nicOwner); ok {
		return o.Memory()
	}
	return nil
}

// Features reports the socket offloads in use.
func (d *Device) Features() udp.Features { return d.prov.Features() }

// Close stops the device: its connections are disconnected (one DREQ
// each, not waited for) and pending connection requests rejected, every QP
// is moved to the error state (its WRs complete with WR_FLUSH_ERR) and
// destroyed, the socket is closed and the goroutines exit before Close
// returns. The completions not polled yet, the flushed ones included, can
// still be polled. An attached device detaches instead: the daemon does the
// same for everything the process made, and Close returns once it has
// (waiting no more than 5 s for a daemon that does not answer), keeping the
// completions in the process; once they are polled, an attached CQ's Poll
// returns ErrClosed where an embedded one's finds nothing.
func (d *Device) Close() error {
	err := d.prov.Close()
	d.wg.Wait()
	return err
}

// QPs returns every QP of an embedded device, QP1 (the connection
// manager's) included, in QP number order; nil for an attached device.
func (d *Device) QPs() []*QP {
	o, ok := d.prov.(nicOwner)
	if !ok {
		return nil
	}
	var qps []*QP
	for _, q := range o.QPs() {
		qps = append(qps, q.Owner().(*QP))
	}
	return qps
}

// openEmbedded creates an embedded device and starts its goroutines.
func openEmbedded(cfg Config) (*Device, error) {
	if !cfg.Addr.IsValid() {
		cfg.Addr = DefaultAddr
	}
	if err := cfg.Access.Check(); err != nil {
		return nil, fmt.Errorf("softnic: %w", err)
	}
	access := cfg.Access.WithDefaults()
	if cfg.Faults == nil {
		if spec := os.Getenv(EnvFaults); spec != "" {
			f, err := netem.ParseFaults(spec)
			if err != nil {
				return nil, fmt.Errorf("softnic: %s: %w", EnvFaults, err)
			}
			cfg.Faults = &f
		}
	}
	d := &Device{log: cfg.Logger}
	d.reportEvents(&cfg)
	p, err := embedded.Open(embedded.Config{
		Addr: cfg.Addr, MTU: cfg.MTU, Logger: cfg.Logger, Faults: cfg.Faults, SendHook: cfg.SendHook,
		Trace: cfg.Trace, UDP: cfg.UDP, MaxQPs: cfg.MaxQPs, RecoverIPID: cfg.RecoverIPID, CM: cfg.CM,
		Access:   guard.Config{Refusals: access.Refusals, Rate: access.Rate, Sources: access.Sources},
		BusyPoll: cfg.BusyPoll, WaitSpin: cfg.WaitSpin,
	}, upcalls{d})
	if err != nil {
		return nil, err
	}
	d.prov = p
	d.startEvents()
	return d, nil
}

// reportEvents has the device queue its QPs' errors and its SRQs' limits
// for cfg.OnQPError and cfg.OnSRQLimit, those set, once startEvents runs.
func (d *Device) reportEvents(cfg *Config) {
	if cfg.OnQPError == nil && cfg.OnSRQLimit == nil {
		return
	}
	d.events = hooks.NewQueue[asyncEvent]()
	d.onQPError, d.onSRQLimit = cfg.OnQPError, cfg.OnSRQLimit
}

// startEvents starts the goroutine that calls Config.OnQPError and
// OnSRQLimit with the events queued, until the device is done; Close
// waits for it.
func (d *Device) startEvents() {
	if d.events == nil {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.events.Run(d.Done(), d.tell)
	}()
}

// SetFaults replaces the injector that decides the fate of the packets
// the device sends (Config.Faults at first); nil sends every packet as it
// is. The packets it holds back meanwhile are still released. An attached
// device's packets are sent by its daemon, whose device takes the faults:
// SetFaults returns ErrNotSupported there.
func (d *Device) SetFaults(in FaultInjector) error {
	if o, ok := d.prov.(nicOwner); ok {
		o.SetFaults(in)
		return nil
	}
	return fmt.Errorf("softnic: %w", unsupported("the faults"))
}
