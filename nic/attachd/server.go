package attachd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd/internal/admit"
	"github.com/softnic/softnic/nic/attachd/internal/rings"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire/mad"
)

// Config configures an Server. Zero fields take the
// defaults noted.
type Config struct {
	// Logger receives attach and detach events; nil uses the device's.
	Logger *slog.Logger
	// Limits bound what attached processes hold in the daemon, each
	// process (by PID and start time), each user and all of them
	// together: sessions, waiting calls, objects, QPs, queue entries,
	// shared memory, mappings, and the heap and descriptors the daemon
	// spends for them. Nil takes quota.DefaultLimits of the machine.
	Limits *quota.Limits
	// LimitFlag is how a refusal names the setting that raises a limit,
	// such as "softnic serve --limit" (see quota.LimitError).
	LimitFlag string
	// AllowGroups admits the members of these groups besides the
	// daemon's own user and root, who are always admitted.
	AllowGroups []int
	// Doorbell bounds the wakeups a process that rings its doorbell for
	// nothing costs the daemon (see DoorbellLimits).
	Doorbell DoorbellLimits
	// Attaches bounds how fast each user's processes attach (see
	// AttachPace).
	Attaches AttachPace
}

// Server lets other processes use a device as theirs: it is the
// daemon side of attach mode (see nic.Config.Attach). Each attached process
// gets its own protection domains, regions, CQs and QPs on the device,
// named by handles only it can use; its queues are rings in memory both
// processes map, which the server moves between the process and the
// device's QPs; connections it asks for are made by the device's
// connection manager on its behalf. When the process detaches, exits or
// dies, everything it made is destroyed: its QPs are flushed, their
// connections disconnected (the peers get a DREQ), its regions
// deregistered.
//
// The server trusts nothing it reads from a process's memory: a corrupt
// work request or ring index fails that QP alone (LOC_QP_OP_ERR, QP in
// the error state), memory a process offers must be a sealed memfd, and a
// process that rings its doorbell for nothing is throttled (see
// DoorbellLimits).
type Server struct {
	dev *nic.Device
	// edev is the embedded device behind dev, which the server can
	// serve, nil if dev is attached; unhook stops its busy-polling reader
	// from polling the server's queues.
	edev   hooks.Device
	unhook func()
	cfg    Config
	log    *slog.Logger

	// ledger keeps what each process and user holds, against the limits.
	ledger *quota.Ledger
	// accepts carries Serve through a process out of descriptors.
	accepts quota.Backoff
	// attaches paces each user's attaches.
	attaches quota.UserPacers
	refused  atomic.Uint64   // connections of users not admitted
	refusals quota.Sometimes // logs refused attaches
	stop     chan struct{}   // closed by Close: Serve returns
	// versions counts the attaches refused for another protocol version,
	// which versionLog logs apart from the others: a flood of refused
	// users must not hide that a program needs another library.
	versions   atomic.Uint64
	versionLog quota.Sometimes

	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup // sessions

	// For a device that busy-polls (nic.Config.BusyPoll): the sessions, as
	// its reader polls them, and whether it does now.
	polled atomic.Pointer[[]*session]
	busy   atomic.Bool
}

// background runs f, a connection manager exchange left to finish after
// its process detached (a DREQ waiting for its DREP, an accept waiting for
// its RTU). Nothing waits for it: it ends with the exchange, after the
// CM's retries at the latest, or when the device closes. A peer that
// vanished must not hold up a detach or the daemon's shutdown.
func background(f func()) { go f() }

// NewServer returns a server of d's resources to attached processes.
// Close it before d. d is an embedded device: a server of an attached one
// refuses every process with nic.ErrNotSupported.
func NewServer(d *nic.Device, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = deviceLogger(d)
	}
	cfg.Doorbell, cfg.Attaches = cfg.Doorbell.WithDefaults(), cfg.Attaches.WithDefaults()
	limits := cfg.Limits
	if limits == nil {
		l := quota.DefaultLimits(quota.Probe(d.MaxQPs()))
		limits = &l
	}
	s := &Server{dev: d, cfg: cfg, log: cfg.Logger, sessions: make(map[*session]struct{}), stop: make(chan struct{}),
		ledger: quota.NewLedger(*limits, cfg.LimitFlag), unhook: func() {}}
	s.accepts.Log = s.log
	s.attaches.Rate, s.attaches.Burst = float64(cfg.Attaches.Rate), float64(cfg.Attaches.Burst)
	if e, ok := embedded(d); ok {
		s.edev = e
		s.unhook = e.SetBusyPoller(busyPoller{s})
	}
	return s
}

