// Package attached is nic's attached provider: a device of a softnic
// daemon's that the process shares with the other processes of its host
// (nic.Config.Attach). It owns the process's session with the daemon (the
// calls over the control socket and their answers, the daemon's events),
// the memory the two share (the rings of the process's CQs, SRQs and QPs,
// its regions' memfds, the doorbell page) and what the process knows of
// the objects the daemon makes for it, each named by a handle. It
// implements the interfaces of package nic/internal/provider over objects
// of its own, which package nic wraps in its public types; nic dials the
// daemon (nic.DialControl) and hands Open the connection. The daemon's
// side is package nic/attachd, and the protocol between them package
// nic/internal/attachproto.
package attached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/internal/spin"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/verbs"
)

// attachment is the attached provider: an attached device's session with
// its daemon, the control socket, the calls waiting for an answer, and the
// shared memory the process maps (rings, regions, the doorbell page).
type attachment struct {
	up      provider.Up
	t       *shm.Conn
	path    string
	hello   attachproto.Hello
	attr    verbs.DeviceAttr // hello's
	log     *slog.Logger
	closing chan struct{} // closed when the session ends
	// waitSpin is how long a CQ waiter watches its ring before it sleeps
	// (nic.Config.WaitSpin; not positive: it never spins).
	waitSpin time.Duration
	// answering is the spinning of calls the daemon answers at once (see
	// call); it never spins where waitSpin is not positive.
	answering *spin.Policy

	// The doorbell is rung under bellMu's read lock and closed under its
	// write lock, so that a post racing Close never touches the unmapped
	// page or a closed (perhaps reused) descriptor.
	bellMu   sync.RWMutex
	bellFD   int            // the daemon's doorbell eventfd
	bellMap  *shm.Mapping   // the doorbell page
	bell     shm.Doorbell   // in it
	needWake *atomic.Uint32 // in it; nil once it is unmapped

	mu     sync.Mutex
	nextID uint64
	calls  map[uint64]chan attachReply
	ended  atomic.Bool // the session is over: calls and posts fail with ErrClosed (set under mu)
	conns  map[uint32]*attachedConn
	// unknownEnds holds why connections ended that the process does not
	// know yet: the daemon's news of an end can overtake the answer naming
	// the connection on its way to the caller (never the answer itself).
	unknownEnds map[uint32]error
	qps         map[*attachedQP]struct{}
	cqs         map[*attachedCQ]struct{}
	srqs        map[*attachedSRQ]struct{}
	mrs         map[*attachedMR]struct{} // for lookups by address
	mws         map[uint32]*attachedMW   // by the index of their keys, for binds posted
	bufs        map[*sharedBuf]struct{}

	endOnce   sync.Once
	closeOnce sync.Once
	detaching atomic.Bool    // close ended the session: the daemon's EOF is expected
	wg        sync.WaitGroup // the reader
}

type attachReply struct {
	m   attachproto.Msg
	fds []int
}

// Open opens the session with the daemon whose control socket is path,
// over c, connected to it, and starts reading the daemon's answers and
// events; up is the device it is the provider of. Its CQ waiters watch
// their rings for waitSpin before they sleep (see attachedCQ.Park); a
// waitSpin that is not positive sleeps at once.
func Open(c *net.UnixConn, path string, log *slog.Logger, waitSpin time.Duration, up provider.Up) (provider.Device, error) {
	t := shm.NewConn(c, attachproto.MaxLine)
	hello, fds, err := handshake(t)
	if err == nil && len(fds) != 2 {
		err = fmt.Errorf("the daemon sent %d descriptors with its answer, want 2: %w", len(fds), shm.ErrProtocol)
	}
	var attr verbs.DeviceAttr
	if err == nil && len(hello.Attr) > 0 {
		err = json.Unmarshal(hello.Attr, &attr)
	}
	var page *shm.Mapping
	if err == nil {
		page, err = shm.Map(fds[1], shm.DoorbellSize)
		fds = fds[:1]
	}
	if err != nil {
		shm.CloseFDs(fds)
		t.Close()
		return nil, err
	}
	bell, _ := shm.NewDoorbell(page.Bytes())
	a := &attachment{
		up: up, t: t, path: path, hello: hello, attr: attr, log: log, closing: make(chan struct{}), waitSpin: waitSpin,
		answering: spin.NewPolicy(answerSpin(waitSpin)), bellFD: fds[0], bellMap: page, bell: bell, needWake: bell.NeedWake(),
		calls: make(map[uint64]chan attachReply), conns: make(map[uint32]*attachedConn), unknownEnds: make(map[uint32]error),
		qps: make(map[*attachedQP]struct{}), cqs: make(map[*attachedCQ]struct{}),
		srqs: make(map[*attachedSRQ]struct{}), mrs: make(map[*attachedMR]struct{}), bufs: make(map[*sharedBuf]struct{}),
		mws: make(map[uint32]*attachedMW),
	}
	a.wg.Add(1)
	go a.readLoop()
	a.log.Info("softnic device attached", slog.String("control", path), slog.Any("addr", hello.Addr),
		slog.Int("mtu", hello.MTU), slog.Int("daemon_pid", hello.PID))
	return a, nil
}

