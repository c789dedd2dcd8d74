package nic_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// rdma_cm's UDP port space over real UDP sockets on loopback: a device
// resolves a port of another to its UD QP (SIDR_REQ, SIDR_REP) and the two
// exchange UD SENDs, embedded and attached alike.

const udPort = 7174

// udQP makes a UD QP of e in RTS with rdma_cm's Q_Key.
func udQP(t testing.TB, e *cmEnd) *nic.QP {
	t.Helper()
	q, err := e.pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: e.cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{QKey: nic.RDMAUDPQKey}); err != nil {
		t.Fatal(err)
	}
	return q
}

// resolveOptions are the tests' resolve options: each SIDR_REQ waits
// 2^18 × 4.096 µs ≈ 1.07 s for its answer (see cmEnd.dialOptions).
func resolveOptions(private string) nic.ResolveOptions {
	return nic.ResolveOptions{PrivateData: []byte(private), CMTimeout: 18, CMRetries: 5}
}

// answerUD answers the next request of l with f in a goroutine, and
// returns its error.
func answerUD(ctx context.Context, t *testing.T, l *nic.Listener, f func(*nic.Request) error) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := l.AcceptRequest(ctx)
		if err == nil {
			if !r.UD() || string(bytes.TrimRight(r.PrivateData(), "\x00")) != "hello" {
				t.Errorf("request UD=%v with private data %q, want a resolution with \"hello\"", r.UD(), r.PrivateData()[:8])
			}
			err = f(r)
		}
		done <- err
	}()
	return done
}

func TestResolveUD(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		nictest.CheckLeaks(t)
		ctx := cmContext(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l, err := b.dev.ListenUD(udPort, nic.ListenUDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		aq, bq := udQP(t, a), udQP(t, b)
		// Receive buffers: a GRH's 40 bytes, then the message.
		for i, e := range []*cmEnd{a, b} {
			q := []*nic.QP{aq, bq}[i]
			if err := q.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{e.mr.SGE(4096, wire.GRHSize+64)}}); err != nil {
				t.Fatal(err)
			}
		}
		answered := answerUD(ctx, t, l, func(r *nic.Request) error {
			if _, err := r.Accept(nic.AcceptOptions{}); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("Accept of a resolution: %v, want ErrInvalid", err)
			}
			rc, err := b.pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
			if err != nil {
				return err
			}
			defer rc.Destroy()
			if err := r.AcceptUD(rc, nil); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("AcceptUD with an RC QP: %v, want ErrInvalid", err)
			}
			return r.AcceptUD(bq, []byte("welcome"))
		})
		peer, err := a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello"))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
		if peer.Addr != b.dev.Addr() || peer.QPN != bq.Num() || peer.QKey != nic.RDMAUDPQKey ||
			string(bytes.TrimRight(peer.PrivateData, "\x00")) != "welcome" {
			t.Fatalf("resolved %+v, want %v QP %#x Q_Key %#x \"welcome\"", peer, b.dev.Addr(), bq.Num(), nic.RDMAUDPQKey)
		}

		// a sends to what it resolved; b answers the sender its receive
		// names.
		copy(a.mr.Bytes(), "ping")
		if err := aq.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 4)},
			Dest: peer.Addr, DestQPN: peer.QPN, QKey: peer.QKey}); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success || wc.Opcode != verbs.WCSend {
			t.Fatalf("a's send: %v", &wc)
		}
		wc := nictest.Wait(t, b.cq)
		if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || wc.SrcQPN != aq.Num() ||
			string(b.mr.Bytes()[4096+wire.GRHSize:4096+wc.ByteLen]) != "ping" {
			t.Fatalf("b's receive: %v from QP %#x: %q", &wc, wc.SrcQPN, b.mr.Bytes()[4096+wire.GRHSize:4096+wc.ByteLen])
		}
		copy(b.mr.Bytes(), "pong")
		if err := bq.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{b.mr.SGE(0, 4)},
			Dest: wc.Src, DestQPN: wc.SrcQPN, QKey: nic.RDMAUDPQKey}); err != nil {
			t.Fatal(err)
		}
		wc = nictest.Wait(t, a.cq)
		if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecv || string(a.mr.Bytes()[4096+wire.GRHSize:4096+wc.ByteLen]) != "pong" {
			t.Fatalf("a's receive: %v", &wc)
		}
	})
}