// busyPoller is the server as the busy-polling reader of its device polls
// it (hooks.BusyPoller).
type busyPoller struct{ s *Server }

// PollRings is a busy-polling reader's pass over the queues of every
// attached process (see nic.Config.BusyPoll).
func (b busyPoller) PollRings() bool {
	s := b.s
	p := s.polled.Load()
	if p == nil {
		return false
	}
	worked := false
	for _, x := range *p {
		if x.pollQueues(false) {
			worked = true
		}
	}
	return worked
}

// BusyPolling turns the processes' doorbells off while the reader polls
// their queues, and back on (then looks at the queues once more, for
// posts that found them off) when it stops.
func (b busyPoller) BusyPolling(on bool) {
	s := b.s
	s.busy.Store(on)
	if p := s.polled.Load(); p != nil {
		for _, x := range *p {
			x.pollQueues(!on)
		}
	}
}

// republish refreshes the sessions a busy-polling reader polls; s.mu is
// held.
func (s *Server) republish() {
	ss := slices.Collect(maps.Keys(s.sessions))
	s.polled.Store(&ss)
}

// Serve accepts processes on l, a unix socket listener, until l or the
// server is closed: each connection must start with the attach line a
// client sends, and is closed without a word if it does not (ServeConn
// answers a line of another protocol version). An accept error that
// passes, such as EMFILE, is waited out (AcceptErrors counts them). It
// returns the listener's error, or ErrClosed. A server serves one
// listener at a time.
func (s *Server) Serve(l net.Listener) error {
	s.accepts.What = l.Addr().String()
	for {
		c, err := s.accepts.Accept(l, s.stop)
		if err != nil {
			return err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		s.mu.Lock() // Close waits for what was added before it closed
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return fmt.Errorf("attach server: %w", nic.ErrClosed)
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			if _, err := s.Admit(uc); err != nil {
				s.refuse(uc, err)
				return
			}
			uc.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := ReadControlLine(uc, attachproto.MaxAttachLine)
			uc.SetReadDeadline(time.Time{})
			if err == nil {
				_, err = attachproto.ParseAttachLine(line)
			}
			if err != nil {
				uc.Close()
				return
			}
			s.ServeConn(uc, line)
		}()
	}
}

// Admit returns who is at the other end of c, a connection to the
// control socket, or nic.ErrAccess when the server does not serve that user:
// the daemon's own user, root and the members of Config.AllowGroups
// attach. Serve and ServeConn admit every connection; a control socket
// that answers other commands too admits each before it reads anything.
func (s *Server) Admit(c *net.UnixConn) (nic.PeerCred, error) {
	cred, err := admit.Admit(c, s.cfg.AllowGroups)
	if err != nil {
		s.refused.Add(1)
	}
	return cred, err
}

// RefusedPeers counts the connections Admit refused.
func (s *Server) RefusedPeers() uint64 { return s.refused.Load() }

// RefusedVersions counts the attaches refused because the client speaks
// another version of the attach protocol than the server, or states none
// (a program built with a library of another release).
func (s *Server) RefusedVersions() uint64 { return s.versions.Load() }

// ReadControlLine reads the first line a client sends on a control socket
// that takes other commands besides attach, at most max bytes, and not a
// byte past it (as Serve does): when it is the attach line, the messages
// that follow and their descriptors stay in c for ServeConn. It reads a
// byte at a time into a line it makes once the first byte has come: a
// client that connects and closes without a word costs one read and no
// buffer (a flood of such connections was a 4 KiB buffer each).
func ReadControlLine(c *net.UnixConn, max int) ([]byte, error) {
	var b [1]byte
	var line []byte
	for len(line) < max {
		if n, err := c.Read(b[:]); n == 1 {
			line = append(line, b[0])
			if b[0] == '\n' {
				return line, nil
			}
		} else if err != nil {
			return line, err
		}
	}
	return line, fmt.Errorf("no end of line in %d bytes: %w", max, nic.ErrInvalid)
}

