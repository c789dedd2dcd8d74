// Package daemon is softnic serve: the device, the regions it hosts and
// the connections it accepts on the connection manager's port, the
// control socket (package control) with the answers to info, stat, mr and
// qp, the processes attached to the device (attachd.Server) and what
// each may see, the pcap capture, and the HTTP servers of --metrics and
// --http (packages metrics and live). Its events are logged through zap,
// each kind rate-limited.
package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/softnic/softnic/cmd/softnic/internal/capture"
	"github.com/softnic/softnic/cmd/softnic/internal/control"
	"github.com/softnic/softnic/cmd/softnic/internal/exit"
	"github.com/softnic/softnic/cmd/softnic/internal/flagval"
	"github.com/softnic/softnic/cmd/softnic/internal/zapslog"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/verbs"
)

// The receive buffers softnic serve keeps posted on a shared receive queue
// for the SENDs (and the immediates of WRITE WITH IMMEDIATE) its peers
// send: a SEND longer than one buffer fails at the sender with
// REM_INV_REQ_ERR.
const (
	RecvBuffers    = 64
	RecvBufferSize = 64 << 10
)

// DefaultStopGrace is how long a stopping daemon waits for its peers'
// DREPs unless Config.StopGrace says otherwise.
const DefaultStopGrace = 2 * time.Second

// Config is what the daemon runs with: softnic serve's command line.
type Config struct {
	Listen     netip.AddrPort
	CMPort     uint16
	Regions    []flagval.Region
	Pcap       string
	Control    string
	LogLevel   zapcore.Level
	Faults     *netem.Faults
	FaultSpec  string // the --faults text, for info
	BusyPoll   time.Duration
	CM         nic.CMLimits
	Access     nic.AccessLimits       // --access-*: how fast a source may fail R_Key checks
	Doorbell   attachd.DoorbellLimits // --doorbell-*: what ringing for nothing may cost
	Attaches   attachd.AttachPace     // --attach-*: how fast each user's programs attach
	LogRate    int                    // --log-rate: lines a second of each kind; 0 for DefaultLogRate
	SendRate   int                    // --send-rate: SENDs a second the daemon takes; 0 for DefaultSendRate
	StopGrace  time.Duration          // --stop-grace: the wait for the peers' DREPs; 0 for DefaultStopGrace
	MTU        int                    // --mtu: the cap of every path MTU; 0 for none below 4096
	StrictICRC bool                   // --strict-icrc: no recovery of IPv4 identifications
	// AllowGroup is the group whose members may use the control socket
	// besides the daemon's user and root; -1 for none.
	AllowGroup int
	Web        WebConfig      // --metrics, --http
	Limits     flagval.Limits // changes to the attached processes' default limits
	Version    string         // softnic's, for info
}

// setDefaults gives the limits left at zero their defaults, so that stat
// shows what the daemon runs with.
func (c *Config) setDefaults() {
	c.CM, c.Access, c.Doorbell, c.Attaches = c.CM.WithDefaults(), c.Access.WithDefaults(), c.Doorbell.WithDefaults(), c.Attaches.WithDefaults()
	c.LogRate, c.StopGrace = cmp.Or(c.LogRate, DefaultLogRate), cmp.Or(c.StopGrace, DefaultStopGrace)
	c.SendRate = cmp.Or(c.SendRate, DefaultSendRate)
}

// icrcMode says in words how the daemon checks the ICRC of IPv4 packets
// whose identification is not 0 (Linux rxe's).
func (d *daemon) icrcMode() string {
	switch raw := d.dev.Features().IPIDs; {
	case raw && d.cfg.StrictICRC:
		return "exact: with the identification a raw socket saw (--strict-icrc)"
	case raw:
		return "exact: with the identification a raw socket saw; recovered from the ICRC for a packet it missed"
	case d.cfg.StrictICRC:
		return "identification 0 only (--strict-icrc without CAP_NET_RAW: Linux rxe's packets are dropped)"
	}
	return "identification recovered from the ICRC (no CAP_NET_RAW for a raw socket)"
}

