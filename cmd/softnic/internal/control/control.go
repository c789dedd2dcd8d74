// Package control is the control protocol of softnic serve, both sides:
// the Server the daemon answers on its unix socket and Call, the client
// of the inspecting commands (info, stat, mr, qp), with the results they
// exchange (Info, Counters, RegionRow, QPRow).
//
// A client connects to the daemon's unix socket, writes one JSON request
// on a line, {"cmd":"stat"}, and reads one JSON reply on a line,
// {"result":...} or {"error":"..."}; then the daemon closes the
// connection. The commands are info, stat, mr and qp; their results are
// Info, Counters, []RegionRow and []QPRow. The command attach is a process
// attaching to the device (nic.Config.Attach): the connection then carries
// the attach protocol of package nic for as long as the process stays
// attached. What the commands answer is the daemon's business (Server's
// Handle); this package owns the framing, its bounds and its timeouts.
package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/metrics"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/attachd"
	"github.com/softnic/softnic/nic/quota"
)

// Request is what a client sends, on one line.
type Request struct {
	Cmd string `json:"cmd"`
}

// Reply is the daemon's answer, on one line.
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Code names the errno of a refusal (EACCES), as the attach
	// protocol's errors do, for a process that sent attach.
	Code string `json:"code,omitempty"`
}

// Timeout bounds one request on either side: a stuck peer never
// holds a daemon goroutine or a client for longer.
const Timeout = 5 * time.Second

// RequestMax bounds what the daemon reads of a request.
const RequestMax = 4096

// Pending bounds the connections the daemon answers at once
// (attach sessions, limited by their quota, aside): a flood of
// connections that send nothing waits in the socket's backlog, in the
// kernel, rather than holding the daemon's descriptors and goroutines.
const Pending = 256

// PerProcess and PerUser bound the connections of one process and of one
// user whose request the daemon awaits at once: the next is refused
// (EAGAIN) and counted, so that one process's silent connections cannot
// take all Pending of them from the others, nor one user's from other
// users. A client sends its request as soon as it connects, so only a
// flood, or a stuck client, keeps many waiting.
const (
	PerProcess = 16
	PerUser    = Pending / 4
)

// AcceptRate, AcceptBurst and Backlog pace the daemon's accepts: at most
// AcceptBurst at once and AcceptRate a second beyond, the connections
// that come faster waiting in the socket's backlog of Backlog. A flood
// of connections (a process connecting and closing as fast as it can)
// then costs the daemon at most AcceptRate accepts a second, rather than
// as much CPU as the flooder spends: accepting, telling who connected and
// closing cost the daemon about what connecting costs the flooder. A
// client meanwhile waits its turn in the kernel (nic.DialControl connects
// blocking, and the kernel lets the processes waiting for room in the
// backlog in one at a time, in order), and then about Backlog/AcceptRate
// (26 ms) behind the connections queued before it.
const (
	AcceptRate  = 5000
	AcceptBurst = 64
	Backlog     = 128
)

// paceBatch is how many accepts the accept loop waits for at once when
// connections come faster than AcceptRate: a flood wakes it once per
// batch, not per connection.
const paceBatch = 32

// Info is the result of info.
type Info struct {
	Version     string    `json:"version"`
	PID         int       `json:"pid"`
	Started     time.Time `json:"started"`
	Listen      string    `json:"listen"`
	CMPort      uint16    `json:"cm_port"`
	MTU         int       `json:"mtu"`
	UDP         string    `json:"udp"`  // socket offloads and buffer sizes
	ICRC        string    `json:"icrc"` // how the ICRC of rxe's packets is checked
	Control     string    `json:"control"`
	Pcap        string    `json:"pcap,omitempty"`
	Faults      string    `json:"faults,omitempty"`
	BusyPoll    string    `json:"busy_poll,omitempty"` // --busy-poll, if set
	Regions     int       `json:"regions"`
	Connections int       `json:"connections"`
	Attached    int       `json:"attached"`         // processes attached to the device
	RecvBuffers int       `json:"recv_buffers"`     // receive WRs kept posted for SENDs
	RecvBufSize int       `json:"recv_buffer_size"` // bytes each
}

// RegionRow is one region of mr's result.
type RegionRow struct {
	Name    string `json:"name"`
	LKey    uint32 `json:"lkey"`
	RKey    uint32 `json:"rkey"`
	PD      uint32 `json:"pd"`
	Access  string `json:"access"`       // remote access letters, as --region takes them
	Flags   string `json:"access_flags"` // every IBV_ACCESS_ flag
	Addr    uint64 `json:"addr"`
	Len     uint64 `json:"len"`
	Kind    string `json:"kind"` // caller, arena or implicit-odp
	ODP     bool   `json:"odp"`  // on-demand paging: the residency fields mean something
	Pages   uint64 `json:"resident_pages"`
	Faults  uint64 `json:"odp_faults"`
	Windows int    `json:"windows"` // memory windows bound to it
	PID     int    `json:"pid"`     // the process that owns it: the daemon, or an attached process
}