// ServeConn serves the process at the other end of c, which has sent line,
// the attach line (a control socket reads it to tell attach from its other
// commands), until it detaches or the server closes; then it destroys
// everything the process made and closes c. A process whose line names
// another version of the attach protocol than the server's, or none, is
// refused with an error wrapping nic.ErrProtoNotSupported that names both.
func (s *Server) ServeConn(c *net.UnixConn, line []byte) error {
	ss, err := s.newSession(c, line)
	if err != nil {
		s.refuse(c, err)
		return err
	}
	defer s.wg.Done()
	ss.serve()
	return nil
}

// refuse answers the attach line of c with err, and closes c. The client
// may have sent its line, or more, unread: what it sent is read and
// dropped before the close, which would otherwise reset the connection
// under the answer.
func (s *Server) refuse(c *net.UnixConn, err error) {
	var ver *attachproto.VersionError
	if errors.As(err, &ver) {
		s.versionLog.Log(s.log, "attach refused: the program's softnic library speaks another attach protocol version",
			slog.Int("client_version", ver.Client), slog.Int("daemon_version", ver.Daemon))
	} else {
		s.refusals.Log(s.log, "attach refused", slog.Any("error", err))
	}
	m := attachproto.Msg{}
	m.SetError(err)
	line, _ := json.Marshal(&m)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(append(line, '\n'))
	c.CloseWrite()
	io.Copy(io.Discard, io.LimitReader(c, attachproto.MaxLine))
	c.Close()
}

// Close detaches every process and waits until their resources are gone.
// Connections still being disconnected for them are not waited for: their
// DREQs go on until answered, or until the device closes.
func (s *Server) Close() error {
	s.unhook()
	s.mu.Lock()
	if !s.closed {
		close(s.stop)
	}
	s.closed = true
	ss := make([]*session, 0, len(s.sessions))
	for x := range s.sessions {
		ss = append(ss, x)
	}
	s.mu.Unlock()
	for _, x := range ss {
		x.t.Close()
	}
	s.wg.Wait()
	return nil
}

// PacedAttaches counts the attaches that waited for their user's turn
// (AttachPace).
func (s *Server) PacedAttaches() uint64 { return s.attaches.Paced() }

// Usage returns what the attached processes and their users hold, against
// the limits.
func (s *Server) Usage() quota.Usage { return s.ledger.Usage() }

// AcceptErrors counts the accepts of Serve that failed and were retried.
func (s *Server) AcceptErrors() uint64 { return s.accepts.Errors() }

// Process describes an attached process and what it owns.
type Process struct {
	PID, UID int           // from SO_PEERCRED
	Since    time.Time     // when it attached
	PDs      []mr.PDHandle // its protection domains: its regions are theirs
	QPs      []*nic.QP     // its QPs on the device
	// Connected tells, by QP number, when the connection manager connected
	// those of its QPs it did.
	Connected map[uint32]time.Time
	// Counters count its doorbells, work requests and completions through
	// the shared queues, and its QPs failed for corrupt queues.
	Counters []nic.CounterValue
}

// Processes describes the processes attached now.
func (s *Server) Processes() []Process {
	s.mu.Lock()
	ss := make([]*session, 0, len(s.sessions))
	for x := range s.sessions {
		ss = append(ss, x)
	}
	s.mu.Unlock()
	out := make([]Process, 0, len(ss))
	for _, x := range ss {
		out = append(out, x.describe())
	}
	slices.SortFunc(out, func(a, b Process) int { return a.Since.Compare(b.Since) })
	return out
}

// attachedAttr is what the server's device supports within what one
// attached process may hold: the nic.DeviceAttr of the devices attached to it.
func (s *Server) attachedAttr() nic.DeviceAttr {
	a := s.dev.Query()
	lim := s.ledger.Limits()[quota.Process]
	clamp := func(v *int, r quota.Resource) { *v = int(min(int64(*v), lim[r])) }
	clamp(&a.MaxQP, quota.QPs)
	clamp(&a.MaxCQE, quota.CQEntries)
	clamp(&a.MaxSRQWR, quota.SRQEntries)
	for _, v := range []*int{&a.MaxCQ, &a.MaxMR, &a.MaxPD, &a.MaxMW, &a.MaxSRQ} {
		clamp(v, quota.Objects)
	}
	a.MaxMRSize = uint64(min(int64(a.MaxMRSize), lim[quota.Memory]))
	a.MaxResRdAtom = a.MaxQPRdAtom * a.MaxQP
	return a
}

