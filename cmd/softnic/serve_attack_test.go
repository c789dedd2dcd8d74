package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/daemon"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
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
	t    *testing.T
	c    *net.UDPConn
	src  netip.AddrPort
	dst  netip.AddrPort
	sent atomic.Int64 // bytes of UDP payload sent

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
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from+":0")))
	if err != nil {
		t.Skipf("cannot bind %s: %v", from, err)
	}
	c.SetReadBuffer(8 << 20) // a burst's answers arrive at once
	a := &reqAttacker{t: t, c: c, src: c.LocalAddr().(*net.UDPAddr).AddrPort(), dst: netip.MustParseAddrPort(d.ready.Listen),
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
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return a
}

// send sends one REQ with local communication ID comm and the given
// timeout exponents and retries.
func (a *reqAttacker) send(port uint16, comm uint32, timeout, retries uint8) {
	a.t.Helper()
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
		a.t.Fatal(err)
	}
	env := wire.Envelope{Src: a.src, Dst: a.dst}
	env.Seal(pkt)
	if _, err := a.c.WriteToUDPAddrPort(pkt, a.dst); err != nil {
		a.t.Fatal(err)
	}
	a.sent.Add(int64(len(pkt)))
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
// fails the test unless both succeed within limit.
func (d *testDaemon) bystander(t *testing.T, limit time.Duration, text string) {
	t.Helper()
	start := time.Now()
	if code, _, stderr := d.op(0, "write", "--addr", d.addr(0, 0), "--data", text); code != 0 {
		t.Fatalf("bystander's write: %s", stderr)
	}
	if code, stdout, stderr := d.op(0, "read", "--addr", d.addr(0, 0), "--len", fmt.Sprint(len(text))); code != 0 || stdout != text {
		t.Fatalf("bystander's read: %q, %s", stdout, stderr)
	}
	took := time.Since(start)
	if took > limit {
		t.Errorf("the bystander's write and read took %v, want under %v", took, limit)
	}
	t.Logf("the bystander's write and read took %v", took.Round(time.Millisecond))
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
	d.bystander(t, 5*time.Second, "still here")
}

// 2,000 REQs from one address at once: the daemon holds at most its limit
// per source of them (the rest are rejected "no resources" and counted),
// answers each with one MAD, a bystander's operations go through
// meanwhile, and everything is back when the handshake time is over.
// Before, the daemon took them one by one, each waiting for its RTU, and a
// bystander waited 35 s.
func TestServeREQBurst(t *testing.T) {
	const reqs = 2000
	d := startDaemon(t, "--region", "mem:4k:rw", "--cm-handshake-timeout", "2s")
	before := d.usage(t)
	a := newREQAttacker(t, "127.0.0.10", d)
	start := time.Now()
	answered := func() int { got, _, _ := a.answers(); return got[mad.AttrConnectReply] + got[mad.AttrConnectReject] }
	for i := range reqs {
		a.send(d.ready.CMPort, 0x10000+uint32(i), 20, 15)
		if i%200 == 199 {
			// Keep within what the attacker's own socket buffer holds of
			// the answers (net.core.rmem_max may be 208 KiB).
			waitFor(time.Second, func() bool { return answered() >= i-200 })
		}
	}
	d.bystander(t, 10*time.Second, "during a burst")
	if !waitFor(10*time.Second, func() bool { return answered() >= reqs }) {
		got, _, _ := a.answers()
		t.Fatalf("after %v the burst of %d REQs brought %v", time.Since(start), reqs, got)
	}
	got, reasons, bytes := a.answers()
	if got[mad.AttrConnectReply] != 32 || reasons[mad.RejectNoResources] != reqs-32 || bytes > a.sent.Load() {
		t.Errorf("%d REQs brought %v (REJs %v), %d bytes of %d sent; want 32 REPs (the limit per source), the rest REJ no resources",
			reqs, got, reasons, bytes, a.sent.Load())
	}
	if n := d.counter(t, "cm_rejected_busy"); n != reqs-32 {
		t.Errorf("cm_rejected_busy %d, want %d", n, reqs-32)
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
	d.bystander(t, 10*time.Second, "not blocked")
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
	if took > daemon.DisconnectWait+time.Second {
		t.Errorf("the daemon took %v to stop, want under %v", took, daemon.DisconnectWait+time.Second)
	}
	t.Logf("SIGTERM with 5 handshakes stuck: stopped in %v", took.Round(time.Microsecond))
}

// A SEND flood fills the log with a few lines a second, whose counts show
// the flood's size; every SEND is still counted. Before, each SEND was a
// line: 55 MB/s of stderr.
func TestServeSENDFloodLog(t *testing.T) {
	const sends = 3000
	d := startDaemon(t, "--region", "mem:4k:rw")
	c := dialDaemonClient(t, d, nic.Config{})
	buf, err := c.pd.RegMR(make([]byte, 64), mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf.Bytes(), "flood")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wc [16]qp.WC
	posted, done := 0, 0
	for done < sends {
		for posted < sends && posted-done < 8 {
			wr := qp.SendWR{ID: uint64(posted), Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []qp.SGE{buf.SGE(0, 5)}}
			if err := c.conn.QP().PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		n, err := c.cq.Wait(ctx, wc[:])
		if err != nil {
			t.Fatalf("after %d SENDs: %v", done, err)
		}
		for _, w := range wc[:n] {
			if w.Status != qp.Success {
				t.Fatalf("SEND %d: %v", w.ID, w.Status)
			}
		}
		done += n
	}
	if n := d.counterReaches(t, "sends_received", sends); n != sends {
		t.Fatalf("sends_received %d, want %d", n, sends)
	}
	// Within a second the daemon writes the count of the lines left out.
	waitFor(3*time.Second, func() bool { return strings.Contains(d.stderr.String(), daemon.NotLoggedKey) })
	secs := int(time.Since(start)/time.Second) + 1
	log := d.stderr.String()
	lines := strings.Count(log, "SEND received")
	t.Logf("%d SENDs in %v: %d log lines, %d bytes of log", sends, time.Since(start).Round(time.Millisecond), lines, len(log))
	if lines > (daemon.RateLogBurst+1)*secs || lines == 0 {
		t.Errorf("%d SENDs in %v wrote %d log lines, want at most %d a second", sends, time.Since(start), lines, daemon.RateLogBurst+1)
	}
	if !regexp.MustCompile(`SEND received \(the ones not logged\).*"` + daemon.NotLoggedKey + `": \d+`).MatchString(log) {
		t.Errorf("the log does not count the SENDs it left out:\n%.2000s", log)
	}
	d.bystander(t, 5*time.Second, "after the flood")
}
