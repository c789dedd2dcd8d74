package nic_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The connection manager over real UDP sockets on loopback. CM timeouts
// are short (2^12 × 4.096 µs ≈ 17 ms) so that lost MADs are recovered
// quickly.

const cmPort = 7471

// cmEnd is one device with what its connections need: a PD, a CQ, a
// registered buffer.
type cmEnd struct {
	dev *nic.Device
	pd  *nic.PD
	cq  *nic.CQ
	mr  *nic.MR
}

func openCMEnd(t testing.TB, cfg nic.Config) *cmEnd {
	t.Helper()
	return providers[0].cmEnd(t, cfg)
}

// dialOptions are the tests' dial options. Each REQ waits 2^18 × 4.096 µs
// ≈ 1.07 s plus the ACK timeout, 67 ms, for its answer: a MAD a test loses
// costs it a second, and a REQ no test lost is seldom sent again, nor
// does the acceptor's hold on a request (≈ 8 s) run out before the test
// answers it, even where -race and a loaded machine make a handshake take
// a second (with CM timeout 12, 84 ms a try, 1 run in 15 of TestDuplicateREQ
// under -race on a loaded 2-core machine saw its REQ retransmitted).
func (e *cmEnd) dialOptions() nic.DialOptions {
	return nic.DialOptions{PD: e.pd, QP: nic.QPConfig{SendCQ: e.cq}, CMTimeout: 18, CMRetries: 5}
}