// Counters of one attached process.
const (
	cntDoorbells          = iota // doorbell wakeups of the daemon
	cntSendWQEs                  // send work requests taken from its send rings
	cntRecvWQEs                  // receive work requests taken from its receive rings
	cntCQEs                      // completions written to its completion rings
	cntBadQueues                 // QPs failed for a corrupt work request or ring index
	cntCQOverflows               // completions lost to a full completion ring
	cntDoorbellSignals           // signals of its doorbell, as the daemon's waits took them (those that came together count once)
	cntDoorbellsEmpty            // wakeups that found no new work request
	cntDoorbellsThrottled        // times its doorbell went unheard for a while: it rang for nothing too often
	numSessionCounters
)

var sessionCounterNames = [numSessionCounters]string{
	"doorbells", "send_wqes", "recv_wqes", "cqes", "bad_queues", "cq_overflows",
	"doorbell_signals", "doorbells_empty", "doorbells_throttled",
}

// session is one attached process.
type session struct {
	srv   *Server
	dev   *nic.Device
	t     *shm.Conn
	pid   int
	uid   int
	since time.Time
	log   *slog.Logger

	ctx    context.Context // cancelled when the process detaches
	cancel context.CancelFunc

	bell doorbell

	// pollMu is held by a busy-polling reader while it polls the process's
	// queues, and by the detach that unmaps the doorbell page after it.
	pollMu   sync.Mutex
	unpolled bool                        // detached: not to be polled
	qpSnap   atomic.Pointer[[]*hostedQP] // a copy of slots, for the goroutines that service them

	// acct charges what the session holds to its process, its user and
	// the total (quota.Ledger): every bill below is charged before what
	// it pays for is made, and released after it is gone.
	acct *quota.Holder

	mu      sync.Mutex
	objects map[uint32]any // handle → *PD, *hostedMR, *hostedCQ, *hostedSRQ, *hostedQP, *hostedListener, *hostedRequest, *hostedConn
	next    uint32
	calls   map[uint64]context.CancelFunc // calls waiting for the network
	slots   []*hostedQP                   // its QPs by doorbell slot, nil where free (qpSnap publishes them)
	byQPN   map[uint32]*hostedQP          // the same, by number
	failing []*hostedQP                   // QPs to fail from the doorbell goroutine
	dead    bool

	events *hooks.Queue[asyncEvent] // its QPs' errors and SRQs' limits, told to the process (qp_error, srq_limit)

	cnt        [numSessionCounters]atomic.Uint64
	ringCounts rings.Counts   // cnt's counters the rings count
	callWG     sync.WaitGroup // calls in progress, and the goroutine that tells QP errors
	bellDone   chan struct{}  // closed when the doorbell loop returns
	// polled is set while the doorbell goroutine, spinning, polls the
	// device (session.spin); that goroutine's alone.
	polled bool
}