// busyPollText is how info shows --busy-poll: empty when it is off.
func busyPollText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// daemon is a running softnic serve.
type daemon struct {
	cfg     *Config
	log     *zap.Logger
	started time.Time
	capture *capture.File
	dev     *nic.Device
	pd      *nic.PD
	regions []servedRegion
	cq      *nic.CQ // the accepted QPs' completions: only receives, the daemon posts no sends
	srq     *nic.SRQ
	recvMR  *nic.MR
	recvWR  verbs.RecvWR // postRecv's, reused: a SEND received allocates nothing
	recvSGE [1]verbs.SGE // recvWR's SGL
	pacer   *sendPacer   // when the receive loop may post a buffer again
	ln      *nic.Listener
	ctl     *control.Server
	attach  *attachd.Server // the processes attached to the device (Config.Attach)
	web     webServers      // --metrics, --http

	// quit is cancelled by stop: the accept loop and the capture flusher end.
	quit       context.Context
	cancelQuit context.CancelFunc
	acceptDone chan struct{} // closed when the accept loop has returned

	mu       sync.Mutex
	conns    map[uint32]*servedConn // by local QPN
	stopping bool                   // stop has taken its list of connections

	accepted, recvMsgs, recvBytes, writeImms, recvErrors atomic.Uint64

	logs daemonLogs

	wg sync.WaitGroup // the receive and flush loops, and a goroutine per handshake and connection
}

// daemonLogs are the log lines of the events peers and attached programs
// cause, each kind rate-limited: a flood of them cannot fill the log. The
// daemon's own kinds are rateLogs; the library's lines (nic, attachd: a
// program attached or detached, a QP of one failed) go through lib, which
// takes as many lines of each message a second.
type daemonLogs struct {
	connected, disconnected, disconnectedByPeer, lost *rateLog
	send, writeImm, recvFailed, acceptErr             *rateLog
	handshakeTimeout                                  *rateLog
	lib                                               *sampledLog
}

func newDaemonLogs(log *zap.Logger, rate int) daemonLogs {
	return daemonLogs{
		connected:          newRateLog(log, zapcore.InfoLevel, "connected", rate),
		disconnected:       newRateLog(log, zapcore.InfoLevel, "disconnected", rate),
		disconnectedByPeer: newRateLog(log, zapcore.InfoLevel, "disconnected by the peer", rate),
		lost:               newRateLog(log, zapcore.WarnLevel, "connection lost", rate),
		send:               newRateLog(log, zapcore.InfoLevel, "SEND received", rate),
		writeImm:           newRateLog(log, zapcore.InfoLevel, "RDMA WRITE with immediate", rate),
		recvFailed:         newRateLog(log, zapcore.WarnLevel, "receive failed", rate),
		acceptErr:          newRateLog(log, zapcore.WarnLevel, "accepting a connection", rate),
		handshakeTimeout: newRateLog(log, zapcore.InfoLevel,
			"connection request dropped: the requester did not complete the handshake (it gave up, or its address was spoofed)", rate),
		lib: newSampledLog(log, rate),
	}
}

// flush writes the counts of the lines left out.
func (l *daemonLogs) flush() {
	for _, r := range []*rateLog{l.connected, l.disconnected, l.disconnectedByPeer, l.lost, l.send, l.writeImm, l.recvFailed, l.acceptErr, l.handshakeTimeout} {
		r.Flush()
	}
	l.lib.Flush()
}

type servedRegion struct {
	name string
	mr   *nic.MR
}

type servedConn struct {
	conn  *nic.Conn
	since time.Time
}

// ReadyLine is what serve prints on stdout once it accepts connections.
type ReadyLine struct {
	Listen  string        `json:"listen"`
	Control string        `json:"control"`
	Regions []ReadyRegion `json:"regions"`
	CMPort  uint16        `json:"cm_port"`
	Metrics string        `json:"metrics,omitempty"` // --metrics' address, its port picked
	HTTP    string        `json:"http,omitempty"`    // the live page's URL (--http)
}

// ReadyRegion is one region of the ready line.
type ReadyRegion struct {
	Name   string `json:"name"`
	Addr   uint64 `json:"addr"`
	Len    int    `json:"len"`
	RKey   uint32 `json:"rkey"`
	Access string `json:"access"`
}