// QPRow is one connected QP of qp's result.
type QPRow struct {
	QPN         uint32    `json:"qpn"`
	Type        string    `json:"type"`
	State       string    `json:"state"`
	Peer        string    `json:"peer"`
	PeerQPN     uint32    `json:"peer_qpn"`
	MTU         int       `json:"mtu"`
	SendPSN     uint32    `json:"send_psn"`
	AckedPSN    uint32    `json:"acked_psn"`
	ExpectedPSN uint32    `json:"expected_psn"`
	MSN         uint32    `json:"msn"`
	SendQueued  int       `json:"send_queued"`
	Since       time.Time `json:"connected"` // zero for a QP the connection manager did not connect
	PID         int       `json:"pid"`       // the process that owns it: the daemon, or an attached process
}

// Counter is one named counter of stat's result.
type Counter struct {
	Name  string
	Value uint64
}

// Counters is stat's result: a JSON object of counter names and values
// in the daemon's order (rxe's names first, then the drop reasons), so that
// both `jq .sent_pkts` and the table read it.
type Counters []Counter

func (l Counters) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, c := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, c.Name)
		b = append(b, ':')
		b = strconv.AppendUint(b, c.Value, 10)
	}
	return append(b, '}'), nil
}

func (l *Counters) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("counters: want a JSON object")
	}
	*l = (*l)[:0]
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var v uint64
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("counter %v: %w", t, err)
		}
		*l = append(*l, Counter{Name: t.(string), Value: v})
	}
	return nil
}

// Server answers control requests on a unix socket with Handle.
type Server struct {
	Listener net.Listener
	// Cred tells who is at the other end of the connection fd, for
	// PerProcess and PerUser, as it is accepted: SO_PEERCRED if nil.
	Cred func(fd int) (nic.PeerCred, error)
	// Admit tells who connected, or refuses them, before anything is read.
	Admit func(c *net.UnixConn) (nic.PeerCred, error)
	// Handle answers the command cmd of peer with a result to marshal.
	Handle func(cmd string, peer nic.PeerCred) (any, error)
	// Attach serves a process that sent the attach command, line (which
	// names the version of the attach protocol the process speaks), until
	// it detaches; nil: attach is a command like the others, for Handle.
	Attach func(c *net.UnixConn, line []byte)
	// Accepts carries the accept loop through a process out of
	// descriptors, and counts (Accepts.Errors) and logs it: the caller
	// sets its Log and What.
	Accepts quota.Backoff

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
	// pending holds a token for each connection being answered;
	// deferred counts the accepts that waited for one, busy the
	// connections refused for PerUser.
	pending  chan struct{}
	deferred atomic.Uint64
	busy     atomic.Uint64
	// pace paces the accepts; silent counts the connections closed
	// without a word by the time they were accepted.
	pace   quota.Pacer
	silent atomic.Uint64

	mu      sync.Mutex
	closed  bool
	lfile   *os.File                       // the listener's descriptor as take waits on it, where it does (Linux)
	reading map[*net.UnixConn]nic.PeerCred // connections whose request is awaited, and who connected
	users   map[int]int                    // how many of reading each uid has
	procs   map[int]int                    // and each process
}

// Deferred counts the accepts that waited for one of the Pending
// connections being answered to end.
func (s *Server) Deferred() uint64 { return s.deferred.Load() }

// Busy counts the connections refused because their process or user had
// PerProcess or PerUser connections waiting to send their request.
func (s *Server) Busy() uint64 { return s.busy.Load() }

// Paced counts the times the accept loop waited for AcceptRate:
// connections came faster.
func (s *Server) Paced() uint64 { return s.pace.Paced() }

// Silent counts the connections whose client had closed without a word
// by the time they were accepted: closed at once, before anything else.
func (s *Server) Silent() uint64 { return s.silent.Load() }

// Start answers requests on a goroutine of its own until Close. It sets
// the socket's backlog to Backlog, where the system allows.
func (s *Server) Start() {
	s.done = make(chan struct{})
	s.pending = make(chan struct{}, Pending)
	if s.Cred == nil {
		s.Cred = peerCred
	}
	s.pace.Rate, s.pace.Burst, s.pace.Batch = AcceptRate, AcceptBurst, paceBatch
	setBacklog(s.Listener, Backlog)
	s.wg.Add(1) // before Close can Wait: the accept loop adds a count per request
	go func() {
		defer s.wg.Done()
		s.serve()
	}()
}

