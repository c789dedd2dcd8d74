package nic_test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// TestSelfConnect: both sides connect their QPs themselves with the
// attributes the handshake negotiated, as rping -q does; the acceptor's
// connection is established once the dialer's Establish sends the RTU,
// and the QPs then carry a SEND.
func TestSelfConnect(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := cmContext(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l := b.listen(t, 0)
		aq, err := a.pd.CreateQP(nic.QPConfig{SendCQ: a.cq})
		if err != nil {
			t.Fatal(err)
		}
		defer aq.Destroy()
		bq, err := b.pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
		if err != nil {
			t.Fatal(err)
		}
		defer bq.Destroy()

		accepted := acceptAsync(t, ctx, l, func(r *nic.Request) (*nic.Conn, error) {
			if _, err := r.Accept(nic.AcceptOptions{SelfConnect: true}); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("Accept with SelfConnect and no QP: %v, want ErrInvalid", err)
			}
			p := r.Params()
			if p == nil {
				t.Fatal("a request with no Params")
			}
			if p.RemoteQPN != aq.Num() {
				t.Errorf("request's remote QPN %#x, want %#x", p.RemoteQPN, aq.Num())
			}
			// Connected before the accept, as rping -q's server does.
			if err := bq.Connect(p.Remote, p.RemoteQPN, p.Options); err != nil {
				return nil, err
			}
			if err := bq.PostRecv(&verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
				return nil, err
			}
			return r.Accept(nic.AcceptOptions{UseQP: bq, SelfConnect: true})
		})
		o := a.dialOptions()
		o.UseQP, o.SelfConnect = aq, true
		c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if st := aq.Attr().State; st != verbs.Reset {
			t.Errorf("the dialer's QP is %v at the REP, want it untouched (RESET)", st)
		}
		cp := c.Params()
		if cp == nil || cp.RemoteQPN != bq.Num() {
			t.Fatalf("the dial's Params %+v, want the acceptor's QPN %#x", cp, bq.Num())
		}
		if err := aq.Connect(cp.Remote, cp.RemoteQPN, cp.Options); err != nil {
			t.Fatal(err)
		}
		if err := c.Establish(); err != nil {
			t.Fatal(err)
		}
		if err := c.Establish(); err == nil {
			t.Error("a second Establish succeeded")
		}
		s := <-accepted
		if s == nil {
			t.FailNow()
		}
		defer s.Close()
		if s.Params() != nil || !errors.Is(s.Establish(), nic.ErrInvalid) {
			t.Errorf("the acceptor's connection has Params %v, or an Establish", s.Params())
		}
		copy(a.mr.Bytes(), "ping")
		if err := aq.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 4)}}); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
			t.Fatalf("a's send: %v", &wc)
		}
		if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success || string(b.mr.Bytes()[:4]) != "ping" {
			t.Fatalf("b's receive: %v %q", &wc, b.mr.Bytes()[:4])
		}
	})
}

// TestSelfConnectClosedEarly: a Dial with SelfConnect closed before its
// Establish refuses the REP, and the acceptor's Accept fails with the
// REJ (ECONNRESET: the request was withdrawn) rather than wait.
func TestSelfConnectClosedEarly(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := cmContext(t)
		a, b := p.cmEnd(t, nic.Config{}), p.cmEnd(t, nic.Config{})
		l := b.listen(t, 0)
		aq, err := a.pd.CreateQP(nic.QPConfig{SendCQ: a.cq})
		if err != nil {
			t.Fatal(err)
		}
		defer aq.Destroy()
		accepted := make(chan error, 1)
		go func() {
			r, err := l.AcceptRequest(ctx)
			if err == nil {
				var c *nic.Conn
				if c, err = r.Accept(nic.AcceptOptions{}); err == nil {
					c.Close()
				}
			}
			accepted <- err
		}()
		o := a.dialOptions()
		o.UseQP, o.SelfConnect = aq, true
		c, err := a.dev.Dial(ctx, b.dev.Addr(), cmPort, o)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if err := <-accepted; !errors.Is(err, nic.ErrConnReset) {
			t.Errorf("accepting a dial closed before its Establish: %v, want ErrConnReset", err)
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Error("the closed connection is not done")
		}
	})
}