// Run runs the daemon until ctx is cancelled (SIGINT, SIGTERM). Any
// failure to start is an exit.Error of status 2.
func Run(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	cfg.setDefaults()
	d := &daemon{cfg: cfg, started: time.Now(), conns: make(map[uint32]*servedConn)}
	d.quit, d.cancelQuit = context.WithCancel(context.Background())
	d.log = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(logEncoderConfig()),
		zapcore.Lock(zapcore.AddSync(stderr)), cfg.LogLevel))
	defer d.log.Sync()
	d.logs = newDaemonLogs(d.log, cfg.LogRate)
	if err := d.start(); err != nil {
		d.stop()
		return exit.Status(2, err)
	}
	ready := ReadyLine{Listen: d.dev.Addr().String(), Control: cfg.Control, CMPort: d.ln.Port(), Metrics: d.web.metricsAddr, HTTP: d.web.httpURL}
	for _, r := range d.regions {
		ready.Regions = append(ready.Regions, ReadyRegion{Name: r.name, Addr: r.mr.Addr(), Len: r.mr.Len(),
			RKey: r.mr.RKey(), Access: flagval.AccessLetters(r.mr.Region().Info().Access)})
	}
	d.log.Info("softnic serve ready", zap.Stringer("listen", d.dev.Addr()), zap.Uint16("cm_port", d.ln.Port()),
		zap.String("control", cfg.Control), zap.Int("regions", len(d.regions)))
	line, _ := json.Marshal(&ready)
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		d.stop()
		return err
	}
	<-ctx.Done()
	d.log.Info("stopping: closing the listener and disconnecting every QP")
	return d.stop()
}

func logEncoderConfig() zapcore.EncoderConfig {
	c := zap.NewProductionEncoderConfig()
	c.EncodeTime = zapcore.ISO8601TimeEncoder
	c.EncodeLevel = zapcore.CapitalLevelEncoder
	return c
}

// start opens the device, allocates the regions, posts the receive buffers,
// listens on the rdma_cm port and the control socket, and starts the loops.
func (d *daemon) start() error {
	cfg := d.cfg
	// The control socket first: a second daemon given the same one fails
	// before it logs anything. It is answered once everything is ready.
	l, err := listenControl(cfg.Control, cfg.AllowGroup)
	if err != nil {
		return err
	}
	// The library logs through slog; its lines join the daemon's zap log.
	libLog := zapslog.New(d.logs.lib.Logger())
	d.ctl = &control.Server{Listener: l, Admit: d.admit, Handle: d.control, Attach: d.serveAttached,
		Accepts: quota.Backoff{Log: libLog, What: cfg.Control}}
	if err := d.listenWeb(); err != nil {
		return err
	}
	if cfg.Pcap != "" {
		if d.capture, err = capture.Create(cfg.Pcap); err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
	}
	// The daemon's one CQ waiter, receiveLoop, sleeps at once: how much CPU
	// the daemon burns for speed is --busy-poll's to say, and a waiter
	// spinning through a SEND flood took it from the other peers.
	ncfg := nic.Config{Addr: cfg.Listen, Logger: libLog, Faults: cfg.Faults, Embed: true, BusyPoll: cfg.BusyPoll, WaitSpin: -1, CM: cfg.CM, Access: cfg.Access, MTU: cfg.MTU,
		// Linux rxe's packets: their IPv4 identifications are checked as
		// they are where a raw socket shows them, recovered otherwise.
		RecoverIPID: !cfg.StrictICRC, UDP: udp.Options{IPIDs: true}}
	ncfg.Trace = d.trace()
	if d.dev, err = nic.Open(ncfg); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("UDP address %v is already in use (another softnic serve? pick another --listen port)", cfg.Listen)
		}
		return err
	}
	limits := quota.DefaultLimits(quota.Probe(d.dev.MaxQPs()))
	cfg.Limits.Apply(&limits)
	acfg := attachd.Config{Logger: libLog, Limits: &limits, LimitFlag: "softnic serve --limit", Doorbell: cfg.Doorbell,
		Attaches: cfg.Attaches}
	if cfg.AllowGroup >= 0 {
		acfg.AllowGroups = []int{cfg.AllowGroup}
	}
	d.attach = attachd.NewServer(d.dev, acfg)
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return err
	}
	for _, spec := range cfg.Regions {
		m, err := d.pd.AllocMR(spec.Size, spec.Access)
		if err != nil {
			return fmt.Errorf("region %s of %s: %w", spec.Name, flagval.FormatSize(spec.Size), err)
		}
		d.regions = append(d.regions, servedRegion{spec.Name, m})
	}
	if err := d.startReceives(); err != nil {
		return err
	}
	if d.ln, err = d.dev.Listen(cfg.CMPort, nic.ListenOptions{PD: d.pd, QP: nic.QPConfig{SendCQ: d.cq, SRQ: d.srq}}); err != nil {
		return fmt.Errorf("rdma_cm port %d: %w", cfg.CMPort, err)
	}
	d.serveWeb()
	d.ctl.Start()
	d.acceptDone = make(chan struct{})
	go d.acceptLoop()
	d.wg.Add(2)
	go d.receiveLoop()
	go d.flushLoop()
	return nil
}