// TestResolveUDRefused: a port nothing listens on is ErrConnRefused, a
// rejection a *SIDRError with the rejecter's private data, and a TCP
// listener of the port takes no resolution.
func TestResolveUDRefused(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := cmContext(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		tcp, err := b.dev.Listen(udPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}})
		if err != nil {
			t.Fatal(err)
		}
		defer tcp.Close()
		_, err = a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello"))
		var sidr *nic.SIDRError
		if !errors.Is(err, nic.ErrConnRefused) || !errors.As(err, &sidr) || sidr.Status != mad.SIDRUnsupported {
			t.Errorf("resolving a port nothing listens on: %v, want a SIDRError, ErrConnRefused", err)
		}

		l, err := b.dev.ListenUD(udPort, nic.ListenUDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := b.dev.ListenUD(udPort, nic.ListenUDOptions{}); !errors.Is(err, nic.ErrBusy) {
			t.Errorf("a second UD listener on the port: %v, want ErrBusy", err)
		}
		answered := answerUD(ctx, t, l, func(r *nic.Request) error {
			if err := r.Reject(make([]byte, mad.SIDRREPPrivateDataSize+1)); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("a reject with more private data than a SIDR_REP carries: %v, want ErrInvalid", err)
			}
			return r.Reject([]byte("no"))
		})
		_, err = a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello"))
		if !errors.As(err, &sidr) || sidr.Status != mad.SIDRReject || errors.Is(err, nic.ErrConnRefused) ||
			string(bytes.TrimRight(sidr.PrivateData, "\x00")) != "no" {
			t.Errorf("a rejected resolution: %v, want a SIDRError \"rejected by the service\" with \"no\"", err)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
		if _, err := a.dev.Resolve(ctx, netip.AddrPort{}, udPort, nic.ResolveOptions{}); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("resolving no address: %v, want ErrInvalid", err)
		}
	})
}

// TestPortSpaceIB: rdma_cm's IB port space carries connections and
// resolutions, and its ports are not the TCP and UDP ones of the same
// number; a port of it is one listener's, of either kind.
func TestPortSpaceIB(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := cmContext(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l, err := b.dev.Listen(cmPort, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}, PortSpace: nic.PortSpaceIB})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := b.dev.ListenUD(cmPort, nic.ListenUDOptions{PortSpace: nic.PortSpaceIB}); !errors.Is(err, nic.ErrBusy) {
			t.Errorf("a UD listener on the IB port of a connection listener: %v, want ErrBusy", err)
		}
		if _, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, a.dialOptions()); !errors.Is(err, nic.ErrConnRefused) {
			t.Errorf("dialling TCP port %d, listened on in the IB port space: %v, want ErrConnRefused", cmPort, err)
		}
		dopts := a.dialOptions()
		dopts.PortSpace, dopts.PrivateData = nic.PortSpaceIB, []byte("hi")
		c, s := connectCM(t, a, b, l, dopts, nic.AcceptOptions{})
		if string(bytes.TrimRight(s.PrivateData(), "\x00")) != "hi" || c.QP().Attr().State != verbs.RTS {
			t.Errorf("connected in the IB port space: private data %q, QP %v", s.PrivateData()[:4], c.QP().Attr().State)
		}

		ul, err := b.dev.ListenUD(udPort, nic.ListenUDOptions{PortSpace: nic.PortSpaceIB})
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		if _, err := a.dev.Resolve(ctx, b.dev.Addr(), udPort, resolveOptions("hello")); !errors.Is(err, nic.ErrConnRefused) {
			t.Errorf("resolving UDP port %d, listened on in the IB port space: %v, want ErrConnRefused", udPort, err)
		}
		bq := udQP(t, b)
		answered := answerUD(ctx, t, ul, func(r *nic.Request) error { return r.AcceptUD(bq, nil) })
		ro := resolveOptions("hello")
		ro.PortSpace = nic.PortSpaceIB
		peer, err := a.dev.Resolve(ctx, b.dev.Addr(), udPort, ro)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
		if peer.QPN != bq.Num() {
			t.Errorf("resolved QP %#x in the IB port space, want %#x", peer.QPN, bq.Num())
		}

		// Connections are not made in the UDP port space, nor resolutions
		// in the TCP one.
		bad := a.dialOptions()
		bad.PortSpace = nic.PortSpaceUDP
		ro.PortSpace = nic.PortSpaceTCP
		for what, err := range map[string]error{
			"Listen in the UDP port space": func() error {
				_, err := b.dev.Listen(1, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}, PortSpace: nic.PortSpaceUDP})
				return err
			}(),
			"ListenUD in the TCP port space": func() error {
				_, err := b.dev.ListenUD(1, nic.ListenUDOptions{PortSpace: nic.PortSpaceTCP})
				return err
			}(),
			"Dial in the UDP port space": func() error {
				_, err := a.dev.Dial(ctx, b.dev.Addr(), 1, bad)
				return err
			}(),
			"Resolve in the TCP port space": func() error {
				_, err := a.dev.Resolve(ctx, b.dev.Addr(), 1, ro)
				return err
			}(),
		} {
			if !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", what, err)
			}
		}
	})
}