func (e *cmEnd) listen(t testing.TB, backlog int) *nic.Listener {
	t.Helper()
	l, err := e.dev.Listen(cmPort, nic.ListenOptions{PD: e.pd, QP: nic.QPConfig{SendCQ: e.cq}, Backlog: backlog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func cmContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// acceptAsync answers the next request on l with f in a goroutine.
func acceptAsync(t testing.TB, ctx context.Context, l *nic.Listener, f func(*nic.Request) (*nic.Conn, error)) <-chan *nic.Conn {
	ch := make(chan *nic.Conn, 1)
	go func() {
		defer close(ch)
		r, err := l.AcceptRequest(ctx)
		if err != nil {
			t.Errorf("AcceptRequest: %v", err)
			return
		}
		c, err := f(r)
		if err != nil {
			if !errors.As(err, new(*nic.RejectError)) {
				t.Errorf("answering the request: %v", err)
			}
			return
		}
		ch <- c
	}()
	return ch
}

// connectCM dials from a to b's listener and returns both connections.
func connectCM(t testing.TB, a, b *cmEnd, l *nic.Listener, dopts nic.DialOptions, aopts nic.AcceptOptions) (*nic.Conn, *nic.Conn) {
	t.Helper()
	return connectCMAnswer(t, a, b, l, dopts, func(_ context.Context, r *nic.Request) (*nic.Conn, error) { return r.Accept(aopts) })
}

// connectCMAnswer is connectCM with the request answered by answer.
func connectCMAnswer(t testing.TB, a, b *cmEnd, l *nic.Listener, dopts nic.DialOptions, answer func(context.Context, *nic.Request) (*nic.Conn, error)) (*nic.Conn, *nic.Conn) {
	t.Helper()
	ctx := cmContext(t)
	accepted := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) { return answer(ctx, r) })
	c, err := a.dev.Dial(ctx, b.dev.Addr(), l.Port(), dopts)
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.FailNow()
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func cmCounter(t testing.TB, d *nic.Device, name string) uint64 {
	t.Helper()
	v, ok := d.Counter(name)
	if !ok {
		t.Fatalf("no counter %s", name)
	}
	return v
}

func TestDialAccept(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a := p.cmEnd(t, nic.Config{})
		b := p.cmEnd(t, nic.Config{MTU: 1024})
		l := b.listen(t, 0)
		dopts := a.dialOptions()
		dopts.PrivateData = []byte("from the dialer")
		dopts.ResponderResources, dopts.InitiatorDepth = 8, 4
		dopts.RetryCount, dopts.RNRRetryCount, dopts.Timeout = 5, 6, 12
		ctx := cmContext(t)
		accepted := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) {
			if got := string(r.PrivateData()[:15]); got != "from the dialer" || len(r.PrivateData()) != mad.CMAPrivateDataSize {
				t.Errorf("request private data %q (%d bytes)", got, len(r.PrivateData()))
			}
			if r.RemoteAddr() != a.dev.Addr() {
				t.Errorf("request from %v, want %v", r.RemoteAddr(), a.dev.Addr())
			}
			return r.Accept(nic.AcceptOptions{PrivateData: []byte("from the acceptor"), RNRRetryCount: 3})
		})
		c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, dopts)
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		if s == nil {
			t.FailNow()
		}
		if got := string(c.PrivateData()[:17]); got != "from the acceptor" || len(c.PrivateData()) != mad.REPPrivateDataSize {
			t.Errorf("dialer got private data %q (%d bytes)", got, len(c.PrivateData()))
		}
		if c.RemoteAddr() != b.dev.Addr() || s.RemoteAddr() != a.dev.Addr() {
			t.Errorf("remote addresses %v and %v", c.RemoteAddr(), s.RemoteAddr())
		}
		ca, sa := c.QP().Attr(), s.QP().Attr()
		for _, chk := range []struct {
			name      string
			got, want any
		}{
			{"dialer state", ca.State, verbs.RTS},
			{"acceptor state", sa.State, verbs.RTS},
			{"dialer's peer QPN", ca.DestQPN, s.QP().Num()},
			{"acceptor's peer QPN", sa.DestQPN, c.QP().Num()},
			{"dialer's SQ PSN is the acceptor's RQ PSN", ca.SQPSN, sa.RQPSN},
			{"acceptor's SQ PSN is the dialer's RQ PSN", sa.SQPSN, ca.RQPSN},
			{"dialer's path MTU (the smaller device's)", ca.PathMTU, 1024},
			{"acceptor's path MTU", sa.PathMTU, 1024},
			{"dialer's initiator depth", ca.MaxRdAtomic, uint8(4)},
			{"dialer's responder resources (the acceptor's initiator depth)", ca.MaxDestRdAtomic, uint8(8)},
			{"acceptor's responder resources (the dialer's initiator depth)", sa.MaxDestRdAtomic, uint8(4)},
			{"acceptor's initiator depth (the dialer's responder resources)", sa.MaxRdAtomic, uint8(8)},
			{"retry counts", [2]uint8{ca.RetryCnt, sa.RetryCnt}, [2]uint8{5, 5}},
			{"dialer's RNR retry (from the REP)", ca.RNRRetry, uint8(3)},
			{"acceptor's RNR retry (from the REQ)", sa.RNRRetry, uint8(6)},
			{"ACK timeouts (from the path)", [2]uint8{ca.Timeout, sa.Timeout}, [2]uint8{12, 12}},
			{"dialer's remote", ca.Remote, b.dev.Addr()},
			{"acceptor's remote", sa.Remote, a.dev.Addr()},
			{"access", sa.AccessFlags, mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic},
		} {
			if chk.got != chk.want {
				t.Errorf("%s: %v, want %v", chk.name, chk.got, chk.want)
			}
		}
		cmExchange(t, a, b, c, s)
		for _, e := range []*cmEnd{a, b} {
			if n := cmCounter(t, e.dev, "cm_established"); n != 1 {
				t.Errorf("cm_established = %d, want 1", n)
			}
		}
		c.Close()
		s.Close()
	})
}

// exchange has the two connections' QPs WRITE and SEND to each other and
// checks the data. Each side's buffer is laid out as: [0,4K) data to send,
// [4K,8K) WRITE target, [8K,12K) receive buffer, with side-specific offsets
// base so that several connections can share a buffer.
func cmExchange(t testing.TB, a, b *cmEnd, c, s *nic.Conn) {
	t.Helper()
	cmExchangeAt(t, a, b, c, s, 0)
}