// startReceives creates the shared receive queue of the accepted QPs and
// posts every receive buffer on it.
func (d *daemon) startReceives() error {
	d.pacer = newSendPacer(d.cfg.SendRate, time.Now)
	var err error
	if d.cq, err = d.dev.CreateCQ(2 * RecvBuffers); err != nil {
		return err
	}
	if d.srq, err = d.pd.CreateSRQ(RecvBuffers, 1); err != nil {
		return err
	}
	if d.recvMR, err = d.pd.AllocMR(RecvBuffers*RecvBufferSize, mr.LocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	for slot := range RecvBuffers {
		if err := d.postRecv(slot); err != nil {
			return err
		}
	}
	return nil
}

// postRecv posts receive buffer slot to the SRQ. Its WR is the daemon's
// own, reused (the SRQ copies it): the set-up, then the receive loop, post
// one at a time, and a flood of SENDs allocates nothing here.
func (d *daemon) postRecv(slot int) error {
	d.recvSGE[0] = d.recvMR.SGE(slot*RecvBufferSize, RecvBufferSize)
	d.recvWR = verbs.RecvWR{ID: uint64(slot), SGL: d.recvSGE[:]}
	return d.srq.PostRecv(&d.recvWR)
}

// listenControl listens on the unix socket at path, which only the
// daemon's user may use (mode 0600), or with group set (not -1) the
// members of that group too (0660): an attached process maps memory
// through the daemon and can use its device, as a local user can use a
// host's RDMA device only with access to it. The socket is bound in a
// private directory beside path, given its mode there, and renamed into
// place: nobody can connect to it before it has its mode, whatever the
// umask. (The daemon checks who connected on every connection anyway.)
func listenControl(path string, group int) (net.Listener, error) {
	if err := control.CheckDir(path, true); err != nil {
		return nil, err
	}
	if err := claimControlPath(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(filepath.Dir(path), ".sn")
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer os.RemoveAll(private)
	bound := filepath.Join(private, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // the name it was bound to is gone: controlListener unlinks path
	mode := os.FileMode(0o600)
	if group >= 0 {
		mode = 0o660
		err = os.Chown(bound, -1, group)
	}
	if err == nil {
		err = os.Chmod(bound, mode)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = os.Lstat(bound)
	}
	if err == nil {
		err = os.Rename(bound, path)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &controlListener{UnixListener: l, path: path, file: fi}, nil
}

// controlListener is the control socket's listener: closing it removes
// its path, unless another socket has taken the path since.
type controlListener struct {
	*net.UnixListener
	path string
	file os.FileInfo
}

func (l *controlListener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.file) {
		os.Remove(l.path)
	}
	return err
}

// claimControlPath makes sure the daemon may put its socket at path: free,
// or a socket file left by a daemon that died, which the new one replaces.
// A socket a live daemon answers on is not taken over.
func claimControlPath(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("control socket %s: the path exists and is not a socket", path)
	}
	c, derr := net.DialTimeout("unix", path, time.Second)
	if derr == nil {
		owner := ""
		if cred, err := nic.PeerCredOf(c.(*net.UnixConn)); err == nil && cred.UID != os.Geteuid() {
			owner = fmt.Sprintf(" of uid %d", cred.UID)
		}
		c.Close()
		return fmt.Errorf("control socket %s is in use by another softnic serve%s, or another program (stop it, or give this one another --control)", path, owner)
	}
	if !errors.Is(derr, syscall.ECONNREFUSED) {
		// Not answering is not dead: a daemon of another user, or a busy
		// one, keeps its socket.
		return fmt.Errorf("control socket %s: cannot tell whether a softnic serve uses it: %w", path, derr)
	}
	return nil
}

// stop shuts down what start set up, in order: no new connections, every
// connection disconnected (DREQ), the control socket closed, the device
// closed (its goroutines, and with them the trace, stopped), the capture
// flushed.
func (d *daemon) stop() error {
	d.cancelQuit()
	d.stopWeb()
	if d.ln != nil {
		d.ln.Close()
	}
	if d.acceptDone != nil {
		<-d.acceptDone // no new handshake starts; those under way see d.stopping
	}
	d.mu.Lock()
	d.stopping = true
	conns := make([]*servedConn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			if err := c.conn.Close(); err != nil {
				d.log.Warn("disconnect", zap.Stringer("peer", c.conn.RemoteAddr()), zap.Error(err))
			}
		})
	}
	// A peer that vanished never answers its DREQ, and the CM's retries
	// could take minutes: the disconnects get Config.StopGrace, then
	// closing the device ends those still waiting.
	disconnected := make(chan struct{})
	go func() {
		wg.Wait()
		close(disconnected)
	}()
	select {
	case <-disconnected:
	case <-time.After(d.cfg.StopGrace):
		d.log.Info("stopping without the DREPs of peers that do not answer", zap.Duration("waited", d.cfg.StopGrace))
	}
	if d.attach != nil {
		d.attach.Close() // every attached process's resources destroyed, its connections disconnected
	}
	if d.ctl != nil {
		d.ctl.Close()
	}
	var err error
	if d.dev != nil {
		err = d.dev.Close()
	}
	<-disconnected // the device's closing ended the waits left
	d.wg.Wait()
	if d.capture != nil {
		if cerr := d.capture.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("--pcap: %w", cerr))
		}
	}
	d.logs.flush()
	if d.ln != nil {
		d.log.Info("stopped", zap.Uint64("connections_accepted", d.accepted.Load()), zap.Uint64("sends_received", d.recvMsgs.Load()))
	}
	return err
}