// handshakeWait bounds the wait for the daemon's answer to the attach
// line.
const handshakeWait = 10 * time.Second

// handshake sends the attach line and reads the daemon's answer: its
// hello, and the descriptors that came with it. A daemon of another
// protocol version, which refuses the line or states another version in
// its hello, fails it with a *attachproto.VersionError; one of a release
// before versions either states none or, reading the line for one it
// knows, closes the connection.
func handshake(t *shm.Conn) (attachproto.Hello, []int, error) {
	var hello attachproto.Hello
	if err := t.Send(attachproto.AttachLine(attachproto.Version), nil); err != nil {
		return hello, nil, err
	}
	t.Unix().SetReadDeadline(time.Now().Add(handshakeWait))
	defer t.Unix().SetReadDeadline(time.Time{})
	line, err := t.ReadLine()
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return hello, nil, fmt.Errorf("the daemon closed the connection without answering the attach request, as one of a release "+
			"before attach protocol versions does (this library speaks version %d; use a library and a daemon of one release): %w", attachproto.Version, err)
	}
	if err != nil {
		return hello, nil, fmt.Errorf("no answer to the attach request: %w", err)
	}
	var m attachproto.Msg
	if err := json.Unmarshal(line, &m); err != nil {
		return hello, nil, fmt.Errorf("answer %q: %v: %w", line, err, shm.ErrProtocol)
	}
	fds, err := t.TakeFDs(m.FDs)
	if err != nil {
		return hello, nil, err
	}
	err = m.Err()
	var ver *attachproto.VersionError
	if errors.As(err, &ver) {
		err = &attachproto.VersionError{Daemon: ver.Daemon, Client: attachproto.Version}
	}
	if err == nil {
		if err = json.Unmarshal(m.Result, &hello); err != nil {
			err = fmt.Errorf("answer %q: %v: %w", line, err, shm.ErrProtocol)
		}
	}
	if err == nil {
		err = attachproto.CheckVersion(hello.Version, attachproto.Version)
	}
	if err != nil {
		shm.CloseFDs(fds)
		return hello, nil, err
	}
	return hello, fds, nil
}

// readLoop reads the daemon's replies and events until the session ends.
func (a *attachment) readLoop() {
	defer a.wg.Done()
	var err error
	for {
		var line []byte
		if line, err = a.t.ReadLine(); err != nil {
			break
		}
		var m attachproto.Msg
		if err = json.Unmarshal(line, &m); err != nil {
			break
		}
		var fds []int
		if fds, err = a.t.TakeFDs(m.FDs); err != nil {
			break
		}
		if m.ID != 0 {
			a.mu.Lock()
			ch := a.calls[m.ID]
			delete(a.calls, m.ID)
			a.mu.Unlock()
			if ch == nil {
				shm.CloseFDs(fds)
				continue
			}
			ch <- attachReply{m, fds}
			continue
		}
		shm.CloseFDs(fds)
		switch m.Op {
		case attachproto.EvConnEnded:
			a.connEnded(&m)
		case attachproto.EvQPError:
			a.qpError(&m)
		case attachproto.EvSRQLimit:
			a.srqLimit(&m)
		}
	}
	a.t.DropFDs()
	a.end(err)
}

