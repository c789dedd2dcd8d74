package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/internal/bystander"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The attacks of issue 14 from the network, against a daemon on loopback:
// each is bounded in time, leaves the daemon answering and its resources
// where they were, and is refused or counted.

// reqAttacker sends connection requests from a UDP socket of its own
// (another loopback address than the bystanders', as a spoofed or another
// host's would be) and counts what comes back to that address.
type reqAttacker struct {
	t     *testing.T // nil in an attacker process
	c     *net.UDPConn
	close func()
	src   netip.AddrPort
	dst   netip.AddrPort
	sent  atomic.Int64 // bytes of UDP payload sent

	mu      sync.Mutex
	got     map[mad.AttrID]int
	reasons map[mad.RejectReason]int
	bytes   int64
}

// reqGUID is the CA GUID the attacker's REQs carry: softnic's mark, so
// that the daemon answers at the REQ's source port (see nic's
// cmPeerAddr), where the attacker listens.
const reqGUID = 0x02736e0000000001

func newREQAttacker(t *testing.T, from string, d *testDaemon) *reqAttacker {
	t.Helper()
	a, err := listenREQAttacker(from, netip.MustParseAddrPort(d.ready.Listen))
	if err != nil {
		t.Skipf("cannot bind %s: %v", from, err)
	}
	a.t = t
	t.Cleanup(a.close)
	return a
}

// listenREQAttacker is newREQAttacker without a test, for an attacker
// process, to attack the daemon at dst: close ends it.
func listenREQAttacker(from string, dst netip.AddrPort) (*reqAttacker, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from+":0")))
	if err != nil {
		return nil, err
	}
	c.SetReadBuffer(8 << 20) // a burst's answers arrive at once
	a := &reqAttacker{c: c, src: c.LocalAddr().(*net.UDPAddr).AddrPort(), dst: dst,
		got: map[mad.AttrID]int{}, reasons: map[mad.RejectReason]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			var p wire.Packet
			var m mad.MAD
			if p.Decode(buf[:n]) != nil || m.Decode(p.Payload) != nil {
				continue
			}
			a.mu.Lock()
			a.got[m.AttrID()]++
			if m.REJ != nil {
				a.reasons[m.REJ.Reason()]++
			}
			a.bytes += int64(n)
			a.mu.Unlock()
		}
	}()
	a.close = func() {
		c.Close()
		<-done
	}
	return a, nil
}

// send sends one REQ with local communication ID comm and the given
// timeout exponents and retries.
func (a *reqAttacker) send(port uint16, comm uint32, timeout, retries uint8) {
	a.t.Helper()
	if err := a.sendREQ(port, comm, timeout, retries); err != nil {
		a.t.Fatal(err)
	}
}

// sendREQ is send, from any goroutine.
func (a *reqAttacker) sendREQ(port uint16, comm uint32, timeout, retries uint8) error {
	req := mad.MADFields{Header: mad.CMHeader(mad.AttrConnectRequest, uint64(comm))}
	req.REQ = mad.REQFields{
		LocalCommID: comm, ServiceID: mad.RDMACMServiceID(mad.PortSpaceTCP, port), LocalCAGUID: reqGUID,
		LocalQPN: 0x11, StartingPSN: 0x1234, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: timeout, LocalCMResponseTimeout: timeout, MaxCMRetries: retries,
		RetryCount: 7, RNRRetryCount: 7, PKey: 0xffff, PathMTU: wire.MTU1024,
		PrimaryPath: mad.CMPathFields{
			LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: wire.GIDFromAddr(a.src.Addr()), RemoteGID: wire.GIDFromAddr(a.dst.Addr()),
			HopLimit: 64, LocalACKTimeout: timeout,
		},
	}
	cma := mad.NewCMAHeader(netip.AddrPortFrom(a.src.Addr(), 40000), a.dst.Addr())
	mad.CMAHeader(req.REQ.PrivateData[:mad.CMAHeaderSize]).Encode(&cma)
	ud := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpUDSendOnly, PKey: 0xffff, DestQP: wire.GSIQPN},
		DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: wire.GSIQPN},
	}
	pkt := make([]byte, ud.Len(mad.MADSize))
	off, err := ud.EncodeHeaders(pkt, mad.MADSize)
	if err == nil {
		_, err = req.Encode(pkt[off:])
	}
	if err != nil {
		return err
	}
	env := wire.Envelope{Src: a.src, Dst: a.dst}
	env.Seal(pkt)
	if _, err := a.c.WriteToUDPAddrPort(pkt, a.dst); err != nil {
		return err
	}
	a.sent.Add(int64(len(pkt)))
	return nil
}