// acceptLoop takes connection requests until the listener closes and
// answers each in a goroutine of its own, so that a handshake waiting for
// its RTU never holds up another: the connection manager bounds how many
// requests wait and for how long (nic.Config.CM).
func (d *daemon) acceptLoop() {
	defer close(d.acceptDone)
	for {
		r, err := d.ln.AcceptRequest(d.quit)
		if err != nil {
			if d.quit.Err() != nil || errors.Is(err, nic.ErrClosed) {
				return
			}
			d.logs.acceptErr.Log(func() []zap.Field { return []zap.Field{zap.Error(err)} })
			continue
		}
		d.wg.Add(1)
		go d.handshake(r)
	}
}

// handshake accepts the request r, then serves the connection until it
// ends.
func (d *daemon) handshake(r *nic.Request) {
	defer d.wg.Done()
	c, err := r.Accept(nic.AcceptOptions{})
	switch {
	case errors.Is(err, nic.ErrTimedOut):
		// Counted in cm_handshake_timeouts.
		d.logs.handshakeTimeout.Log(func() []zap.Field {
			return []zap.Field{zap.Stringer("peer", r.RemoteAddr()), zap.Error(err)}
		})
		return
	case err != nil:
		d.log.Debug("handshake failed", zap.Stringer("peer", r.RemoteAddr()), zap.Error(err))
		return
	}
	d.serveConn(c)
}

// serveConn keeps the connection c in the daemon's table until it ends,
// by either side or by an error, and then closes it: its QP is destroyed
// and what it held freed.
func (d *daemon) serveConn(c *nic.Conn) {
	qpn := c.QP().Num()
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		c.Close() // established as the daemon stops: disconnected at once
		return
	}
	d.conns[qpn] = &servedConn{conn: c, since: time.Now()}
	d.mu.Unlock()
	d.accepted.Add(1)
	peer, q := zap.Stringer("peer", c.RemoteAddr()), zap.String("qpn", hex(uint64(qpn)))
	d.logs.connected.Log(func() []zap.Field {
		return []zap.Field{peer, q, zap.String("peer_qpn", hex(uint64(c.QP().Attr().DestQPN)))}
	})
	<-c.Done()
	d.mu.Lock()
	delete(d.conns, qpn)
	d.mu.Unlock()
	c.Close()
	err := c.Err()
	switch {
	case err == nil:
		d.logs.disconnected.Log(func() []zap.Field { return []zap.Field{peer, q} })
	case errors.Is(err, nic.ErrConnReset):
		d.logs.disconnectedByPeer.Log(func() []zap.Field { return []zap.Field{peer, q} })
	default:
		d.logs.lost.Log(func() []zap.Field { return []zap.Field{peer, q, zap.Error(err)} })
	}
}