func cmExchangeAt(t testing.TB, a, b *cmEnd, c, s *nic.Conn, base int) {
	t.Helper()
	const n = 4096
	type side struct {
		end  *cmEnd
		conn *nic.Conn
		peer *cmEnd
	}
	sides := []side{{a, c, b}, {b, s, a}}
	for i, sd := range sides {
		fill := sd.end.mr.Bytes()[base : base+n]
		for j := range fill {
			fill[j] = byte(j*7 + i + base/n)
		}
		if err := sd.conn.QP().PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{sd.end.mr.SGE(base+2*n, n)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sd := range sides {
		peer := sd.peer.mr
		wrs := []verbs.SendWR{
			{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{sd.end.mr.SGE(base, n)}, RemoteAddr: peer.Addr() + uint64(base+n), RKey: peer.RKey()},
			{ID: 3, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{sd.end.mr.SGE(base, n)}},
		}
		if _, err := sd.conn.QP().PostSends(wrs); err != nil {
			t.Fatal(err)
		}
	}
	for _, sd := range sides {
		got := map[uint64]verbs.WCStatus{}
		for len(got) < 3 {
			wc := nictest.Wait(t, sd.end.cq)
			if wc.QPN != sd.conn.QP().Num() {
				t.Fatalf("completion of QP %#x on a CQ shared by another connection's test", wc.QPN)
			}
			got[wc.ID] = wc.Status
		}
		for id, st := range got {
			if st != verbs.Success {
				t.Fatalf("WR %d: %s", id, st)
			}
		}
	}
	for _, sd := range sides {
		sd.conn.QP().Status() // orders the device's writes into the buffer before the reads below
		mine, theirs := sd.end.mr.Bytes(), sd.peer.mr.Bytes()
		if !bytes.Equal(mine[base+n:base+2*n], theirs[base:base+n]) || !bytes.Equal(mine[base+2*n:base+3*n], theirs[base:base+n]) {
			t.Fatalf("QP %#x: WRITE or SEND data differs", sd.conn.QP().Num())
		}
	}
}

func TestDialRejectedByListener(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l := b.listen(t, 0)
		ctx := cmContext(t)
		done := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) {
			return nil, r.Reject([]byte("not today"))
		})
		c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, a.dialOptions())
		<-done
		var rej *nic.RejectError
		if c != nil || !errors.As(err, &rej) {
			t.Fatalf("Dial: %v, %v; want a *RejectError", c, err)
		}
		if rej.Reason != mad.RejectConsumer || string(rej.PrivateData[:9]) != "not today" || rej.Addr != b.dev.Addr() || rej.Port != cmPort {
			t.Errorf("REJ %+v", rej)
		}
		if errors.Is(err, nic.ErrConnRefused) {
			t.Error("a consumer reject is not ECONNREFUSED")
		}
		want := fmt.Sprintf("connection to %v port %d rejected: consumer reject", b.dev.Addr(), cmPort)
		if err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
	})
}

func TestDialNoListener(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		_, err := a.dev.Dial(cmContext(t), b.dev.Addr(), 9999, a.dialOptions())
		if !errors.Is(err, nic.ErrConnRefused) {
			t.Fatalf("Dial: %v, want ECONNREFUSED", err)
		}
		for _, s := range []string{b.dev.Addr().String(), "port 9999", "invalid service ID"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	})
}

// A dial to an address where no softnic runs gives up after the CM
// retries, naming the address.
func TestDialNoDevice(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a := p.cmEnd(t, nic.Config{})
		nobody := netip.MustParseAddrPort("127.0.0.1:9") // discard: nothing answers
		opts := a.dialOptions()
		opts.CMTimeout, opts.CMRetries = 10, 2 // 3 × (4.2 + 67) ms
		start := time.Now()
		_, err := a.dev.Dial(cmContext(t), nobody, cmPort, opts)
		elapsed := time.Since(start)
		if !errors.Is(err, nic.ErrTimedOut) || !strings.Contains(err.Error(), "127.0.0.1:9 port 7471") {
			t.Fatalf("Dial: %v, want a timeout naming 127.0.0.1:9 port 7471", err)
		}
		if elapsed < 3*(4*time.Millisecond+67*time.Millisecond) {
			t.Errorf("gave up after %v, before three tries had timed out", elapsed)
		}
		if n := cmCounter(t, a.dev, "cm_tx_retries"); n != 2 {
			t.Errorf("cm_tx_retries = %d, want 2", n)
		}
	})
}

func TestDialContextCanceled(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a := p.cmEnd(t, nic.Config{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		opts := a.dialOptions()
		opts.CMTimeout = 20
		_, err := a.dev.Dial(ctx, netip.MustParseAddrPort("127.0.0.1:9"), cmPort, opts)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "127.0.0.1:9") {
			t.Fatalf("Dial: %v", err)
		}
	})
}