// newSession identifies the process at the other end of c, waits for its
// user's turn (AttachPace), checks the version its attach line names, sets
// up its doorbell and answers the line.
func (s *Server) newSession(c *net.UnixConn, line []byte) (*session, error) {
	cred, err := s.Admit(c)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if !s.attaches.Take(cred.UID, s.stop) {
		return nil, fmt.Errorf("attach: %w", nic.ErrClosed)
	}
	req, err := attachproto.ParseAttachLine(line)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if err := attachproto.CheckVersion(attachproto.Version, req.Version); err != nil {
		s.versions.Add(1)
		return nil, fmt.Errorf("attach: %w", err)
	}
	ss := &session{
		srv: s, dev: s.dev, t: shm.NewConn(c, attachproto.MaxLine), pid: cred.PID, uid: cred.UID,
		since: time.Now(), objects: make(map[uint32]any), calls: make(map[uint64]context.CancelFunc),
		byQPN: make(map[uint32]*hostedQP), events: hooks.NewQueue[asyncEvent](),
	}
	ss.log = s.log.With(slog.Int("pid", ss.pid))
	ss.ringCounts = rings.Counts{SendWQEs: &ss.cnt[cntSendWQEs], RecvWQEs: &ss.cnt[cntRecvWQEs],
		CQEs: &ss.cnt[cntCQEs], CQOverflows: &ss.cnt[cntCQOverflows], BadQueues: &ss.cnt[cntBadQueues]}
	ss.ctx, ss.cancel = context.WithCancel(context.Background())
	if s.edev == nil {
		return nil, fmt.Errorf("attach: an attach server of an attached device: %w", nic.ErrNotSupported)
	}
	select {
	case <-s.dev.Done():
		return nil, fmt.Errorf("attach: %w", nic.ErrClosed)
	default:
	}
	ss.acct = s.ledger.Open(quota.Identify(ss.pid), ss.uid)
	if err := ss.acct.Charge(sessionBill); err != nil {
		ss.acct.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	fail := func(err error) (*session, error) {
		ss.acct.Release(sessionBill)
		ss.acct.Close()
		return nil, err
	}
	ss.bell.configure(s.cfg.Doorbell)
	if err := ss.bell.open(); err != nil {
		return fail(err)
	}
	attr, _ := json.Marshal(s.attachedAttr())
	hello := attachproto.Hello{Addr: s.dev.Addr(), MTU: s.dev.MTU(), Features: s.dev.Features(), PID: os.Getpid(),
		Version: attachproto.Version, Attr: attr}
	err = ss.reply(0, &hello, ss.bell.fds(), nil)
	ss.bell.page.CloseFD()
	if err != nil {
		ss.bell.close()
		return fail(err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.bell.close()
		return fail(fmt.Errorf("attach: %w", nic.ErrClosed))
	}
	s.sessions[ss] = struct{}{}
	s.republish()
	s.wg.Add(1)
	s.mu.Unlock()
	ss.log.Info("process attached", slog.Int("uid", ss.uid))
	ss.bellDone = make(chan struct{})
	go ss.doorbellLoop()
	ss.callWG.Add(1)
	go func() {
		defer ss.callWG.Done()
		ss.events.Run(ss.ctx.Done(), ss.tellEvent)
	}()
	return ss, nil
}

// serve reads the process's requests until it detaches, then cleans up.
func (s *session) serve() {
	var err error
	for err == nil {
		var line []byte
		if line, err = s.t.ReadLine(); err != nil {
			break
		}
		var m attachproto.Msg
		if err = json.Unmarshal(line, &m); err != nil {
			err = fmt.Errorf("%v: %w", err, shm.ErrProtocol)
			break
		}
		var fds []int
		if fds, err = s.t.TakeFDs(m.FDs); err != nil {
			break
		}
		s.handle(&m, fds)
	}
	if errors.Is(err, shm.ErrProtocol) {
		s.log.Warn("detaching a process that broke the protocol", slog.Any("error", err))
	}
	// A process that detaches reads on until the socket closes, which
	// tells it that its QPs' work requests are flushed into its rings; it
	// reads nothing else, so nothing sent now may wait for it.
	s.t.Unix().SetWriteDeadline(longAgo)
	s.t.DropFDs()
	s.cleanup()
	s.t.Close()
}

// reply answers call id with res or err, sending fds along.
func (s *session) reply(id uint64, res any, fds []int, err error) error {
	m := attachproto.Msg{ID: id, FDs: len(fds)}
	if err != nil {
		m.SetError(err)
		m.FDs, fds = 0, nil
	} else if res != nil {
		m.Result, _ = json.Marshal(res)
	}
	line, _ := json.Marshal(&m)
	return s.t.Send(line, fds)
}

// event tells the process of something that happened (no reply).
func (s *session) event(op string, body any, err error) {
	m := attachproto.Msg{Op: op}
	m.Args, _ = json.Marshal(body)
	if err != nil {
		m.SetError(err)
	}
	line, _ := json.Marshal(&m)
	s.t.Send(line, nil)
}

// asyncEvent is a QP of the process that entered the error state by
// itself, with the status of the completion that moved it there, or an
// SRQ of the process that reached its limit.
type asyncEvent struct {
	qp    *hostedQP
	cause verbs.WCStatus
	srq   *hostedSRQ
}

// tellEvent tells the process that its QP entered the error state, or
// that its SRQ reached its limit, unless the process destroyed it
// meanwhile.
func (s *session) tellEvent(e asyncEvent) {
	var obj any = e.qp
	if e.srq != nil {
		obj = e.srq
	}
	s.mu.Lock()
	var h uint32
	for k, o := range s.objects {
		if o == obj {
			h = k
			break
		}
	}
	s.mu.Unlock()
	switch {
	case h == 0:
	case e.srq != nil:
		s.event(attachproto.EvSRQLimit, attachproto.SRQLimitEvent{H: h}, nil)
	default:
		s.event(attachproto.EvQPError, attachproto.QPErrorEvent{H: h, Cause: e.cause}, nil)
	}
}

// longAgo is a deadline that has passed.
var longAgo = time.Unix(1, 0)

// add gives obj a handle.
func (s *session) add(obj any) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return 0, nic.ErrClosed
	}
	if err := s.acct.Charge(quota.Of(quota.Objects, 1)); err != nil {
		return 0, err
	}
	if h, ok := obj.(*hostedQP); ok {
		if err := s.addQPLocked(h); err != nil {
			s.acct.Release(quota.Of(quota.Objects, 1))
			return 0, err
		}
	}
	for {
		s.next++
		if _, used := s.objects[s.next]; s.next != 0 && !used {
			break
		}
	}
	s.objects[s.next] = obj
	return s.next, nil
}