// receiveLoop handles the completions of the receive buffers until the
// device closes: each SEND is logged and counted, and its buffer posted
// again.
func (d *daemon) receiveLoop() {
	defer d.wg.Done()
	wcs := make([]verbs.WC, 16)
	for {
		n, err := d.cq.Wait(context.Background(), wcs)
		if errors.Is(err, nic.ErrClosed) {
			return
		}
		if err != nil {
			d.log.Error("receive completions", zap.Error(err))
		}
		for i := range wcs[:n] {
			d.received(&wcs[i])
		}
	}
}

// received logs one receive completion and posts its buffer again, once
// the pacer lets it (Config.SendRate). A line's fields are built only for
// a line written (rateLog.Log): a flood of SENDs, which the log mostly
// leaves out, allocates nothing, so that it does not run the garbage
// collector, which slows every other peer.
func (d *daemon) received(wc *verbs.WC) {
	slot := int(wc.ID)
	switch {
	// Each is logged before it is counted: whoever sees the count sees the log.
	case wc.Status != verbs.Success:
		d.logs.recvFailed.Log(func() []zap.Field {
			return append(d.receivedBy(wc), zap.String("status", wc.Status.String()), zap.String("error", wc.Status.Text()))
		})
		d.recvErrors.Add(1)
	case wc.Opcode == verbs.WCRecvWriteImm:
		d.logs.writeImm.Log(func() []zap.Field {
			return append(d.receivedBy(wc), zap.String("imm", hex(uint64(wc.Imm))), zap.Uint32("bytes", wc.ByteLen))
		})
		d.writeImms.Add(1)
	default:
		d.logs.send.Log(func() []zap.Field {
			data := d.recvMR.Bytes()[slot*RecvBufferSize:][:wc.ByteLen]
			fields := append(d.receivedBy(wc), zap.Uint32("bytes", wc.ByteLen), zap.String("data", excerpt(data)))
			if wc.Flags&verbs.WCWithImm != 0 {
				fields = append(fields, zap.String("imm", hex(uint64(wc.Imm))))
			}
			return fields
		})
		d.recvBytes.Add(uint64(wc.ByteLen))
		d.recvMsgs.Add(1)
	}
	d.pacer.hold(d.quit.Done())
	if err := d.postRecv(slot); err != nil && !errors.Is(err, nic.ErrClosed) {
		d.log.Error("reposting a receive buffer", zap.Error(err))
	}
}

// receivedBy returns the log fields that say who a receive completion
// came from: the peer, if its connection is still there, and the QPN.
func (d *daemon) receivedBy(wc *verbs.WC) []zap.Field {
	peer := zap.Skip()
	d.mu.Lock()
	if c := d.conns[wc.QPN]; c != nil {
		peer = zap.Stringer("peer", c.conn.RemoteAddr())
	}
	d.mu.Unlock()
	return []zap.Field{peer, zap.String("qpn", hex(uint64(wc.QPN)))}
}

// excerpt returns the first 64 bytes of b for a log line (which escapes
// what is not printable), with "…" when there is more.
func excerpt(b []byte) string {
	const max = 64
	if len(b) <= max {
		return string(b)
	}
	return string(b[:max]) + "…"
}

// flushLoop writes the buffered capture out every second, so that a
// running daemon's pcap can be opened, and the counts of the log lines a
// flood left out, so that the log shows its size as it happens.
func (d *daemon) flushLoop() {
	defer d.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			d.logs.flush()
			if d.capture == nil {
				continue
			}
			if err := d.capture.Flush(); err != nil {
				d.log.Error("--pcap", zap.Error(err))
			}
		case <-d.quit.Done():
			return
		}
	}
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// admit tells who connected to the control socket, or refuses a user the
// daemon does not serve (attachd.Server.Admit).
func (d *daemon) admit(c *net.UnixConn) (nic.PeerCred, error) { return d.attach.Admit(c) }