// answers returns what came back so far: MADs by attribute, REJs by
// reason, and their bytes.
func (a *reqAttacker) answers() (map[mad.AttrID]int, map[mad.RejectReason]int, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, reasons := map[mad.AttrID]int{}, map[mad.RejectReason]int{}
	for k, v := range a.got {
		got[k] = v
	}
	for k, v := range a.reasons {
		reasons[k] = v
	}
	return got, reasons, a.bytes
}

// waitFor polls cond every few milliseconds for up to limit.
func waitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// bystander does a WRITE and a READ back through one-shot commands and
// fails the test unless both succeed, the READ returning what was
// written. (What an attack costs a bystander's speed is
// TestServeBystanderUnderRemoteAttacks.)
func (d *testDaemon) bystander(t *testing.T, text string) {
	t.Helper()
	start := time.Now()
	if code, _, stderr := d.op(0, "write", "--addr", d.addr(0, 0), "--data", text); code != 0 {
		t.Fatalf("bystander's write: %s", stderr)
	}
	if code, stdout, stderr := d.op(0, "read", "--addr", d.addr(0, 0), "--len", fmt.Sprint(len(text))); code != 0 || stdout != text {
		t.Fatalf("bystander's read: %q, %s", stdout, stderr)
	}
	t.Logf("the bystander's write and read took %v", time.Since(start).Round(time.Millisecond))
}

// A REQ from an address that never answers (a spoofed one) brings that
// address one REP, no more bytes than the REQ had, and nothing else; the
// daemon drops the request when the handshake time is over, counts and
// logs it, and frees what it made for it. Before, the REP went out 16
// times (the REQ's retries).
func TestServeSpoofedREQ(t *testing.T) {
	d := startDaemon(t, "--region", "mem:4k:rw", "--cm-handshake-timeout", "300ms")
	before := d.usage(t)
	a := newREQAttacker(t, "127.0.0.9", d)
	a.send(d.ready.CMPort, 0x5001, 20, 15)
	if !waitFor(10*time.Second, func() bool { return d.counter(t, "cm_handshake_timeouts") == 1 }) {
		t.Fatal("the request was not dropped")
	}
	time.Sleep(100 * time.Millisecond) // anything more the daemon would send
	got, _, bytes := a.answers()
	if got[mad.AttrConnectReply] != 1 || len(got) != 1 || bytes > a.sent.Load() {
		t.Errorf("one REQ of %d bytes brought %v, %d bytes; want one REP, no more bytes", a.sent.Load(), got, bytes)
	}
	if n := strings.Count(d.stderr.String(), "connection request dropped"); n != 1 {
		t.Errorf("%d log lines of the dropped request, want 1:\n%s", n, d.stderr)
	}
	if !waitFor(5*time.Second, func() bool { after := d.usage(t); return after.qps == before.qps }) {
		t.Errorf("QPs %d, want %d", d.usage(t).qps, before.qps)
	}
	d.bystander(t, "still here")
}

