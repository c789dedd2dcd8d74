//go:build linux

package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
)

func TestCounterListJSON(t *testing.T) {
	l := Counters{{"sent_pkts", 12}, {"rcvd_pkts", 0}, {"bad_icrc", 1<<64 - 1}, {`odd "name"`, 3}}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"sent_pkts":12,"rcvd_pkts":0,"bad_icrc":18446744073709551615,"odd \"name\"":3}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back Counters
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != len(l) {
		t.Fatalf("Unmarshal = %v, want %v", back, l)
	}
	for i := range l {
		if back[i] != l[i] {
			t.Errorf("counter %d = %v, want %v (in order)", i, back[i], l[i])
		}
	}
	for _, bad := range []string{`[]`, `{"a":-1}`, `{"a":"x"}`, `{"a":1`, `7`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

// ask sends request to a control server answering with handle, ends it
// (shutdown for writing), and returns the whole reply. A request longer
// than the server reads may be cut short by a reset (the server closes
// with bytes unread), and then the reply is nil.
func ask(t testing.TB, handle func(string) (any, error), request []byte) []byte {
	client, server := unixPair(t)
	defer client.Close()
	s := &Server{Admit: nic.PeerCredOf, Handle: func(cmd string, _ nic.PeerCred) (any, error) { return handle(cmd) }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.answer(server)
	}()
	if _, err := client.Write(request); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	reply, err := io.ReadAll(client)
	<-done
	if errors.Is(err, syscall.ECONNRESET) && len(request) > RequestMax {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

// unixPair returns the two ends of a connected unix stream socket.
func unixPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "control")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func TestControlAnswer(t *testing.T) {
	handle := func(cmd string) (any, error) {
		if cmd == "stat" {
			return Counters{{"sent_pkts", 1}}, nil
		}
		return nil, errors.New("unknown command " + cmd)
	}
	tests := []struct {
		name, request, reply string
	}{
		{"a command", `{"cmd":"stat"}` + "\n", `{"result":{"sent_pkts":1}}` + "\n"},
		{"an unknown command", `{"cmd":"reboot"}` + "\n", `{"error":"unknown command reboot"}` + "\n"},
		{"not JSON", "stat\n", `{"error":"bad request: invalid character 's' looking for beginning of value"}` + "\n"},
		{"no newline", `{"cmd":"stat"}`, `{"error":"bad request: EOF"}` + "\n"},
		{"nothing: no reply", "", ""},
		{"cut short", `{"cmd":"` + strings.Repeat("x", 4000) + `"}`, `{"error":"bad request: EOF"}` + "\n"},
		{"too long", `{"cmd":"` + strings.Repeat("x", 5000) + `"}`, `{"error":"bad request: no end of line in 4096 bytes: invalid argument (EINVAL)"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ask(t, handle, []byte(tt.request)); string(got) != tt.reply {
				t.Errorf("reply %q, want %q", got, tt.reply)
			}
		})
	}
}

// The attach command hands the connection over with its line (which names
// the process's protocol version) and nothing read past it: a message the
// process sent right after it, and the descriptor that came with that
// message, are still there for the attach session.
func TestControlAttachHandsOver(t *testing.T) {
	client, server := unixPair(t)
	defer client.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	next := `{"id":1,"op":"alloc_mr","fds":1}` + "\n"
	attach := `{"cmd":"attach","version":2}` + "\n"
	if _, err := client.Write([]byte(attach)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := client.WriteMsgUnix([]byte(next), syscall.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	var got, gotLine []byte
	var fds []int
	s := &Server{
		Admit:  nic.PeerCredOf,
		Handle: func(cmd string, _ nic.PeerCred) (any, error) { return nil, errors.New("not attach: " + cmd) },
		Attach: func(c *net.UnixConn, line []byte) {
			gotLine = line
			buf, oob := make([]byte, 256), make([]byte, syscall.CmsgSpace(4))
			c.SetReadDeadline(time.Now().Add(time.Second)) // nothing left to read: fail, not hang
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				t.Errorf("reading after the attach line: %v", err)
				return
			}
			got = buf[:n]
			cms, err := syscall.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				t.Error(err)
			}
			for _, cm := range cms {
				rights, err := syscall.ParseUnixRights(&cm)
				if err != nil {
					t.Error(err)
				}
				fds = append(fds, rights...)
			}
		},
	}
	s.answer(server)
	for _, fd := range fds {
		syscall.Close(fd)
	}
	if string(gotLine) != attach {
		t.Errorf("the attach session was handed the line %q, want %q", gotLine, attach)
	}
	if string(got) != next || len(fds) != 1 {
		t.Errorf("the attach session read %q with %d descriptors, want %q with 1", got, len(fds), next)
	}
}

// FuzzControlAnswer: whatever a client writes, the daemon answers with one
// line of JSON holding either a result or an error.
func FuzzControlAnswer(f *testing.F) {
	f.Add([]byte(`{"cmd":"info"}` + "\n"))
	f.Add([]byte(`{"cmd":"` + strings.Repeat("x", 5000) + `"}` + "\n"))
	f.Add([]byte("\x00\xff\n"))
	f.Fuzz(func(t *testing.T, request []byte) {
		echo := func(cmd string) (any, error) { return cmd, nil }
		reply := ask(t, echo, request)
		if reply == nil {
			return // reset: a request longer than the server reads
		}
		if len(request) == 0 {
			if len(reply) != 0 {
				t.Fatalf("reply %q to a client that sent nothing, want none", reply)
			}
			return
		}
		if n := bytes.Count(reply, []byte("\n")); n != 1 || reply[len(reply)-1] != '\n' {
			t.Fatalf("reply %q is not one line", reply)
		}
		var r Reply
		if err := json.Unmarshal(reply, &r); err != nil {
			t.Fatalf("reply %q: %v", reply, err)
		}
		if (r.Error == "") == (r.Result == nil) {
			t.Errorf("reply %q has both or neither of result and error", reply)
		}
	})
}

// TestControlRefusal: a peer the daemon does not admit gets the refusal,
// with its errno for an attaching process, and its request is not
// handled.
func TestControlRefusal(t *testing.T) {
	client, server := unixPair(t)
	defer client.Close()
	handled := false
	s := &Server{
		Admit: func(*net.UnixConn) (nic.PeerCred, error) {
			return nic.PeerCred{}, fmt.Errorf("uid 65534 may not use this daemon: %w", nic.ErrAccess)
		},
		Handle: func(string, nic.PeerCred) (any, error) { handled = true; return nil, nil },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.answer(server)
	}()
	client.Write([]byte(`{"cmd":"info"}` + "\n"))
	client.CloseWrite()
	reply, err := io.ReadAll(client)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	want := `{"error":"uid 65534 may not use this daemon: permission denied (EACCES)","code":"EACCES"}` + "\n"
	if string(reply) != want || handled {
		t.Errorf("reply %q (handled: %v), want %q and nothing handled", reply, handled, want)
	}
}

// reserve counts the connections whose request is awaited by process and
// by user, and says which limit a connection beyond them meets; awaited
// takes each back.
func TestControlAwaitingLimits(t *testing.T) {
	var s Server
	conns := map[*net.UnixConn]bool{}
	add := func(pid, uid int) string {
		peer := nic.PeerCred{PID: pid, UID: uid}
		busy, ok := s.reserve(peer)
		if !ok {
			t.Fatal("reserve reports the server closed")
		}
		if busy == "" {
			c := new(net.UnixConn) // a key only: awaiting never uses it
			if !s.awaiting(c, peer) {
				t.Fatal("awaiting reports the server closed")
			}
			conns[c] = true
		}
		return busy
	}
	for i := range PerProcess {
		if busy := add(7, 1000); busy != "" {
			t.Fatalf("connection %d of a process refused: %s", i+1, busy)
		}
	}
	if busy, want := add(7, 1000), fmt.Sprintf("process 7 has %d", PerProcess); busy != want {
		t.Errorf("connection %d of a process: %q, want %q", PerProcess+1, busy, want)
	}
	// Other processes of the user, up to PerUser.
	for pid := 8; len(conns) < PerUser; pid++ {
		for range min(PerProcess, PerUser-len(conns)) {
			if busy := add(pid, 1000); busy != "" {
				t.Fatalf("connection %d of the user refused: %s", len(conns)+1, busy)
			}
		}
	}
	if busy, want := add(1, 1000), fmt.Sprintf("uid 1000 has %d", PerUser); busy != want {
		t.Errorf("connection %d of the user: %q, want %q", PerUser+1, busy, want)
	}
	if busy := add(2, 1001); busy != "" {
		t.Errorf("another user's connection refused: %s", busy)
	}
	for c := range conns {
		s.awaited(c)
	}
	if len(s.reading) != 0 || len(s.users) != 0 || len(s.procs) != 0 {
		t.Errorf("after every request was read: %d connections, %v users, %v processes left", len(s.reading), s.users, s.procs)
	}
	if busy := add(7, 1000); busy != "" {
		t.Errorf("a process whose connections have all sent their request refused: %s", busy)
	}
}

// TestControlBusy: a process with PerProcess connections that send nothing
// has its next refused at once with EAGAIN, its request unread, and the
// refusal counted; Call asks again until they are gone and then has its
// answer.
func TestControlBusy(t *testing.T) {
	path := t.TempDir() + "/ctl.sock"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Listener: l, Admit: nic.PeerCredOf, Handle: func(cmd string, _ nic.PeerCred) (any, error) { return cmd, nil }}
	s.Start()
	defer s.Close()
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range PerProcess {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte(`{"cmd":"info"}` + "\n"))
	// The daemon closes with the request unread: a reset after the reply.
	reply, err := bufio.NewReader(c).ReadBytes('\n')
	want := fmt.Sprintf(`{"error":"process %d has %d connections to this daemon that have not sent their request yet: try again","code":"EAGAIN"}`+"\n", os.Getpid(), PerProcess)
	if err != nil || string(reply) != want {
		t.Errorf("reply %q, %v; want %q", reply, err, want)
	}
	if s.Busy() != 1 {
		t.Errorf("Busy() = %d, want 1", s.Busy())
	}

	time.AfterFunc(50*time.Millisecond, func() {
		for _, c := range silent {
			c.Close()
		}
	})
	var res string
	if err := Call(t.Context(), path, "info", &res); err != nil || res != "info" {
		t.Errorf("Call while the silent connections go: %q, %v", res, err)
	}
	if s.Busy() < 2 {
		t.Errorf("Busy() = %d: Call was not refused before the silent connections went", s.Busy())
	}
}

// TestControlPending: with Pending connections of as many processes and
// users awaited, the next connection waits in the socket's backlog, the
// deferred accept counted, until one of them goes; then it is answered.
func TestControlPending(t *testing.T) {
	path := t.TempDir() + "/ctl.sock"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	s := &Server{Listener: l, Admit: nic.PeerCredOf, Handle: func(cmd string, _ nic.PeerCred) (any, error) { return cmd, nil },
		Cred: func(int) (nic.PeerCred, error) { // each connection another process of another user
			n := int(next.Add(1))
			return nic.PeerCred{PID: n, UID: n}, nil
		}}
	s.Start()
	defer s.Close()
	silent := make([]*net.UnixConn, Pending)
	for i := range silent { // beyond AcceptBurst and Backlog: DialControl waits for room
		if silent[i], err = nic.DialControl(t.Context(), path); err != nil {
			t.Fatal(err)
		}
		defer silent[i].Close()
	}
	// Waiting for room as well: the server may not have accepted the last
	// silent connections yet, and a plain dial then fails with EAGAIN.
	c, err := nic.DialControl(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(`{"cmd":"info"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); s.Deferred() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections accepted, none deferred", next.Load())
		}
	}
	if n := next.Load(); n != Pending {
		t.Errorf("%d connections accepted, want %d", n, Pending)
	}
	silent[0].Close()
	reply, err := bufio.NewReader(c).ReadBytes('\n')
	if want := `{"result":"info"}` + "\n"; string(reply) != want || err != nil {
		t.Errorf("the deferred connection's reply %q, %v; want %q", reply, err, want)
	}
	if s.Busy() != 0 {
		t.Errorf("Busy() %d, want 0", s.Busy())
	}
}

// TestControlCallBacklogFull: a socket whose backlog is full has Call
// wait for room (a connection without blocking would fail with EAGAIN)
// until the daemon accepts.
func TestControlCallBacklogFull(t *testing.T) {
	path := t.TempDir() + "/ctl.sock"
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var queued []net.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		c, err := net.Dial("unix", path)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil || len(queued) > 16 {
			t.Fatalf("filling a backlog of 0: %d connections, %v", len(queued), err)
		}
		queued = append(queued, c)
	}
	s := &Server{Listener: l, Admit: nic.PeerCredOf, Handle: func(cmd string, _ nic.PeerCred) (any, error) { return cmd, nil }}
	started := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() {
		s.Start()
		close(started)
	})
	var res string
	if err := Call(t.Context(), path, "info", &res); err != nil || res != "info" {
		t.Errorf("Call to a full backlog, accepted after 50 ms: %q, %v", res, err)
	}
	<-started
	s.Close()
}