// cmAttr returns the CM attribute of a packet, if it is a MAD.
func cmAttr(pkt []byte) (mad.AttrID, bool) {
	var p wire.Packet
	var m mad.MAD
	if p.Decode(pkt) != nil || p.BTH.DestQP() != wire.GSIQPN || m.Decode(p.Payload) != nil {
		return 0, false
	}
	return m.AttrID(), true
}

// onFirst returns a SendHook that applies action to the first MAD of
// attribute attr the device sends.
func cmOnFirst(attr mad.AttrID, action nic.SendAction) func([]byte) nic.SendAction {
	var done atomic.Bool
	return func(pkt []byte) nic.SendAction {
		if a, ok := cmAttr(pkt); ok && a == attr && done.CompareAndSwap(false, true) {
			return action
		}
		return nic.SendPass
	}
}

// A lost REQ, REP or RTU is recovered from: the REQ by the dialer's
// retransmission, the REP by the same (the acceptor sends its REP again
// only for a repeated REQ, so that a REQ from a spoofed address brings
// that address one REP), the RTU by the dialer's first request on the QP,
// which establishes the connection at the acceptor as the RTU would.
func TestMADLoss(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		for _, tc := range []struct {
			name   string
			attr   mad.AttrID
			dialer bool // the dialer sends it
		}{
			{"REQ", mad.AttrConnectRequest, true},
			{"REP", mad.AttrConnectReply, false},
			{"RTU", mad.AttrReadyToUse, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				nictest.CheckLeaks(t)
				hook := cmOnFirst(tc.attr, nic.SendDrop)
				var acfg, bcfg nic.Config
				if tc.dialer {
					acfg.SendHook = hook
				} else {
					bcfg.SendHook = hook
				}
				a, b := p.cmEnd(t, acfg), p.cmEnd(t, bcfg)
				l := b.listen(t, 0)
				ctx := cmContext(t)
				accepted := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) { return r.Accept(nic.AcceptOptions{}) })
				c, err := a.dev.Dial(ctx, b.dev.Addr(), l.Port(), a.dialOptions())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				// The dialer's first request, before the acceptor's Accept
				// returns: it is what establishes the connection there when
				// the RTU is lost.
				const off = 1 << 19 // clear of cmExchange's buffers
				wr := verbs.SendWR{ID: 9, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(off, 8)}, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}
				if err := c.QP().PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if wc := nictest.Wait(t, a.cq); wc.ID != 9 || wc.Status != verbs.Success {
					t.Fatalf("first WRITE: %+v", wc)
				}
				s := <-accepted
				if s == nil {
					t.FailNow()
				}
				t.Cleanup(func() { s.Close() })
				cmExchange(t, a, b, c, s)
				sender := a
				if !tc.dialer {
					sender = b
				}
				if n := cmCounter(t, sender.dev, "fault_dropped"); n != 1 {
					t.Errorf("fault_dropped = %d, want 1", n)
				}
				retries := map[bool]uint64{true: 0, false: 0} // by dialer
				if tc.attr != mad.AttrReadyToUse {
					retries[true] = 1
				}
				for _, side := range []struct {
					dialer bool
					end    *cmEnd
				}{{true, a}, {false, b}} {
					if n := cmCounter(t, side.end.dev, "cm_tx_retries"); n != retries[side.dialer] {
						t.Errorf("dialer %v: cm_tx_retries = %d, want %d", side.dialer, n, retries[side.dialer])
					}
					if n := cmCounter(t, side.end.dev, "cm_established"); n != 1 {
						t.Errorf("dialer %v: cm_established = %d, want 1", side.dialer, n)
					}
				}
			})
		}
	})
}