// 2,000 REQs from one address at once: the daemon holds at most its limit
// per source of them, answers those with one REP each, and refuses the
// rest, counted: with a REJ "no resources" each up to the source's REJ
// burst and rate (cm.DefaultRejectBurst, DefaultRejectRate), unanswered
// beyond (cm_rejects_dropped); a bystander's operations go through
// meanwhile, and everything is back when the handshake time is over.
// Before, the daemon took them one by one, each waiting for its RTU, and a
// bystander waited 35 s.
func TestServeREQBurst(t *testing.T) {
	const reqs = 2000
	d := startDaemon(t, "--region", "mem:4k:rw", "--cm-handshake-timeout", "2s")
	before := d.usage(t)
	a := newREQAttacker(t, "127.0.0.10", d)
	rx := d.counter(t, "cm_rx_msgs")
	start := time.Now()
	for i := range reqs {
		a.send(d.ready.CMPort, 0x10000+uint32(i), 20, 15)
		if i%200 == 199 {
			// Keep within what the daemon's socket buffer holds.
			waitFor(time.Second, func() bool { return d.counter(t, "cm_rx_msgs") >= rx+uint64(i-200) })
		}
	}
	d.bystander(t, "during a burst")
	refused := uint64(reqs - 32)
	if !waitFor(10*time.Second, func() bool { return d.counter(t, "cm_rejected_busy") >= refused }) {
		t.Fatalf("after %v the burst of %d REQs: cm_rejected_busy %d, want %d", time.Since(start), reqs, d.counter(t, "cm_rejected_busy"), refused)
	}
	took := time.Since(start)
	dropped := d.counter(t, "cm_rejects_dropped")
	rejs := int(refused - dropped)
	waitFor(5*time.Second, func() bool { got, _, _ := a.answers(); return got[mad.AttrConnectReject] >= rejs })
	got, reasons, bytes := a.answers()
	most := cm.DefaultRejectBurst + int(took.Seconds()*cm.DefaultRejectRate) + 1
	if got[mad.AttrConnectReply] != 32 || reasons[mad.RejectNoResources] != rejs || rejs < cm.DefaultRejectBurst || rejs > most || bytes > a.sent.Load() {
		t.Errorf("%d REQs in %v brought %v (REJs %v), %d bytes of %d sent, %d REQs dropped unanswered; want 32 REPs (the limit per source), %d to %d REJs no resources (the rest dropped)",
			reqs, took, got, reasons, bytes, a.sent.Load(), dropped, cm.DefaultRejectBurst, most)
	}
	if n := d.counter(t, "cm_rejected_busy"); n != refused {
		t.Errorf("cm_rejected_busy %d, want %d", n, refused)
	}
	if !waitFor(10*time.Second, func() bool { return d.counter(t, "cm_handshake_timeouts") == 32 }) {
		t.Errorf("cm_handshake_timeouts %d, want 32", d.counter(t, "cm_handshake_timeouts"))
	}
	if !waitFor(5*time.Second, func() bool { return d.usage(t).qps == before.qps }) {
		t.Errorf("QPs %d, want %d", d.usage(t).qps, before.qps)
	}
	// Its slots are free again.
	a.send(d.ready.CMPort, 0x9999, 20, 15)
	if !waitFor(5*time.Second, func() bool { got, _, _ := a.answers(); return got[mad.AttrConnectReply] == 33 }) {
		t.Error("no REP for a REQ after the burst's requests ended")
	}
}

