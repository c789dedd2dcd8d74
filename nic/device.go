package nic

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic/internal/guard"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/route"
	"github.com/softnic/softnic/nic/internal/timers"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
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
}

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
	prov      provider.Device // the embedded device, or the attachment to a daemon's
	log       *slog.Logger
	qpErrors  *hooks.Queue[qpError] // for Config.OnQPError; nil without it
	onQPError func(*QP, verbs.WCStatus)
	wg        sync.WaitGroup // the goroutine that calls Config.OnQPError
}

// Open creates a device and starts its goroutines, or attaches to a
// daemon's device (see Config.Attach).
func Open(cfg Config) (*Device, error) {
	path, err := cfg.attachPath()
	switch {
	case err != nil:
		return nil, err
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
		return o.maxQPs()
	}
	return 0
}

// Memory returns the device's memory region table; nil for an attached
// device, whose regions are in the daemon's table.
func (d *Device) Memory() *mr.Table {
	if o, ok := d.prov.(nicOwner); ok {
		return o.memory()
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
	if o, ok := d.prov.(nicOwner); ok {
		return o.allQPs()
	}
	return nil
}

// embeddedDevice is the embedded provider: the NIC run in this process.
type embeddedDevice struct {
	pub   *Device
	cfg   Config
	log   *slog.Logger
	conn  *udp.Conn
	local netip.AddrPort
	mem   *mr.Table
	epoch time.Time

	qpc   verbs.Counters
	devc  devCounters
	guard guard.Guard // holds back sources that fail too many R_Key checks

	qpMu    sync.Mutex // QP number allocation
	qps     []atomic.Pointer[embeddedQP]
	nextQPN uint32

	// routes holds, per peer address, our source address toward it and the
	// path MTU; bounded.
	routes route.Table

	faults faultState // the fault injector of Config.Faults or SetFaults

	timers  timers.Queue[wakeup]
	batches sync.Pool
	prog    progress

	cm *cmDriver // the connection manager and its QP1

	// poller, in a daemon that busy-polls, serves the attached processes
	// whose queues its reader polls too.
	poller atomic.Pointer[busyPollHook]

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
	wg        sync.WaitGroup
}

// openEmbedded creates an embedded device and starts its goroutines.
func openEmbedded(cfg Config) (*Device, error) {
	if !cfg.Addr.IsValid() {
		cfg.Addr = DefaultAddr
	}
	if cfg.MTU == 0 {
		cfg.MTU = 4096
	}
	if cfg.MTU != 256 && cfg.MTU != 512 && cfg.MTU != 1024 && cfg.MTU != 2048 && cfg.MTU != 4096 {
		return nil, fmt.Errorf("softnic: MTU %d is not 256, 512, 1024, 2048 or 4096: %w", cfg.MTU, ErrInvalid)
	}
	if cfg.MaxQPs == 0 {
		cfg.MaxQPs = 1 << 14
	}
	if cfg.MaxQPs < 2 || cfg.MaxQPs > 1<<20 {
		return nil, fmt.Errorf("softnic: MaxQPs %d: %w", cfg.MaxQPs, ErrInvalid)
	}
	if err := cfg.CM.Check(); err != nil {
		return nil, fmt.Errorf("softnic: %w", err)
	}
	cfg.CM = cfg.CM.WithDefaults()
	if err := cfg.Access.Check(); err != nil {
		return nil, fmt.Errorf("softnic: %w", err)
	}
	cfg.Access = cfg.Access.WithDefaults()
	if cfg.BusyPoll < 0 || cfg.BusyPoll > time.Second {
		return nil, fmt.Errorf("softnic: BusyPoll %v is not within 0 and 1s: %w", cfg.BusyPoll, ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Faults == nil {
		if spec := os.Getenv(EnvFaults); spec != "" {
			f, err := netem.ParseFaults(spec)
			if err != nil {
				return nil, fmt.Errorf("softnic: %s: %w", EnvFaults, err)
			}
			cfg.Faults = &f
		}
	}
	conn, err := udp.Listen(cfg.Addr, cfg.UDP)
	if err != nil {
		return nil, fmt.Errorf("softnic: listen on %v: %w", cfg.Addr, err)
	}
	d := &embeddedDevice{
		cfg:     cfg,
		log:     cfg.Logger,
		conn:    conn,
		local:   conn.LocalAddr(),
		mem:     mr.NewTable(mr.Config{Logger: cfg.Logger}),
		epoch:   time.Now(),
		qps:     make([]atomic.Pointer[embeddedQP], cfg.MaxQPs),
		nextQPN: firstQPN,
		closing: make(chan struct{}),
	}
	d.pub = &Device{prov: d, log: cfg.Logger}
	d.pub.reportQPErrors(cfg.OnQPError)
	if cfg.Faults != nil && cfg.Faults.Enabled() {
		d.faults.set(netem.NewInjector(*cfg.Faults))
	}
	d.batches.New = func() any { return newBatch() }
	d.timers.Init()
	d.routes.Init(d.local.Addr(), cfg.MTU)
	d.guard.Init(guard.Config{
		Refusals: cfg.Access.Refusals, Rate: cfg.Access.Rate, Sources: cfg.Access.Sources,
		Now: d.now, Source: d.guardSource, OnHold: func() { d.devc.inc(AccessHolds) },
	})
	d.prog.init(conn.Features().GRO)
	if d.cm, err = newCM(d); err != nil {
		conn.Close()
		d.mem.Close()
		return nil, fmt.Errorf("softnic: QP1: %w", err)
	}
	d.log.Info("softnic device open", slog.Any("addr", d.local), slog.Int("mtu", cfg.MTU),
		slog.Any("udp", conn.Features()), slog.Bool("faults", d.faults.on.Load()))
	d.wg.Add(2)
	go d.readLoop()
	go d.timerLoop()
	d.pub.startQPErrors()
	return d.pub, nil
}

// reportQPErrors has the device queue its QPs' errors for onQPError
// (Config.OnQPError), if set, once startQPErrors runs.
func (d *Device) reportQPErrors(onQPError func(*QP, verbs.WCStatus)) {
	if onQPError == nil {
		return
	}
	d.qpErrors = hooks.NewQueue[qpError]()
	d.onQPError = onQPError
}

// startQPErrors starts the goroutine that calls Config.OnQPError with the
// errors queued, until the device is done; Close waits for it.
func (d *Device) startQPErrors() {
	if d.qpErrors == nil {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.qpErrors.Run(d.Done(), func(e qpError) { d.onQPError(e.q, e.cause) })
	}()
}

// firstQPN is the first QP number handed out: 0 and 1 are the IBTA's SMI
// and GSI QPs, and rxe starts its own at 0x11.
const firstQPN = 0x11

func (d *embeddedDevice) Addr() netip.AddrPort   { return d.local }
func (d *embeddedDevice) Done() <-chan struct{}  { return d.closing }
func (d *embeddedDevice) MTU() int               { return d.cfg.MTU }
func (d *embeddedDevice) maxQPs() int            { return len(d.qps) }
func (d *embeddedDevice) memory() *mr.Table      { return d.mem }
func (d *embeddedDevice) Features() udp.Features { return d.conn.Features() }

// now is the device clock the QPs' timers run on.
func (d *embeddedDevice) now() qp.Time { return qp.Time(time.Since(d.epoch)) }

func (d *embeddedDevice) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.cm.shutdown()
		close(d.closing)
		for i := range d.qps {
			if q := d.qps[i].Load(); q != nil {
				q.Destroy()
			}
		}
		err = d.conn.Close()
		d.wg.Wait()
		if cerr := d.mem.Close(); err == nil {
			err = cerr
		}
		d.log.Info("softnic device closed", slog.Any("addr", d.local))
	})
	return err
}