// remove forgets handle h.
func (s *session) remove(h uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[h]
	if !ok {
		return
	}
	if q, ok := obj.(*hostedQP); ok {
		s.removeQPLocked(q)
	}
	delete(s.objects, h)
	s.acct.Release(quota.Of(quota.Objects, 1))
}

// forget forgets obj, whatever its handle.
func (s *session) forget(obj any) {
	s.mu.Lock()
	var h uint32
	for k, v := range s.objects {
		if v == obj {
			h = k
		}
	}
	s.mu.Unlock()
	if h != 0 {
		s.remove(h)
	}
}

// lookup returns the process's object of type T with handle h.
func lookup[T any](s *session, h uint32) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[h].(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("no %s with handle %d: %w", kindName(zero), h, nic.ErrInvalid)
	}
	return obj, nil
}

// kindName names the kind of a process's object for its errors.
func kindName(obj any) string {
	switch obj.(type) {
	case *nic.PD:
		return "PD"
	case *hostedMR:
		return "memory region"
	case *hostedQP:
		return "QP"
	case *hostedCQ:
		return "CQ"
	case *hostedSRQ:
		return "SRQ"
	case *hostedListener:
		return "listener"
	case *nic.MW:
		return "memory window"
	case *hostedRequest:
		return "unanswered connection request"
	case *hostedConn:
		return "connection"
	}
	return fmt.Sprintf("%T", obj)
}

// byHandle reads a request's handle argument and returns the process's
// object of type T it names, and the handle.
func byHandle[T any](s *session, raw json.RawMessage) (T, uint32, error) {
	a, err := args[attachproto.HandleArgs](raw)
	if err != nil {
		var zero T
		return zero, 0, err
	}
	obj, err := lookup[T](s, a.H)
	return obj, a.H, err
}

// What the daemon spends for a session and a waiting call, beside what
// their bills count by name: a session's socket buffers (a line of up to
// attachproto.MaxLine) and its two goroutines; a call's goroutine, and the one
// an accept leaves to finish the handshake.
const (
	sessionHeap = 128 << 10
	waitHeap    = 16 << 10
)

// sessionBill is what a session holds: its socket, its doorbell's two
// eventfds (the process's and the daemon's own), the epoll fd that waits
// for them and the duplicate its goroutine waits on, the doorbell page,
// and its heap.
var sessionBill = quota.Of(quota.Sessions, 1).Plus(quota.Descriptors, 5).Plus(quota.Mappings, 1).
	Plus(quota.Memory, shm.DoorbellSize).Plus(quota.Heap, sessionHeap)

// waitBill is what a call waiting for the network holds; watchBill the
// goroutine that watches a connection for its end.
var (
	waitBill  = quota.Of(quota.Waits, 1).Plus(quota.Heap, waitHeap)
	watchBill = quota.Of(quota.Heap, waitHeap)
)

// ringBill is what a ring of n slots of size bytes costs: its memory and
// its mapping.
func ringBill(n, size int) quota.Bill { return mappingBill(shm.RingSize(n, size)) }

// mappingBill is what mapping n bytes of a process's memory costs.
func mappingBill(n int) quota.Bill {
	return quota.Of(quota.Memory, int64(n)).Plus(quota.Mappings, 1)
}

// describe returns what the process owns.
func (s *session) describe() Process {
	p := Process{PID: s.pid, UID: s.uid, Since: s.since, Connected: map[uint32]time.Time{}}
	s.mu.Lock()
	for _, obj := range s.objects {
		switch o := obj.(type) {
		case *nic.PD:
			p.PDs = append(p.PDs, o.Handle())
		case *hostedQP:
			p.QPs = append(p.QPs, o.pub)
		case *hostedConn:
			p.Connected[o.qp.q.Num()] = o.since
		}
	}
	s.mu.Unlock()
	slices.Sort(p.PDs)
	slices.SortFunc(p.QPs, func(a, b *nic.QP) int { return cmp.Compare(a.Num(), b.Num()) })
	for i := range s.cnt {
		p.Counters = append(p.Counters, nic.CounterValue{Name: sessionCounterNames[i], Value: s.cnt[i].Load()})
	}
	return p
}