// control answers a control request.
func (d *daemon) control(cmd string, peer nic.PeerCred) (any, error) {
	v := d.viewerOf(peer)
	switch cmd {
	case "info":
		return d.info(), nil
	case "stat":
		return d.counters(v), nil
	case "mr":
		return visible(v, d.regionRows(), func(r control.RegionRow) int { return r.PID }), nil
	case "qp":
		return visible(v, d.qpRows(), func(r control.QPRow) int { return r.PID }), nil
	}
	return nil, fmt.Errorf("unknown command %q (want info, stat, mr or qp)", cmd)
}

func (d *daemon) info() *control.Info {
	d.mu.Lock()
	conns := len(d.conns)
	d.mu.Unlock()
	return &control.Info{
		Version: d.cfg.Version, PID: os.Getpid(), Started: d.started,
		Listen: d.dev.Addr().String(), CMPort: d.ln.Port(), MTU: d.dev.MTU(), UDP: d.dev.Features().String(), ICRC: d.icrcMode(),
		Control: d.cfg.Control, Pcap: d.cfg.Pcap, Faults: d.cfg.FaultSpec, BusyPoll: busyPollText(d.cfg.BusyPoll),
		Regions: len(d.regions), Connections: conns, RecvBuffers: RecvBuffers, RecvBufSize: RecvBufferSize,
		Attached: attachedPIDs(d.attach.Processes()),
	}
}

// counters lists the device's counters (rxe's names, then its drop
// reasons), the refused remote accesses by reason, the daemon's own, and
// the attached processes'.
func (d *daemon) counters(v viewer) control.Counters {
	return slices.Concat(d.deviceCounters(), d.limitCounters(), d.attachedCounters(v))
}

// limitCounters are the limits the daemon runs with that --limit does
// not set, as limit_NAME: those on what peers may hold or cost it, whose
// effect the counters beside show (cm_rejected_busy,
// cm_handshake_timeouts, access_holds, each program's doorbells_throttled,
// the log's more_not_logged). Durations are in milliseconds.
func (d *daemon) limitCounters() control.Counters {
	c := d.cfg
	return control.Counters{
		{Name: "limit_cm_half_open", Value: uint64(c.CM.HalfOpen)},
		{Name: "limit_cm_half_open_per_source", Value: uint64(c.CM.HalfOpenPerSource)},
		{Name: "limit_cm_handshake_timeout_ms", Value: uint64(c.CM.Handshake.Milliseconds())},
		{Name: "limit_cm_reject_rate", Value: uint64(c.CM.RejectRate)},
		{Name: "limit_cm_reject_burst", Value: uint64(c.CM.RejectBurst)},
		{Name: "limit_access_refusals", Value: uint64(c.Access.Refusals)},
		{Name: "limit_access_refusal_rate", Value: uint64(c.Access.Rate)},
		{Name: "limit_access_sources", Value: uint64(c.Access.Sources)},
		{Name: "limit_doorbell_burst", Value: uint64(c.Doorbell.Burst)},
		{Name: "limit_doorbell_rate", Value: uint64(c.Doorbell.Rate)},
		{Name: "limit_attach_burst", Value: uint64(c.Attaches.Burst)},
		{Name: "limit_attach_rate", Value: uint64(c.Attaches.Rate)},
		{Name: "limit_log_rate", Value: uint64(c.LogRate)},
		{Name: "limit_send_rate", Value: uint64(c.SendRate)},
		{Name: "limit_stop_grace_ms", Value: uint64(c.StopGrace.Milliseconds())},
	}
}

// deviceCounters is counters without the attached processes'.
func (d *daemon) deviceCounters() control.Counters {
	var l control.Counters
	for _, c := range d.dev.Counters() {
		l = append(l, control.Counter{Name: c.Name, Value: c.Value})
	}
	rejects := d.dev.Memory().Stats().Rejects
	unknown := mr.Reason(0).String()
	for r := mr.Reason(1); r.String() != unknown; r++ {
		l = append(l, control.Counter{Name: "rejected_" + strings.ReplaceAll(strings.ToLower(r.String()), " ", "_"), Value: rejects[r]})
	}
	d.mu.Lock()
	active := uint64(len(d.conns))
	d.mu.Unlock()
	l = append(l,
		control.Counter{Name: "connections_accepted", Value: d.accepted.Load()},
		control.Counter{Name: "connections_active", Value: active},
		control.Counter{Name: "sends_received", Value: d.recvMsgs.Load()},
		control.Counter{Name: "send_bytes_received", Value: d.recvBytes.Load()},
		control.Counter{Name: "write_imms_received", Value: d.writeImms.Load()},
		control.Counter{Name: "receive_errors", Value: d.recvErrors.Load()},
		control.Counter{Name: "receives_paced", Value: d.pacer.held.Load()},
		control.Counter{Name: "control_accept_errors", Value: d.ctl.Accepts.Errors()},
		control.Counter{Name: "control_accepts_deferred", Value: d.ctl.Deferred()},
		control.Counter{Name: "control_accepts_paced", Value: d.ctl.Paced()},
		control.Counter{Name: "control_closed_silent", Value: d.ctl.Silent()},
		control.Counter{Name: "control_refused_busy", Value: d.ctl.Busy()},
		control.Counter{Name: "control_refused_peers", Value: d.attach.RefusedPeers()},
		control.Counter{Name: "control_refused_versions", Value: d.attach.RefusedVersions()},
		control.Counter{Name: "attaches_paced", Value: d.attach.PacedAttaches()},
		control.Counter{Name: "qps", Value: uint64(len(d.dev.QPs()))},
	)
	l = append(l, runtimeCounters()...)
	return l
}