// A REQ that asks for the longest timeouts and most retries the wire
// carries (4.096 µs × 2^31 × 16 tries: 39 hours) holds up no one, is held
// no longer than --cm-handshake-timeout, and a SIGTERM while it is held
// stops the daemon within its stated grace period.
func TestServeStuckHandshake(t *testing.T) {
	d := startDaemon(t, "--region", "mem:4k:rw", "--cm-handshake-timeout", "1s")
	a := newREQAttacker(t, "127.0.0.11", d)
	a.send(d.ready.CMPort, 0x7001, 31, 15)
	if !waitFor(5*time.Second, func() bool { got, _, _ := a.answers(); return got[mad.AttrConnectReply] == 1 }) {
		t.Fatal("no REP")
	}
	d.bystander(t, "not blocked")
	if !waitFor(5*time.Second, func() bool { return d.counter(t, "cm_handshake_timeouts") == 1 }) {
		t.Fatal("the request asking for 39 hours was not dropped after 1 s")
	}

	// SIGTERM with handshakes stuck (the daemon's default handshake time,
	// 20 s, holds them): the daemon stops within its grace period.
	d2 := startDaemon(t, "--region", "mem:4k:rw")
	a2 := newREQAttacker(t, "127.0.0.12", d2)
	for i := range uint32(5) {
		a2.send(d2.ready.CMPort, 0x8000+i, 31, 15)
	}
	if !waitFor(5*time.Second, func() bool { got, _, _ := a2.answers(); return got[mad.AttrConnectReply] == 5 }) {
		t.Fatal("no REPs")
	}
	start := time.Now()
	if code := d2.shutdown(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	took := time.Since(start)
	if took > daemon.DefaultStopGrace+time.Second {
		t.Errorf("the daemon took %v to stop, want under %v", took, daemon.DefaultStopGrace+time.Second)
	}
	t.Logf("SIGTERM with 5 handshakes stuck: stopped in %v", took.Round(time.Microsecond))
}

// A SEND flood fills the log with a few lines a second (--log-rate),
// whose counts show the flood's size; every SEND is still counted. Before, each SEND was a
// line: 55 MB/s of stderr.
func TestServeSENDFloodLog(t *testing.T) {
	const sends, rate = 3000, 4
	d := startDaemon(t, "--region", "mem:4k:rw", "--log-rate", fmt.Sprint(rate))
	start := time.Now()
	dialDaemonClient(t, d, nic.Config{}).sendMany(t, sends)
	if n := d.counterReaches(t, "sends_received", sends); n != sends {
		t.Fatalf("sends_received %d, want %d", n, sends)
	}
	// Within a second after the flood the daemon writes a line of its own
	// that counts the SENDs left out (a SEND's line within the flood may
	// carry such a count too: that is not the line awaited).
	flushed := regexp.MustCompile(`SEND received \(the ones not logged\).*"` + daemon.NotLoggedKey + `": \d+`)
	waitFor(3*time.Second, func() bool { return flushed.MatchString(d.stderr.String()) })
	secs := int(time.Since(start)/time.Second) + 1
	log := d.stderr.String()
	lines := strings.Count(log, "SEND received")
	t.Logf("%d SENDs in %v: %d log lines, %d bytes of log", sends, time.Since(start).Round(time.Millisecond), lines, len(log))
	if lines > (rate+1)*secs || lines == 0 {
		t.Errorf("%d SENDs in %v wrote %d log lines, want at most %d a second (--log-rate %d)", sends, time.Since(start), lines, rate+1, rate)
	}
	if !flushed.MatchString(log) {
		t.Errorf("the log does not count the SENDs it left out:\n%.2000s", log)
	}
	d.bystander(t, "after the flood")
}

// sendMany sends n SENDs of 5 bytes on c's QP, 8 at a time, and waits
// for each to complete successfully.
func (c *daemonClient) sendMany(t *testing.T, n int) {
	t.Helper()
	buf, err := c.pd.RegMR(make([]byte, 64), mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf.Bytes(), "flood")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wc [16]verbs.WC
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < 8 {
			wr := verbs.SendWR{ID: uint64(posted), Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.SGE(0, 5)}}
			if err := c.conn.QP().PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		k, err := c.cq.Wait(ctx, wc[:])
		if err != nil {
			t.Fatalf("after %d SENDs: %v", done, err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.Success {
				t.Fatalf("SEND %d: %v", w.ID, w.Status)
			}
		}
		done += k
	}
}

// The daemon takes SENDs at --send-rate, after a burst of its receive
// buffers: the peer's beyond wait in RNR retries, and all complete.
func TestServeSendRate(t *testing.T) {
	const sends, rate = 400, 500
	d := startDaemon(t, "--region", "mem:4k:rw", "--send-rate", fmt.Sprint(rate))
	start := time.Now()
	dialDaemonClient(t, d, nic.Config{}).sendMany(t, sends)
	took := time.Since(start)
	if n := d.counterReaches(t, "sends_received", sends); n != sends {
		t.Fatalf("sends_received %d, want %d", n, sends)
	}
	paced := d.counter(t, "receives_paced")
	t.Logf("%d SENDs in %v, %d receive buffers posted late", sends, took.Round(time.Millisecond), paced)
	// The first RecvBuffers SENDs find buffers; each later one waits for
	// a buffer to go back, one each 1/rate.
	if least := time.Duration(sends-daemon.RecvBuffers-1) * time.Second / rate; took < least || paced == 0 {
		t.Errorf("%d SENDs took %v (%d paced) at --send-rate %d, want at least %v", sends, took, paced, rate, least)
	}
}

// remoteBystander connects an embedded device of this process to the
// daemon through its connection manager, as a remote host would, to
// stream WRITEs into the daemon's region number region.
func (d *testDaemon) remoteBystander(t *testing.T, region int) *bystander.Bystander {
	t.Helper()
	c := dialDaemonClient(t, d, nic.Config{})
	r := d.ready.Regions[region]
	local, err := c.pd.AllocMR(r.Len, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &bystander.Bystander{QP: c.conn.QP(), CQ: c.cq, MR: local, Remote: nicbench.Region{Addr: r.Addr, RKey: r.RKey}, Span: r.Len}
}

// reqs returns an attack step that sends n REQs of a at once to the
// connection manager at port, with the given timeout exponents and
// retries, and waits for their answers (a second at most: what a burst
// leaves unanswered is the daemon's business).
func (a *reqAttacker) reqs(port uint16, n int, timeout, retries uint8) func() error {
	comm := uint32(0)
	return func() error {
		got, _, _ := a.answers()
		before := got[mad.AttrConnectReply] + got[mad.AttrConnectReject]
		for range n {
			comm++
			if err := a.sendREQ(port, comm, timeout, retries); err != nil {
				return err
			}
		}
		// Spinning, as the attacker does while off.
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			if got, _, _ := a.answers(); got[mad.AttrConnectReply]+got[mad.AttrConnectReject] >= before+n {
				break
			}
		}
		return nil
	}
}

// sendFlood returns an attack step that posts 8 SENDs of 5 bytes on c's QP
// and polls for their completions.
func (c *daemonClient) sendFlood() (func() error, error) {
	buf, err := c.pd.RegMR(make([]byte, 64), mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	var wc [8]verbs.WC
	return func() error {
		for i := range len(wc) {
			wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.SGE(0, 5)}}
			if err := c.conn.QP().PostSend(&wr); err != nil {
				return err
			}
		}
		// Polled, spinning as the attacker does while off.
		for done, deadline := 0, time.Now().Add(10*time.Second); done < len(wc); {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d SENDs completed in 10 s", done, len(wc))
			}
			n, err := c.cq.Poll(wc[:])
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.Success {
					return fmt.Errorf("SEND: %v", w.Status)
				}
			}
			done += n
		}
		return nil
	}, nil
}