// TestControlBacklog: the server sets its socket's backlog to Backlog,
// whatever the listener was made with: a connection beyond it waits (or
// fails with EAGAIN, connecting without blocking).
func TestControlBacklog(t *testing.T) {
	l, err := net.Listen("unix", t.TempDir()+"/ctl.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	setBacklog(l, 3)
	var queued []net.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		c, err := net.Dial("unix", l.Addr().String())
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil || len(queued) > 16 {
			t.Fatalf("filling a backlog of 3: %d connections, %v", len(queued), err)
		}
		queued = append(queued, c)
	}
	if len(queued) != 4 { // Linux lets in one more than the backlog
		t.Errorf("a backlog of 3 took %d connections, want 4", len(queued))
	}
}

// TestControlSilent: a connection whose client closed without a word is
// closed as it is accepted, counted, and asked nothing of (its
// credentials, a goroutine); the next connection is answered.
func TestControlSilent(t *testing.T) {
	path := t.TempDir() + "/ctl.sock"
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var creds atomic.Int64
	s := &Server{Listener: l, Admit: nic.PeerCredOf, Handle: func(cmd string, _ nic.PeerCred) (any, error) { return cmd, nil },
		Cred: func(fd int) (nic.PeerCred, error) {
			creds.Add(1)
			return peerCred(fd)
		}}
	const silent = 5
	for range silent { // queued before the server accepts: closed by then
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	s.Start()
	defer s.Close()
	var res string
	if err := Call(t.Context(), path, "info", &res); err != nil || res != "info" {
		t.Errorf("Call after %d silent connections: %q, %v", silent, res, err)
	}
	if s.Silent() != silent || creds.Load() != 1 {
		t.Errorf("Silent() = %d, credentials asked %d times; want %d and 1 (the Call's)", s.Silent(), creds.Load(), silent)
	}
}