// serve accepts connections until Close, at AcceptRate (take): an error
// that passes, such as EMFILE, is waited out (quota.Backoff), and with
// Pending connections being answered, the next waits for one to end. It tells who
// connected, and refuses a connection beyond PerProcess or PerUser itself
// (take), with no goroutine for it; each other connection is answered on
// a goroutine of its own.
func (s *Server) serve() {
	for {
		select {
		case s.pending <- struct{}{}:
		case <-s.done:
			return
		default:
			s.deferred.Add(1)
			select {
			case s.pending <- struct{}{}:
			case <-s.done:
				return
			}
		}
		c, err := s.take()
		if err != nil {
			return // closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(c)
		}()
	}
}

// release returns the token of a connection answered, or handed to an
// attach session.
func (s *Server) release() {
	if s.pending != nil {
		<-s.pending
	}
}

// busyReply is the reply to a connection refused because its process or
// user has as many connections waiting as they may (busy says which, as
// reserve does), counted.
func (s *Server) busyReply(busy string) []byte {
	s.busy.Add(1)
	b, _ := json.Marshal(&Reply{Code: "EAGAIN", Error: busy + " connections to this daemon that have not sent their request yet: try again"})
	return append(b, '\n')
}

// answer reads one request from c and writes its reply. It reads nothing
// past the request's line: after attach, the process's next messages and
// their descriptors are the attach session's. A client that closes
// without sending a byte gets no reply.
func (s *Server) answer(c *net.UnixConn) {
	attached := false
	defer func() {
		if !attached {
			s.release()
		}
	}()
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(Timeout))
	var req Request
	var reply Reply
	peer, err := s.Admit(c)
	if err != nil {
		reply.Error, reply.Code = err.Error(), "EACCES"
		s.reply(c, &reply)
		s.awaited(c)
		return
	}
	line, err := attachd.ReadControlLine(c, RequestMax)
	s.awaited(c)
	if len(line) == 0 && errors.Is(err, io.EOF) {
		return
	}
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	if err == nil && req.Cmd == "attach" && s.Attach != nil {
		c.SetReadDeadline(time.Time{})
		attached = true
		s.release()
		s.Attach(c, line)
		return
	}
	if err != nil {
		reply.Error = "bad request: " + err.Error()
	} else if res, err := s.Handle(req.Cmd, peer); err != nil {
		reply.Error = err.Error()
	} else if reply.Result, err = json.Marshal(res); err != nil {
		reply.Error = err.Error()
	}
	s.reply(c, &reply)
}

// reply writes r to c. Whatever the client sent past its line (or sent
// at all, when it is refused) is read and dropped before the close: a
// socket closed with bytes unread resets the connection, and the client
// could lose the reply.
func (s *Server) reply(c *net.UnixConn, r *Reply) {
	b, _ := json.Marshal(r)
	c.SetWriteDeadline(time.Now().Add(Timeout))
	c.Write(append(b, '\n'))
	c.CloseWrite()
	io.Copy(io.Discard, io.LimitReader(c, RequestMax))
}

// reserve counts a connection of peer whose request is to be read, unless
// peer's process or user already has as many such connections as they
// may: then it counts nothing and says so in busy ("process 12 has 16").
// ok is false if the server is closed.
func (s *Server) reserve(peer nic.PeerCred) (busy string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return "", false
	case s.procs[peer.PID] >= PerProcess:
		return fmt.Sprintf("process %d has %d", peer.PID, s.procs[peer.PID]), true
	case s.users[peer.UID] >= PerUser:
		return fmt.Sprintf("uid %d has %d", peer.UID, s.users[peer.UID]), true
	}
	if s.users == nil {
		s.users, s.procs = make(map[int]int), make(map[int]int)
	}
	s.users[peer.UID]++
	s.procs[peer.PID]++
	return "", true
}

// unreserve takes back what reserve counted for peer.
func (s *Server) unreserve(peer nic.PeerCred) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreserveLocked(peer)
}

func (s *Server) unreserveLocked(peer nic.PeerCred) {
	if s.users[peer.UID]--; s.users[peer.UID] == 0 {
		delete(s.users, peer.UID)
	}
	if s.procs[peer.PID]--; s.procs[peer.PID] == 0 {
		delete(s.procs, peer.PID)
	}
}

// awaiting records that the request on c, a connection of peer reserved
// for, is being read, so that Close need not wait for a client that sends
// nothing; it returns false, having taken the reservation back, if the
// server is closed.
func (s *Server) awaiting(c *net.UnixConn, peer nic.PeerCred) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.unreserveLocked(peer)
		return false
	}
	if s.reading == nil {
		s.reading = make(map[*net.UnixConn]nic.PeerCred)
	}
	s.reading[c] = peer
	return true
}