// end ends the session: waiting calls fail, waiters on the device see it
// closed, and connections end with ErrClosed.
func (a *attachment) end(why error) {
	a.endOnce.Do(func() {
		a.mu.Lock()
		a.ended.Store(true)
		calls := a.calls
		a.calls = make(map[uint64]chan attachReply)
		var m attachproto.Msg
		m.SetError(fmt.Errorf("softnic: the session with the daemon at %s ended: %w", a.path, cm.ErrClosed))
		for _, ch := range calls {
			ch <- attachReply{m: m}
		}
		for _, c := range a.conns {
			c.endLocked(cm.ErrClosed)
		}
		cqs := slices.Collect(maps.Keys(a.cqs))
		a.mu.Unlock()
		close(a.closing)
		for _, c := range cqs {
			c.interrupt()
		}
		switch {
		case a.detaching.Load() && errors.Is(why, os.ErrDeadlineExceeded):
			a.log.Warn("softnic: the daemon did not finish the detach in time: completions of the flushed work requests may be missing",
				slog.String("control", a.path), slog.Duration("waited", detachWait))
		case why != nil && !errors.Is(why, net.ErrClosed) && !(a.detaching.Load() && errors.Is(why, io.EOF)):
			a.log.Warn("softnic: the daemon went away", slog.String("control", a.path), slog.Any("error", why))
		}
	})
}

// Close detaches: the daemon destroys everything the process made, and
// the shared memory is unmapped here.
func (a *attachment) Close() error {
	a.closeOnce.Do(func() {
		a.detach()
		a.mu.Lock()
		qps, cqs, srqs, bufs := a.qps, a.cqs, a.srqs, a.bufs
		a.qps, a.cqs, a.srqs, a.bufs, a.mrs = nil, nil, nil, nil, nil
		a.mu.Unlock()
		for q := range qps {
			q.close()
		}
		for c := range cqs {
			c.close(true)
		}
		for s := range srqs {
			s.close()
		}
		for b := range bufs {
			b.m.Close()
		}
		a.bellMu.Lock()
		a.needWake = nil
		shm.CloseFDs([]int{a.bellFD})
		a.bellMap.Close()
		a.bellMu.Unlock()
		a.log.Info("softnic device detached", slog.String("control", a.path))
	})
	return nil
}

// detachWait bounds how long Close waits for the daemon to destroy what the
// process made; a daemon that takes longer (stopped, or hung) is cut off.
var detachWait = 5 * time.Second

// detach ends the session as an embedded device's Close ends its work:
// posting stops (a post under way finishes first, so the daemon finds it
// in the ring), the socket's sending side shuts, and the daemon, reading
// its end, destroys everything the process made, flushing the QPs' work
// requests into the completion rings, then closes the socket. The rings
// are still mapped here, so that close keeps those completions.
func (a *attachment) detach() {
	a.mu.Lock()
	a.ended.Store(true)
	qps := slices.Collect(maps.Keys(a.qps))
	a.mu.Unlock()
	for _, q := range qps {
		q.settle()
	}
	a.detaching.Store(true)
	if a.t.Unix().CloseWrite() == nil {
		a.t.Unix().SetReadDeadline(time.Now().Add(detachWait))
	} else {
		a.t.Close() // no daemon to wait for: the reader ends now
	}
	a.wg.Wait() // the reader has read the daemon's end, or given up
	a.t.Close()
}

// call sends a request and waits for its answer, decoded into res; it
// returns the descriptors that came with the answer, no more than the
// request's answer carries (answerFDs). A cancelled ctx cancels the
// request at the daemon, and the call returns once the daemon answers (it
// answers every request).
func (a *attachment) call(ctx context.Context, op string, args any, fds []int, res any) ([]int, error) {
	m := attachproto.Msg{Op: op, FDs: len(fds)}
	if args != nil {
		var err error
		if m.Args, err = json.Marshal(args); err != nil {
			return nil, fmt.Errorf("softnic: %s: %v: %w", op, err, mr.ErrInvalid)
		}
	}
	ch := make(chan attachReply, 1)
	a.mu.Lock()
	if a.ended.Load() {
		a.mu.Unlock()
		return nil, cm.ErrClosed
	}
	a.nextID++
	m.ID = a.nextID
	a.calls[m.ID] = ch
	a.mu.Unlock()
	line, _ := json.Marshal(&m)
	if err := a.t.Send(line, fds); err != nil {
		a.mu.Lock()
		delete(a.calls, m.ID)
		a.mu.Unlock()
		return nil, fmt.Errorf("softnic: %s: %v: %w", op, err, cm.ErrClosed)
	}
	r, found, spun := a.spinFor(op, ch)
	if !found {
		start := time.Now()
		select {
		case r = <-ch:
		case <-ctx.Done():
			cancel, _ := json.Marshal(&attachproto.Msg{Op: attachproto.OpCancel, Args: mustJSON(attachproto.CancelArgs{Target: m.ID})})
			a.t.Send(cancel, nil)
			r = <-ch
		}
		if !attachproto.WaitsForNetwork(op) {
			a.answering.Slept(time.Since(start), spun)
		}
	}
	if n := answerFDs[op]; len(r.fds) > n {
		shm.CloseFDs(r.fds[n:])
		r.fds = r.fds[:n]
	}
	if err := r.m.Err(); err != nil {
		shm.CloseFDs(r.fds)
		return nil, err
	}
	if res != nil {
		if err := json.Unmarshal(r.m.Result, res); err != nil {
			shm.CloseFDs(r.fds)
			return nil, fmt.Errorf("softnic: %s: answer: %v: %w", op, err, shm.ErrProtocol)
		}
	}
	return r.fds, nil
}