func (d *embeddedDevice) closed() bool {
	select {
	case <-d.closing:
		return true
	default:
		return false
	}
}

// lookup returns the QP numbered qpn, or nil.
func (d *embeddedDevice) lookup(qpn uint32) *embeddedQP {
	q := d.qps[qpn%uint32(len(d.qps))].Load()
	if q == nil || q.num != qpn {
		return nil
	}
	return q
}

// allQPs returns every QP, QP1 included, in QP number order.
func (d *embeddedDevice) allQPs() []*QP {
	var qps []*QP
	for i := range d.qps {
		if q := d.qps[i].Load(); q != nil {
			qps = append(qps, q.pub)
		}
	}
	slices.SortFunc(qps, func(a, b *QP) int { return cmp.Compare(a.num, b.num) })
	return qps
}

// sourceFor returns the address the device sends from toward dst: the
// bound address, or for a wildcard bind the address the kernel routes
// from (see route). The ICRC covers it, so it must be exactly what the
// kernel will put on the wire.
func (d *embeddedDevice) sourceFor(dst netip.AddrPort) netip.AddrPort {
	if !d.local.Addr().IsUnspecified() {
		return d.local
	}
	return netip.AddrPortFrom(d.routes.Get(dst.Addr()).Src, d.local.Port())
}

// receive checks one datagram and hands it to its QP.
func (d *embeddedDevice) receive(b []byte, src, dst netip.AddrPort, now qp.Time, in *inbound) {
	env := wire.Envelope{Src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Dst: dst}
	verdict := ""
	defer func() {
		if d.cfg.Trace != nil {
			d.cfg.Trace(&TracePacket{Time: time.Now(), Dir: Received, Env: env, Data: b, Note: verdict})
		}
	}()
	if err := env.Check(b); err != nil {
		// Not with identification 0: with the one the packet carries, if
		// the socket saw it (udp.Options.IPIDs); else, with RecoverIPID,
		// with the one the ICRC points at.
		id, seen, ok := d.conn.IPIDOf(src, b, func(id uint16) bool {
			e := env
			e.IPID = id
			return e.Check(b) == nil
		})
		switch {
		case ok:
			d.devc.inc(ICRCIPIDVerified)
		case !seen && d.cfg.RecoverIPID:
			if id, ok = env.RecoverIPID(b); ok {
				d.devc.inc(ICRCIPIDRecovered)
			}
		}
		if !ok {
			d.devc.inc(BadICRC)
			verdict = "dropped: bad ICRC"
			return
		}
		env.IPID = id
	}
	if err := in.pkt.Decode(b); err != nil {
		d.devc.inc(Malformed)
		verdict = "dropped: " + err.Error()
		return
	}
	q := d.lookup(in.pkt.BTH.DestQP())
	if q == nil {
		d.devc.inc(UnknownQP)
		verdict = "dropped: no such QP"
		return
	}
	if !d.fromOwnPort(q, env.Src) {
		d.qpc.Add(verbs.WrongSource, 1)
		verdict = "dropped: not from the QP its receiver is connected to"
		return
	}
	d.qpc.Add(verbs.RcvdPkts, 1)
	d.qpc.Add(verbs.RcvdBytes, uint64(len(b)))
	q.mu.Lock()
	if !q.destroyed {
		if q.queues != nil {
			q.queues.PullRecvLocked()
		}
		q.qp.Receive(&in.pkt, &env, now)
		if q.commEst != nil && q.qp.Status().ExpectedPSN != q.commEstPSN {
			f := q.commEst
			q.commEst = nil
			f()
		}
	}
	q.mu.Unlock()
	if !q.dirty {
		q.dirty = true
		in.dirty = append(in.dirty, q)
	}
}