// A REQ that arrives twice makes one connection: the duplicate is answered
// from the communication the first created, with an MRA while the
// application has not answered yet.
func TestDuplicateREQ(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a := p.cmEnd(t, nic.Config{SendHook: cmOnFirst(mad.AttrConnectRequest, nic.SendDuplicate)})
		mra := make(chan struct{})
		var mraOnce sync.Once
		b := p.cmEnd(t, nic.Config{SendHook: func(pkt []byte) nic.SendAction {
			if attr, ok := cmAttr(pkt); ok && attr == mad.AttrMsgRcptAck {
				mraOnce.Do(func() { close(mra) })
			}
			return nic.SendPass
		}})
		l := b.listen(t, 0)
		// The acceptor answers once b has answered the duplicate: answered
		// sooner, the REP could leave before b's reader reached the
		// duplicate, which would then bring the REP again, and a second RTU.
		c, s := connectCMAnswer(t, a, b, l, a.dialOptions(), func(ctx context.Context, r *nic.Request) (*nic.Conn, error) {
			select {
			case <-mra:
			case <-ctx.Done():
				return nil, fmt.Errorf("no MRA for the duplicate REQ: %w", ctx.Err())
			}
			return r.Accept(nic.AcceptOptions{})
		})
		cmExchange(t, a, b, c, s)
		idle, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if r, err := l.AcceptRequest(idle); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second request from %v reached the listener", r.RemoteAddr())
		}
		if n := cmCounter(t, b.dev, "cm_rx_duplicates"); n != 1 {
			t.Errorf("cm_rx_duplicates = %d, want 1", n)
		}
		if n := cmCounter(t, b.dev, "cm_established"); n != 1 {
			t.Errorf("cm_established = %d, want 1", n)
		}
	})
}

func TestDisconnect(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		for _, tc := range []struct {
			name   string
			dialer bool // the dialer closes
		}{{"dialer closes", true}, {"acceptor closes", false}} {
			t.Run(tc.name, func(t *testing.T) {
				nictest.CheckLeaks(t)
				a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
				c, s := connectCM(t, a, b, b.listen(t, 0), a.dialOptions(), nic.AcceptOptions{})
				closer, other, otherEnd := c, s, b
				if !tc.dialer {
					closer, other, otherEnd = s, c, a
				}
				if err := other.QP().PostRecv(&verbs.RecvWR{ID: 42, SGL: []verbs.SGE{otherEnd.mr.SGE(0, 64)}}); err != nil {
					t.Fatal(err)
				}
				if err := closer.Close(); err != nil {
					t.Fatal(err)
				}
				if closer.Err() != nil {
					t.Errorf("closer's Err %v, want nil", closer.Err())
				}
				select {
				case <-closer.Done():
				default:
					t.Error("closer's Done is open after Close")
				}
				select {
				case <-other.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the peer's Done did not close")
				}
				if !errors.Is(other.Err(), nic.ErrConnReset) {
					t.Errorf("peer's Err %v, want ECONNRESET", other.Err())
				}
				if wc := nictest.Wait(t, otherEnd.cq); wc.ID != 42 || wc.Status != verbs.WRFlushErr {
					t.Errorf("the peer's posted receive completed as %v, want WR_FLUSH_ERR", &wc)
				}
				if st := other.QP().Attr().State; st != verbs.Err {
					t.Errorf("peer's QP is %s, want ERR", st)
				}
				for _, e := range []*cmEnd{a, b} {
					// The closer counts when the DREP comes, which its
					// device may process after the peer's Done.
					waitCounter(t, e.dev, "cm_disconnected", 1)
					if n := cmCounter(t, e.dev, "cm_disconnected"); n != 1 {
						t.Errorf("cm_disconnected = %d, want 1", n)
					}
				}
			})
		}
	})
}

// Closing a device disconnects its connections: the peer sees the DREQ.
// TestDeviceCloseDisconnects: closing a device, embedded or attached,
// disconnects its connections (the peer sees ECONNRESET) and flushes their
// QPs' work requests, whose completions can be polled after Close.
func TestDeviceCloseDisconnects(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		nictest.CheckLeaks(t)
		a, b := mode.cmEnd(t, nic.Config{}), openCMEnd(t, nic.Config{})
		c, s := connectCM(t, a, b, b.listen(t, 0), a.dialOptions(), nic.AcceptOptions{})
		if err := c.QP().PostRecv(&verbs.RecvWR{ID: 9}); err != nil {
			t.Fatal(err)
		}
		a.dev.Close()
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the peer's Done did not close")
		}
		if !errors.Is(s.Err(), nic.ErrConnReset) || !errors.Is(c.Err(), nic.ErrClosed) {
			t.Errorf("Err: peer %v (want ECONNRESET), closed side %v (want ErrClosed)", s.Err(), c.Err())
		}
		var wc [2]verbs.WC
		if n, err := a.cq.Poll(wc[:]); n != 1 || wc[0].ID != 9 || wc[0].Status != verbs.WRFlushErr {
			t.Errorf("Poll after Close: %d completions (%v), %v; want WR_FLUSH_ERR for the receive", n, wc[0].String(), err)
		}
	})
}