// cleanup destroys everything the process made, once it has detached.
func (s *session) cleanup() {
	s.cancel()
	s.mu.Lock()
	s.dead = true
	for _, cancel := range s.calls {
		cancel()
	}
	var (
		listeners []*hostedListener
		requests  []*hostedRequest
		conns     []*hostedConn
		qps       []*hostedQP
		queues    []interface{ close() }
		regions   []*hostedMR
		windows   []*nic.MW
		pds       []*nic.PD
	)
	for _, obj := range s.objects {
		switch o := obj.(type) {
		case *hostedListener:
			listeners = append(listeners, o)
		case *hostedRequest:
			requests = append(requests, o)
		case *hostedConn:
			conns = append(conns, o)
		case *hostedQP:
			qps = append(qps, o)
		case *hostedCQ:
			queues = append(queues, o)
		case *hostedSRQ:
			queues = append(queues, o)
		case *hostedMR:
			regions = append(regions, o)
		case *nic.MW:
			windows = append(windows, o)
		case *nic.PD:
			pds = append(pds, o)
		}
	}
	s.acct.Release(quota.Of(quota.Objects, int64(len(s.objects))))
	s.objects = nil
	s.slots = nil
	s.byQPN = nil
	s.snapQPs()
	s.mu.Unlock()
	s.callWG.Wait()

	// Requests taken from listeners but not answered are rejected, then
	// the listeners closed (their backlogs are rejected), then connections
	// (a DREQ each; the wait for the DREP goes on in the background), then
	// the other QPs and every ring, then windows, regions and PDs. Each QP
	// first takes what is still in its rings and flushes it all while the
	// completion rings are mapped, as an embedded device's Close does.
	for _, r := range requests {
		abandon(r.r, mad.RejectConsumer)
	}
	for _, l := range listeners {
		l.close(s)
	}
	for _, c := range conns {
		c.qp.takePosted()
		c.qp.q.Halt()
		background(func() {
			c.c.Close()
			c.qp.close() // the QP is destroyed: its bill is released
		})
	}
	for _, h := range qps {
		if h.conn != nil && h.connOwns {
			h.unmap()
			continue
		}
		h.takePosted()
		h.pub.Destroy()
		h.close()
	}
	for _, q := range queues {
		q.close()
	}
	for _, w := range windows {
		w.Dealloc()
	}
	for _, m := range regions {
		s.deregister(m)
	}
	for _, pd := range pds {
		if err := pd.Dealloc(); err != nil {
			select {
			case <-s.dev.Done(): // its PDs went with the device
			default:
				s.log.Warn("detach: PD", slog.Any("error", err))
			}
		}
	}
	s.bell.stop()
	<-s.bellDone
	s.srv.mu.Lock()
	delete(s.srv.sessions, s)
	s.srv.republish()
	s.srv.mu.Unlock()
	s.pollMu.Lock() // a busy-polling reader is done with the doorbell page
	s.unpolled = true
	s.pollMu.Unlock()
	s.bell.close()
	s.acct.Release(sessionBill)
	s.acct.Close()
	s.log.Info("process detached: its resources destroyed",
		slog.Int("connections", len(conns)), slog.Int("qps", len(qps)), slog.Int("regions", len(regions)))
}

// handle carries out one request. Calls that wait for the network run on
// goroutines of their own and answer when done.
func (s *session) handle(m *attachproto.Msg, fds []int) {
	op, ok := sessionOps[m.Op]
	switch {
	case m.Op == attachproto.OpCancel:
		var a attachproto.CancelArgs
		if json.Unmarshal(m.Args, &a) == nil {
			s.mu.Lock()
			if cancel := s.calls[a.Target]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
		}
		shm.CloseFDs(fds)
		return
	case !ok:
		shm.CloseFDs(fds)
		s.reply(m.ID, nil, nil, fmt.Errorf("unknown operation %q: %w", m.Op, nic.ErrInvalid))
		return
	case len(fds) != op.fds:
		shm.CloseFDs(fds)
		s.reply(m.ID, nil, nil, fmt.Errorf("%s takes %d descriptors, not %d: %w", m.Op, op.fds, len(fds), nic.ErrInvalid))
		return
	}
	if !attachproto.WaitsForNetwork(m.Op) {
		res, out, err := op.run(s, s.ctx, m.Args, fds)
		s.answer(m.ID, res, out, err)
		return
	}
	if err := s.acct.Charge(waitBill); err != nil {
		shm.CloseFDs(fds)
		s.reply(m.ID, nil, nil, err)
		return
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.calls[m.ID] = cancel
	s.callWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.callWG.Done()
		defer s.acct.Release(waitBill)
		res, out, err := op.run(s, ctx, m.Args, fds)
		s.mu.Lock()
		delete(s.calls, m.ID)
		s.mu.Unlock()
		cancel()
		s.answer(m.ID, res, out, err)
	}()
}