// answerFDs is how many descriptors the answer to each request carries at
// most: a CQ's ring and wakeup, a QP's or SRQ's rings. call closes any
// more, which no caller would.
var answerFDs = map[string]int{attachproto.OpCreateCQ: 2, attachproto.OpCreateSRQ: 1, attachproto.OpCreateQP: 2, attachproto.OpAccept: 2, attachproto.OpDial: 2,
	attachproto.OpResizeCQ: 1, attachproto.OpModifySRQ: 1}

// answerSpin is how long a call the daemon answers at once watches for
// its answer before it sleeps, given the device's nic.Config.WaitSpin: a
// few of the answers' round trips, which take about 40 µs between two
// processes on loopback. Asleep, the caller waits for one more thread
// wakeup, its own, after the reader's: through libsoftnic, ibv_alloc_pd
// took 96.6 µs that way against 25.1 watching (regcost); a program's set-up (its PDs, regions, CQs, QPs and their modifications)
// is a run of such calls. The reader needs a P of its own meanwhile: with
// GOMAXPROCS 1 calls never spin.
func answerSpin(waitSpin time.Duration) time.Duration {
	if waitSpin <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return 0
	}
	return answerBudget
}

// answerBudget is answerSpin's budget where calls spin (a variable for the
// tests).
var answerBudget = 200 * time.Microsecond

// spinFor watches ch for the answer to a call of op for the budget the
// answering policy gives, yielding the CPU between looks to the daemon
// and the reader, unless op waits for the network. found reports whether
// the answer came, spun whether it was given a budget.
func (a *attachment) spinFor(op string, ch chan attachReply) (r attachReply, found, spun bool) {
	if attachproto.WaitsForNetwork(op) {
		return r, false, false
	}
	budget := a.answering.Budget()
	if budget == 0 {
		return r, false, false
	}
	for end := time.Now().Add(budget); ; {
		select {
		case r = <-ch:
			a.answering.Spun(true)
			return r, true, true
		default:
		}
		if time.Now().After(end) {
			a.answering.Spun(false)
			return r, false, true
		}
		shm.Yield()
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// ringDoorbell tells the daemon that the QP of doorbell slot slot has new
// work requests, and wakes it if it sleeps: posts that find it awake cost
// no system call. Once the device is closed it does nothing.
func (a *attachment) ringDoorbell(slot uint32) {
	a.bellMu.RLock()
	defer a.bellMu.RUnlock()
	if a.needWake == nil {
		return
	}
	a.bell.Mark(slot)
	if a.needWake.Load() != 0 && a.needWake.Swap(0) != 0 {
		shm.Signal(a.bellFD)
	}
}

func (a *attachment) Addr() netip.AddrPort   { return a.hello.Addr }
func (a *attachment) MTU() int               { return a.hello.MTU }
func (a *attachment) Done() <-chan struct{}  { return a.closing }
func (a *attachment) Features() udp.Features { return a.hello.Features }

// PathMTU is the daemon's MTU: the daemon picks the path MTU of the
// connections it makes.
func (a *attachment) PathMTU(netip.AddrPort) int { return a.hello.MTU }

// Query is what the daemon said in its hello.
func (a *attachment) Query() verbs.DeviceAttr { return a.attr }

func (a *attachment) Counters() []verbs.CounterValue {
	var cs []verbs.CounterValue
	if _, err := a.call(context.Background(), attachproto.OpCounters, nil, nil, &cs); err != nil {
		return nil
	}
	return cs
}

// qpArgs describes cfg to the daemon, its CQs and SRQ by handle.
func qpArgs(cfg *provider.QPConfig) attachproto.QPConfig {
	a := attachproto.QPConfig{
		Type: cfg.Type, MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
	}
	a.SendCQ, a.RecvCQ, a.SRQ = daemonHandle(cfg.SendCQ), daemonHandle(cfg.RecvCQ), daemonHandle(cfg.SRQ)
	return a
}