// A peer that vanishes without a word is noticed when the QP runs out of
// retries: Done closes and Err says RETRY_EXC_ERR.
func TestPeerVanishes(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		var silent atomic.Bool
		a := p.cmEnd(t, nic.Config{})
		b := p.cmEnd(t, nic.Config{SendHook: func([]byte) nic.SendAction {
			if silent.Load() {
				return nic.SendDrop
			}
			return nic.SendPass
		}})
		opts := a.dialOptions()
		opts.RetryCount, opts.Timeout = 2, 10 // 3 × 4.2 ms
		c, _ := connectCM(t, a, b, b.listen(t, 0), opts, nic.AcceptOptions{})
		silent.Store(true)
		if err := c.QP().PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done did not close")
		}
		var qerr *nic.QPError
		if !errors.As(c.Err(), &qerr) || qerr.Status != verbs.RetryExcErr || !errors.Is(c.Err(), nic.ErrTimedOut) {
			t.Fatalf("Err %v, want RETRY_EXC_ERR", c.Err())
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.RetryExcErr {
			t.Errorf("completion %v, want RETRY_EXC_ERR", &wc)
		}
		start := time.Now()
		c.Close() // sends a DREQ but does not wait for the silent peer
		if d := time.Since(start); d > time.Second {
			t.Errorf("Close of a failed connection took %v", d)
		}
	})
}

func TestListenBusy(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		b := p.cmEnd(t, nic.Config{})
		l := b.listen(t, 0)
		if _, err := b.dev.Listen(cmPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}}); !errors.Is(err, nic.ErrBusy) {
			t.Fatalf("second Listen: %v, want EBUSY", err)
		}
		l.Close()
		if _, err := l.AcceptRequest(context.Background()); !errors.Is(err, nic.ErrClosed) {
			t.Errorf("AcceptRequest after Close: %v", err)
		}
		l2 := b.listen(t, 0)
		if l2.Port() != cmPort {
			t.Errorf("port %d", l2.Port())
		}
	})
}

// TestListenHeld: a held listener keeps its port from other listeners
// and refuses connections and resolutions as a port nobody listens on
// does; once open, it takes them.
func TestListenHeld(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		ctx := cmContext(t)
		l, err := b.dev.Listen(cmPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}, Held: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ul, err := b.dev.ListenUD(udPort, nic.ListenUDOptions{Held: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		if _, err := b.dev.Listen(cmPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}}); !errors.Is(err, nic.ErrBusy) {
			t.Errorf("Listen on the held port: %v, want EBUSY", err)
		}
		if _, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, a.dialOptions()); !errors.Is(err, nic.ErrConnRefused) || !strings.Contains(err.Error(), "invalid service ID") {
			t.Errorf("Dial to the held port: %v, want ECONNREFUSED, invalid service ID", err)
		}
		var sidr *nic.SIDRError
		if _, err := a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello")); !errors.As(err, &sidr) || sidr.Status != mad.SIDRUnsupported {
			t.Errorf("Resolve the held port: %v, want a SIDRError, service ID not supported", err)
		}
		if err := l.Open(-1); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("Open(-1): %v, want ErrInvalid", err)
		}
		if err := l.Open(0); err != nil {
			t.Fatal(err)
		}
		if err := ul.Open(0); err != nil {
			t.Fatal(err)
		}
		done := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) { return r.Accept(nic.AcceptOptions{}) })
		c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, a.dialOptions())
		if err != nil {
			t.Fatalf("Dial once the listener is open: %v", err)
		}
		defer c.Close()
		if sc := <-done; sc != nil {
			defer sc.Close()
		}
		answered := answerUD(ctx, t, ul, func(r *nic.Request) error { return r.Reject(nil) })
		if _, err := a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello")); !errors.As(err, &sidr) || sidr.Status != mad.SIDRReject {
			t.Errorf("Resolve once the UD listener is open: %v, want the listener's reject", err)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
		l.Close()
		if err := l.Open(0); !errors.Is(err, nic.ErrClosed) {
			t.Errorf("Open after Close: %v, want ErrClosed", err)
		}
	})
}