// runtimeCounters are the daemon process's goroutines and live heap (as
// of the last garbage collection, counted in gc_cycles): what a leak would
// make grow.
func runtimeCounters() control.Counters {
	samples := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	l := control.Counters{}
	for i, name := range []string{"goroutines", "heap_live_bytes", "gc_cycles"} {
		if samples[i].Value.Kind() == metrics.KindUint64 {
			l = append(l, control.Counter{Name: name, Value: samples[i].Value.Uint64()})
		}
	}
	return l
}

func (d *daemon) regionRows() []control.RegionRow {
	names := map[uint32]string{d.recvMR.RKey(): "(receive buffers)"}
	for _, r := range d.regions {
		names[r.mr.RKey()] = r.name
	}
	owners := d.attachedPDs()
	rows := []control.RegionRow{}
	for ri := range d.dev.Memory().Regions() {
		rows = append(rows, control.RegionRow{
			Name: names[ri.RKey], LKey: ri.LKey, RKey: ri.RKey, PD: uint32(ri.PD),
			Access: flagval.AccessLetters(ri.Access), Flags: ri.Access.String(), Addr: ri.Addr, Len: ri.Len,
			Kind: ri.Kind.String(), ODP: ri.Access&mr.OnDemand != 0 || ri.Kind == mr.ImplicitODP,
			Pages: ri.ODP.ResidentPages, Faults: ri.ODP.Faults, Windows: ri.Windows,
			PID: cmp.Or(owners[ri.PD], os.Getpid()),
		})
	}
	return rows
}

// qpRows lists every QP of the device: the connections the daemon
// accepted, the attached processes' QPs, and the rest (QP1, the
// connection manager's) as the daemon's own.
func (d *daemon) qpRows() []control.QPRow {
	d.mu.Lock()
	conns := make([]*servedConn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	rows := []control.QPRow{}
	for _, c := range conns {
		rows = append(rows, newQPRow(c.conn.QP(), os.Getpid(), c.since))
	}
	rows = append(rows, d.attachedQPRows()...)
	listed := make(map[uint32]bool, len(rows))
	for _, r := range rows {
		listed[r.QPN] = true
	}
	for _, q := range d.dev.QPs() {
		if !listed[q.Num()] {
			rows = append(rows, newQPRow(q, os.Getpid(), time.Time{}))
		}
	}
	slices.SortFunc(rows, func(a, b control.QPRow) int { return cmp.Compare(a.QPN, b.QPN) })
	return rows
}

// newQPRow is the row of q, owned by the process pid and connected since
// since (zero if the connection manager did not connect it).
func newQPRow(q *nic.QP, pid int, since time.Time) control.QPRow {
	st, at := q.Status(), q.Attr()
	peer := "-"
	if at.Remote.IsValid() {
		peer = at.Remote.String()
	}
	return control.QPRow{
		QPN: q.Num(), Type: q.Type().String(), State: st.State.String(), Peer: peer, PeerQPN: at.DestQPN,
		MTU: at.PathMTU, SendPSN: uint32(st.SendPSN), AckedPSN: uint32(st.AckedPSN),
		ExpectedPSN: uint32(st.ExpectedPSN), MSN: st.MSN, SendQueued: st.SendQueued, Since: since, PID: pid,
	}
}