// awaited records that the request on c is no longer being read.
func (s *Server) awaited(c *net.UnixConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	peer, ok := s.reading[c]
	if !ok {
		return
	}
	delete(s.reading, c)
	s.unreserveLocked(peer)
}

// Close stops accepting, ends the reads of requests not sent yet, and
// waits for the requests being answered.
func (s *Server) Close() error {
	err := s.Listener.Close()
	s.mu.Lock()
	if !s.closed && s.done != nil {
		close(s.done)
	}
	s.closed = true
	if s.lfile != nil {
		s.lfile.Close()
	}
	for c := range s.reading {
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// ErrNoDaemon says nothing answers on the control socket.
var ErrNoDaemon = errors.New("no softnic daemon answers")

// Call sends cmd to the daemon at path and decodes its result into
// res. A daemon whose socket's backlog is full is waited for
// (nic.DialControl); one busy with connections of the caller's process or
// user that have not sent their request (EAGAIN) is asked again, after
// 1 ms, doubling to 100 ms; both for as long as Timeout allows.
func Call(ctx context.Context, path, cmd string, res any) error {
	if err := CheckDir(path, false); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		reply, err := call(ctx, path, cmd)
		if err != nil {
			return err
		}
		if reply.Code == "EAGAIN" {
			select {
			case <-time.After(wait):
				continue
			case <-ctx.Done():
			}
		}
		if reply.Error != "" {
			return fmt.Errorf("daemon: %s", reply.Error)
		}
		return json.Unmarshal(reply.Result, res)
	}
}

// call sends cmd to the daemon at path once and returns its reply.
func call(ctx context.Context, path, cmd string) (*Reply, error) {
	c, err := nic.DialControl(ctx, path)
	if errors.Is(err, nic.ErrAccess) || errors.Is(err, nic.ErrInvalid) {
		return nil, err
	}
	if errors.Is(err, syscall.EAGAIN) { // the socket's backlog was full until the deadline: as busy as a refusal
		return &Reply{Code: "EAGAIN", Error: fmt.Sprintf("control socket %s: %v", path, err)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w on %s (is softnic serve running? --control names its socket): %v", ErrNoDaemon, path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// A daemon that refuses the connection as it comes (EAGAIN) may have
	// written its reply and closed before the request is written: the
	// reply is read all the same.
	req, _ := json.Marshal(Request{Cmd: cmd})
	_, werr := c.Write(append(req, '\n'))
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if werr != nil {
			return nil, fmt.Errorf("control socket %s: %w", path, werr)
		}
		return nil, fmt.Errorf("control socket %s: no reply: %w", path, err)
	}
	var reply Reply
	if err := json.Unmarshal(line, &reply); err != nil {
		return nil, fmt.Errorf("control socket %s: bad reply: %w", path, err)
	}
	return &reply, nil
}

// CheckDir makes sure the directory of the control socket path is the
// user's alone, when it is nic.PrivateSocketDir (/tmp/softnic-UID, the
// default without a runtime directory: in the shared temporary directory
// anyone could have put a socket at the path first, and the inspecting
// commands would talk to it); serve (create) makes it.
func CheckDir(path string, create bool) error {
	dir := filepath.Dir(path)
	if dir != nic.PrivateSocketDir() {
		return nil // the user's choice, or the runtime directory
	}
	if create {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("control directory: %w", err)
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control directory: %w", err)
	}
	uid, ok := fileOwner(fi)
	if !fi.IsDir() || !ok || uid != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("control directory %s is not a directory of yours alone (%v): remove it, or give --control another path", dir, fi.Mode())
	}
	return nil
}

// Add adds v to the counter name, appended to l if it is not there yet.
func (l Counters) Add(name string, v uint64) Counters {
	if i := slices.IndexFunc(l, func(c Counter) bool { return c.Name == name }); i >= 0 {
		l[i].Value += v
		return l
	}
	return append(l, Counter{name, v})
}

// Level reports whether the counter name of stat's result is a level (a gauge), whose
// rate means nothing: the device's (connections_active, qps, ...) and an
// attached process's resources (pidPID_pds, pidPID_qps).
func Level(name string) bool {
	if rest, ok := strings.CutPrefix(name, "pid"); ok {
		if i := strings.IndexByte(rest, '_'); i > 0 {
			if _, err := strconv.Atoi(rest[:i]); err == nil {
				r := rest[i+1:]
				return r == "pds" || r == "qps"
			}
		}
	}
	return metrics.Level(name)
}