// TestAcceptTimeout: the accepting QP takes the REQ's local ACK timeout,
// the dialer's, unless AcceptOptions.Timeout sets its own (rdma_cm's
// RDMA_OPTION_ID_ACK_TIMEOUT on the accepting id); one past 31 is refused.
func TestAcceptTimeout(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l := b.listen(t, 0)
		ctx := cmContext(t)
		for _, tc := range []struct{ dial, accept, want uint8 }{{12, 0, 12}, {12, 9, 9}, {0, 18, 18}} {
			done := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) {
				if _, err := r.Accept(nic.AcceptOptions{Timeout: 32}); !errors.Is(err, nic.ErrInvalid) {
					t.Errorf("Accept with timeout 32: %v, want ErrInvalid", err)
				}
				return r.Accept(nic.AcceptOptions{Timeout: tc.accept})
			})
			opts := a.dialOptions()
			opts.Timeout = tc.dial
			c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, opts)
			if err != nil {
				t.Fatal(err)
			}
			sc := <-done
			if sc == nil {
				t.Fatal("not accepted")
			}
			if got := sc.QP().Attr().Timeout; got != tc.want {
				t.Errorf("dial timeout %d, accept timeout %d: the accepting QP's is %d, want %d", tc.dial, tc.accept, got, tc.want)
			}
			if got, want := c.QP().Attr().Timeout, cmp.Or(tc.dial, 14); got != want {
				t.Errorf("dial timeout %d: the dialing QP's is %d, want %d", tc.dial, got, want)
			}
			c.Close()
			sc.Close()
		}
	})
}

func TestCMOptionErrors(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{MTU: 1024}), p.cmEnd(t, nic.Config{})
		ctx := cmContext(t)
		good := a.dialOptions()
		for _, tc := range []struct {
			name string
			mod  func(*nic.DialOptions)
		}{
			{"no PD", func(o *nic.DialOptions) { o.PD = nil }},
			{"PD of another device", func(o *nic.DialOptions) { o.PD = b.pd }},
			{"57 bytes of private data", func(o *nic.DialOptions) { o.PrivateData = make([]byte, 57) }},
			{"MTU above the device's", func(o *nic.DialOptions) { o.MTU = 2048 }},
			{"MTU not a power of two", func(o *nic.DialOptions) { o.MTU = 1000 }},
			{"retry count 8", func(o *nic.DialOptions) { o.RetryCount = 8 }},
			{"16 CM retries", func(o *nic.DialOptions) { o.CMRetries = 16 }},
			{"CM timeout 32", func(o *nic.DialOptions) { o.CMTimeout = 32 }},
			{"UD QP", func(o *nic.DialOptions) { o.QP.Type = verbs.UD }},
			{"no send CQ", func(o *nic.DialOptions) { o.QP.SendCQ = nil }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := good
				tc.mod(&o)
				if _, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, o); !errors.Is(err, nic.ErrInvalid) {
					t.Errorf("Dial: %v, want EINVAL", err)
				}
			})
		}
		if _, err := b.dev.Listen(1, nic.ListenOptions{QP: nic.QPConfig{SendCQ: b.cq}}); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("Listen without a PD: %v", err)
		}
	})
}

// A dialer with a larger MTU than the listener's connects at the smaller.
func TestMTUNegotiation(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{MTU: 4096}), p.cmEnd(t, nic.Config{MTU: 512})
		c, s := connectCM(t, a, b, b.listen(t, 0), a.dialOptions(), nic.AcceptOptions{})
		if ca, sa := c.QP().Attr(), s.QP().Attr(); ca.PathMTU != 512 || sa.PathMTU != 512 {
			t.Fatalf("path MTUs %d and %d, want 512", ca.PathMTU, sa.PathMTU)
		}
		cmExchange(t, a, b, c, s)
	})
}