// answer replies to a call and closes the daemon's copies of the
// descriptors it sent; then it starts what res waits to start until the
// process has the answer.
func (s *session) answer(id uint64, res any, fds []int, err error) {
	s.reply(id, res, fds, err)
	shm.CloseFDs(fds)
	if then, ok := res.(answeredHook); ok && err == nil {
		then.answered()
	}
}

// answeredHook is a result with something to start once the process has
// it, such as a watcher whose events must not overtake the answer.
type answeredHook interface{ answered() }

// sessionOp is one operation of the protocol: how many descriptors its
// request carries and what it does.
type sessionOp struct {
	fds int
	run func(s *session, ctx context.Context, args json.RawMessage, fds []int) (res any, out []int, err error)
}

var sessionOps = map[string]sessionOp{
	attachproto.OpAllocPD:       {run: (*session).allocPD},
	attachproto.OpDeallocPD:     {run: (*session).deallocPD},
	attachproto.OpAllocMR:       {fds: 1, run: (*session).allocMR},
	attachproto.OpRegMR:         {run: (*session).regMR},
	attachproto.OpRegShared:     {fds: 1, run: (*session).regShared},
	attachproto.OpDeregMR:       {run: (*session).deregMR},
	attachproto.OpReregMR:       {run: (*session).reregMR},
	attachproto.OpPrefetchMR:    {run: (*session).prefetchMR},
	attachproto.OpCreateCQ:      {run: (*session).createCQ},
	attachproto.OpCreateSRQ:     {run: (*session).createSRQ},
	attachproto.OpCreateQP:      {run: (*session).createQP},
	attachproto.OpModifyQP:      {run: (*session).modifyQP},
	attachproto.OpQueryQP:       {run: (*session).queryQP},
	attachproto.OpAttachMcast:   {run: (*session).attachMcast},
	attachproto.OpDetachMcast:   {run: (*session).detachMcast},
	attachproto.OpDestroyQP:     {run: (*session).destroyQP},
	attachproto.OpDestroyCQ:     {run: (*session).destroyCQ},
	attachproto.OpDestroySRQ:    {run: (*session).destroySRQ},
	attachproto.OpResizeCQ:      {run: (*session).resizeCQ},
	attachproto.OpModifySRQ:     {run: (*session).modifySRQ},
	attachproto.OpQuerySRQ:      {run: (*session).querySRQ},
	attachproto.OpAllocMW:       {run: (*session).allocMW},
	attachproto.OpDeallocMW:     {run: (*session).deallocMW},
	attachproto.OpCounters:      {run: (*session).counters},
	attachproto.OpListen:        {run: (*session).listen},
	attachproto.OpCloseListener: {run: (*session).closeListener},
	attachproto.OpOpenListener:  {run: (*session).openListener},
	attachproto.OpReject:        {run: (*session).reject},
	attachproto.OpAcceptRequest: {run: (*session).acceptRequest},
	attachproto.OpAccept:        {run: (*session).accept},
	attachproto.OpDial:          {run: (*session).dial},
	attachproto.OpDisconnect:    {run: (*session).disconnect},
	attachproto.OpListenUD:      {run: (*session).listenUD},
	attachproto.OpAcceptUD:      {run: (*session).acceptUD},
	attachproto.OpResolve:       {run: (*session).resolve},
	attachproto.OpEstablish:     {run: (*session).establish},
}

// args decodes a request's arguments.
func args[T any](raw json.RawMessage) (T, error) {
	var a T
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, fmt.Errorf("arguments: %v: %w", err, nic.ErrInvalid)
	}
	return a, nil
}