// guessWait is how long a key guesser waits for the answer to a guess
// before it makes the next: a source held back gets none.
const guessWait = time.Millisecond

// keyGuess returns an attack step that guesses a key, as the guesser of
// issue 14 did, a new connection each: it writes 8 bytes at a random
// address with a random rkey on c's connection, waits up to guessWait for
// the refusal, closes the connection and dials the next one. A guess that
// succeeds is an error.
func (c *daemonClient) keyGuess(cmPort uint16) (func() error, error) {
	buf, err := c.pd.RegMR(make([]byte, 64), mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	peer := c.conn.RemoteAddr()
	rng := rand.New(rand.NewPCG(14, uint64(os.Getpid())))
	var wc [16]verbs.WC
	guesses := uint64(0)
	return func() error {
		// A goroutine spins meanwhile, as the attacker does while off:
		// waiting, the step alone would leave the CPU to the bystander.
		var stop atomic.Bool
		defer stop.Store(true)
		go func() {
			for !stop.Load() {
			}
		}()
		guesses++
		wr := verbs.SendWR{ID: guesses, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{buf.SGE(0, 8)}, RemoteAddr: rng.Uint64(), RKey: rng.Uint32()}
		if err := c.conn.QP().PostSend(&wr); err != nil {
			return err
		}
		// Waited for, not polled: a post made right after a poll waits for
		// the next poll, or a packet, to be sent, and the next connection's
		// REQ would wait for the CM to send it again. What the CQ holds of
		// the previous guesses (flushed by their connection's close) is
		// taken here too.
		ctx, cancel := context.WithTimeout(context.Background(), guessWait)
		defer cancel()
		for answered := false; !answered; {
			n, err := c.cq.Wait(ctx, wc[:])
			if ctx.Err() != nil {
				break
			}
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if w.ID == guesses {
					if w.Status == verbs.Success {
						return fmt.Errorf("rkey %#x at %#x was guessed", wr.RKey, wr.RemoteAddr)
					}
					answered = true
				}
			}
		}
		c.conn.Close()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := c.dev.Dial(ctx, peer, cmPort, nic.DialOptions{PD: c.pd, QP: nic.QPConfig{SendCQ: c.cq}})
		c.conn = conn
		return err
	}, nil
}