// 100 dials at once to one listener: every one connects, and every QP pair
// carries a WRITE and a SEND each way.
func TestConcurrentDials(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		const n = 100
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l := b.listen(t, n)
		ctx := cmContext(t)
		accepted := make(chan *nic.Conn, n)
		opts := a.dialOptions()
		// The acceptor answers one request at a time: give the dialers time.
		opts.CMTimeout, opts.CMRetries = 16, 15
		go func() {
			for range n {
				c, err := l.Accept(ctx)
				if err != nil {
					t.Errorf("Accept: %v", err)
					return
				}
				accepted <- c
			}
		}()
		dialed := make([]*nic.Conn, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				opts := opts
				opts.PrivateData = fmt.Appendf(nil, "dial %d", i)
				c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, opts)
				if err != nil {
					t.Errorf("dial %d: %v", i, err)
					return
				}
				dialed[i] = c
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		// Pair each accepted connection with its dialer by QP numbers.
		byQPN := map[uint32]*nic.Conn{}
		for range n {
			s := <-accepted
			byQPN[s.QP().Attr().DestQPN] = s
			t.Cleanup(func() { s.Close() })
		}
		for i, c := range dialed {
			t.Cleanup(func() { c.Close() })
			s := byQPN[c.QP().Num()]
			if s == nil || s.QP().Num() != c.QP().Attr().DestQPN {
				t.Fatalf("dial %d: no matching accepted connection", i)
			}
			if got, want := string(s.PrivateData()[:len(fmt.Sprint("dial ", i))]), fmt.Sprint("dial ", i); got != want {
				t.Errorf("accepted connection carries %q, want %q", got, want)
			}
			cmExchangeAt(t, a, b, c, s, (i%64)*3*4096)
		}
		if got := cmCounter(t, b.dev, "cm_established"); got != n {
			t.Errorf("cm_established = %d, want %d", got, n)
		}
	})
}

// The connection manager over IPv6 (rdma_cm's header then carries IPv6
// addresses), and between two QPs of one device.
func TestDialFamilies(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		for _, tc := range []struct {
			name string
			addr string
			self bool
		}{
			{"IPv6", "[::1]:0", false},
			{"one device", "127.0.0.1:0", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				nictest.CheckLeaks(t)
				cfg := nic.Config{Addr: netip.MustParseAddrPort(tc.addr)}
				a := p.cmEnd(t, cfg)
				b := a
				if !tc.self {
					b = p.cmEnd(t, cfg)
				}
				c, s := connectCM(t, a, b, b.listen(t, 0), a.dialOptions(), nic.AcceptOptions{})
				if c.QP().Attr().DestQPN != s.QP().Num() || s.RemoteAddr() != a.dev.Addr() {
					t.Fatalf("connected to QP %#x at %v", c.QP().Attr().DestQPN, s.RemoteAddr())
				}
				if !tc.self { // (the data exchange needs a buffer and a CQ per side)
					cmExchange(t, a, b, c, s)
				}
				c.Close()
				<-s.Done()
			})
		}
	})
}

// BenchmarkDialAccept measures a whole connection's life on loopback:
// REQ, REP, RTU, then DREQ and DREP.
func BenchmarkDialAccept(b *testing.B) {
	a, s := openCMEnd(b, nic.Config{}), openCMEnd(b, nic.Config{})
	l := s.listen(b, 0)
	ctx := cmContext(b)
	accepted := make(chan *nic.Conn)
	go func() {
		for {
			c, err := l.Accept(ctx)
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	b.ReportAllocs()
	for b.Loop() {
		c, err := a.dev.Dial(ctx, s.dev.Addr(), cmPort, a.dialOptions())
		if err != nil {
			b.Fatal(err)
		}
		sc := <-accepted
		c.Close()
		<-sc.Done()
		sc.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
	l.Close()
}

// An accepted QP may take its receive WRs from an SRQ (the REP says so).
func TestAcceptWithSRQ(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		srq, err := b.pd.CreateSRQ(16, 1)
		if err != nil {
			t.Fatal(err)
		}
		l, err := b.dev.Listen(cmPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq, SRQ: srq}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, s := connectCM(t, a, b, l, a.dialOptions(), nic.AcceptOptions{})
		if err := srq.PostRecv(&verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		copy(a.mr.Bytes(), "through the SRQ")
		if err := c.QP().PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.mr.SGE(0, 15)}}); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, b.cq); wc.ID != 9 || wc.Status != verbs.Success || wc.QPN != s.QP().Num() || wc.ByteLen != 15 {
			t.Fatalf("receive completion %v", &wc)
		}
		s.QP().Status()
		if got := string(b.mr.Bytes()[:15]); got != "through the SRQ" {
			t.Errorf("received %q", got)
		}
	})
}