// remoteAttacks are the attacks of an attacker process (runRemoteAttack)
// by name: each sets itself up against the daemon whose device is at
// listen and connection manager at port, and returns one step, which the
// attacker repeats while attacking.
var remoteAttacks = map[string]func(listen string, port uint16) (func() error, error){
	"req-burst":        reqAttack("127.0.0.10", 200, 20, 15),
	"stuck-handshakes": reqAttack("127.0.0.11", 1, 31, 15),
	"spoofed-reqs":     reqAttack("127.0.0.9", 1, 20, 15),
	"send-flood": func(listen string, port uint16) (func() error, error) {
		c, err := openDaemonClient(nic.Config{}, listen, port)
		if err != nil {
			return nil, err
		}
		return c.sendFlood()
	},
	"key-guess": func(listen string, port uint16) (func() error, error) {
		c, err := openDaemonClient(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.13:0")}, listen, port)
		if err != nil {
			return nil, err
		}
		return c.keyGuess(port)
	},
}

// reqAttack is the remote attack of REQs from the address from, n at
// once (reqAttacker.reqs).
func reqAttack(from string, n int, timeout, retries uint8) func(listen string, port uint16) (func() error, error) {
	return func(listen string, port uint16) (func() error, error) {
		a, err := listenREQAttacker(from, netip.MustParseAddrPort(listen))
		if err != nil {
			return nil, err
		}
		return a.reqs(port, n, timeout, retries), nil
	}
}

// runRemoteAttack is the child mode of an attacker process: it makes the
// remote attack args[0] on the daemon whose device is at args[1] and
// connection manager at port args[2] (bystander.RunAttacker).
func runRemoteAttack(args []string) int {
	port, err := strconv.ParseUint(args[2], 10, 16)
	var step func() error
	if err == nil {
		step, err = remoteAttacks[args[0]](args[1], uint16(port))
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	bystander.RunAttacker(step)
	return 0
}

// startRemoteAttacker starts an attacker process making the remote attack
// of that name on d, idle (spinning) until told to attack.
func startRemoteAttacker(t *testing.T, d *testDaemon, attack string) *bystander.Attacker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "remote-attack", attack, d.ready.Listen, strconv.Itoa(int(d.ready.CMPort)))
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return bystander.StartAttacker(t, cmd)
}

// TestServeBystanderUnderRemoteAttacks: a remote peer's 64 KiB WRITEs into
// the daemon's region keep within 2× of their throughput and p99 latency
// without the attack while an attacker process repeats one of the
// network's attacks: bursts of 200 REQs from one address, REQs asking for
// 39 hours, REQs from an address that never completes them, SENDs as fast
// as they complete, or rkeys guessed, a new connection each. The daemon
// counts each.
func TestServeBystanderUnderRemoteAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("measures a bystander for seconds")
	}
	if raceEnabled {
		t.Skip("the race detector slows the daemon, which runs in this test's process, several times: its speed is not the daemon's")
	}
	d := startDaemon(t, "--region", "mem:1m:rw", "--cm-handshake-timeout", "300ms")
	by := d.remoteBystander(t, 0)
	for _, tt := range []struct{ attack, counter string }{
		{"req-burst", "cm_rejected_busy"},
		{"stuck-handshakes", "cm_handshake_timeouts"},
		{"spoofed-reqs", "cm_handshake_timeouts"},
		{"send-flood", "sends_received"},
		{"key-guess", "access_holds"},
	} {
		t.Run(tt.attack, func(t *testing.T) {
			before := d.counter(t, tt.counter)
			a := startRemoteAttacker(t, d, tt.attack)
			by.Check(t, 5, 120*time.Millisecond, 2, func(on bool) { a.Attack(t, on) })
			if !waitFor(5*time.Second, func() bool { return d.counter(t, tt.counter) > before }) {
				t.Errorf("%s did not grow under the attack", tt.counter)
			}
			t.Logf("%s: %d", tt.counter, d.counter(t, tt.counter)-before)
		})
	}
}
