package nic_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// takeRequest has peer dial l and returns the request, unanswered, with
// the dial's outcome to come. A dialed connection stays up until the test
// ends.
func takeRequest(t *testing.T, peer, srv *cmEnd, l *nic.Listener) (*nic.Request, <-chan error) {
	t.Helper()
	dialed := make(chan error, 1)
	go func() {
		c, err := peer.dev.Dial(cmContext(t), srv.dev.Addr(), l.Port(), peer.dialOptions())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		dialed <- err
	}()
	r, err := l.AcceptRequest(cmContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return r, dialed
}

// TestListenerAfterCloseParity: the calls of a closed listener, of a
// request it received and of a closed connection return the same errors
// embedded and attached. Accept loops stop on errors.Is(err, ErrClosed),
// and deferred Closes expect nil.
func TestListenerAfterCloseParity(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, srv, peer *cmEnd, l *nic.Listener)
	}{
		{"close twice", func(t *testing.T, _, _ *cmEnd, l *nic.Listener) {
			for i := range 2 {
				if err := l.Close(); err != nil {
					t.Errorf("Close #%d: %v, want nil", i+1, err)
				}
			}
		}},
		{"calls after close", func(t *testing.T, _, _ *cmEnd, l *nic.Listener) {
			l.Close()
			if _, err := l.AcceptRequest(cmContext(t)); !errors.Is(err, nic.ErrClosed) {
				t.Errorf("AcceptRequest: %v, want ErrClosed", err)
			}
			if _, err := l.Accept(cmContext(t)); !errors.Is(err, nic.ErrClosed) {
				t.Errorf("Accept: %v, want ErrClosed", err)
			}
		}},
		{"close ends a waiting AcceptRequest", func(t *testing.T, _, _ *cmEnd, l *nic.Listener) {
			waited := make(chan error, 1)
			go func() {
				_, err := l.AcceptRequest(cmContext(t))
				waited <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it wait, mostly
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-waited; !errors.Is(err, nic.ErrClosed) {
				t.Errorf("AcceptRequest: %v, want ErrClosed", err)
			}
		}},
		{"close after the device closed", func(t *testing.T, srv, _ *cmEnd, l *nic.Listener) {
			srv.dev.Close()
			if _, err := l.AcceptRequest(cmContext(t)); !errors.Is(err, nic.ErrClosed) {
				t.Errorf("AcceptRequest: %v, want ErrClosed", err)
			}
			for i := range 2 {
				if err := l.Close(); err != nil {
					t.Errorf("Close #%d: %v, want nil", i+1, err)
				}
			}
		}},
		{"accept a request after close", func(t *testing.T, srv, peer *cmEnd, l *nic.Listener) {
			r, dialed := takeRequest(t, peer, srv, l)
			l.Close()
			c, err := r.Accept(nic.AcceptOptions{})
			if err != nil {
				t.Fatalf("Accept of a request taken before Close: %v", err)
			}
			defer c.Close()
			if err := <-dialed; err != nil {
				t.Errorf("dial: %v", err)
			}
			if _, err := r.Accept(nic.AcceptOptions{}); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("second Accept: %v, want ErrInvalid", err)
			}
			if err := r.Reject(nil); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("Reject after Accept: %v, want ErrInvalid", err)
			}
		}},
		{"answer a request again", func(t *testing.T, srv, peer *cmEnd, l *nic.Listener) {
			dialed := make(chan *nic.Conn, 1)
			go func() {
				c, err := peer.dev.Dial(cmContext(t), srv.dev.Addr(), l.Port(), peer.dialOptions())
				if err != nil {
					t.Error(err)
				}
				dialed <- c
			}()
			r, err := l.AcceptRequest(cmContext(t))
			if err != nil {
				t.Fatal(err)
			}
			c, err := r.Accept(nic.AcceptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			pc := <-dialed
			if pc == nil {
				t.FailNow()
			}
			if err := c.QP().PostRecv(&verbs.RecvWR{ID: 88}); err != nil {
				t.Fatal(err)
			}
			// Established: EINVAL, saying so.
			_, err = r.Accept(nic.AcceptOptions{})
			if !errors.Is(err, nic.ErrInvalid) || !strings.Contains(err.Error(), "ESTABLISHED") {
				t.Errorf("second Accept: %v, want ErrInvalid, ESTABLISHED", err)
			}
			if err := r.Reject(nil); !errors.Is(err, nic.ErrInvalid) || !strings.Contains(err.Error(), "ESTABLISHED") {
				t.Errorf("Reject after Accept: %v, want ErrInvalid, ESTABLISHED", err)
			}
			// Disconnected by the peer: why the connection ended.
			pc.Close()
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the peer's disconnect did not end the connection")
			}
			// The refused answers left the connection's QP alone: the
			// disconnect flushed it.
			if wc := nictest.Wait(t, srv.cq); wc.ID != 88 || wc.Status != verbs.WRFlushErr {
				t.Errorf("the receive completed %v, want WR_FLUSH_ERR", &wc)
			}
			if _, err := r.Accept(nic.AcceptOptions{}); !errors.Is(err, nic.ErrConnReset) {
				t.Errorf("Accept after the peer disconnected: %v, want ECONNRESET", err)
			}
			if err := r.Reject(nil); !errors.Is(err, nic.ErrConnReset) {
				t.Errorf("Reject after the peer disconnected: %v, want ECONNRESET", err)
			}
		}},
		{"reject a request after close", func(t *testing.T, srv, peer *cmEnd, l *nic.Listener) {
			r, dialed := takeRequest(t, peer, srv, l)
			l.Close()
			if err := r.Reject(nil); err != nil {
				t.Fatalf("Reject of a request taken before Close: %v", err)
			}
			if err := <-dialed; !errors.As(err, new(*nic.RejectError)) {
				t.Errorf("dial: %v, want a RejectError", err)
			}
			if err := r.Reject(nil); !errors.Is(err, nic.ErrInvalid) {
				t.Errorf("second Reject: %v, want ErrInvalid", err)
			}
		}},
		{"connection after close", func(t *testing.T, srv, peer *cmEnd, l *nic.Listener) {
			r, dialed := takeRequest(t, peer, srv, l)
			c, err := r.Accept(nic.AcceptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			<-dialed
			// A receive still posted when the connection closes is flushed
			// (attached, it may still wait in its ring).
			if err := c.QP().PostRecv(&verbs.RecvWR{ID: 77}); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := c.Close(); err != nil {
					t.Errorf("Close #%d: %v, want nil", i+1, err)
				}
			}
			if wc := nictest.Wait(t, srv.cq); wc.ID != 77 || wc.Status != verbs.WRFlushErr {
				t.Errorf("the receive completed %v, want WR_FLUSH_ERR", &wc)
			}
			select {
			case <-c.Done():
			default:
				t.Error("Done is open after Close")
			}
			if err := c.Err(); err != nil {
				t.Errorf("Err after Close: %v, want nil", err)
			}
		}},
	}
	forEachProvider(t, func(t *testing.T, mode provider) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				srv, peer := mode.cmEnd(t, nic.Config{}), openCMEnd(t, nic.Config{})
				l, err := srv.dev.Listen(cmPort, nic.ListenOptions{PD: srv.pd, QP: nic.QPConfig{SendCQ: srv.cq}})
				if err != nil {
					t.Fatal(err)
				}
				tc.run(t, srv, peer, l)
			})
		}
	})
}

// TestListenFreePortParity: Listen and ListenUD on port 0 pick a port not
// listened on, the same embedded and attached: two listeners of port 0
// get two ports, which Listener.Port says and which a Listen of that
// port then finds busy, and a peer dials it.
func TestListenFreePortParity(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		srv, peer := mode.cmEnd(t, nic.Config{}), openCMEnd(t, nic.Config{})
		opts := nic.ListenOptions{PD: srv.pd, QP: nic.QPConfig{SendCQ: srv.cq}}
		var ports []uint16
		for range 2 {
			l, err := srv.dev.Listen(0, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ports = append(ports, l.Port())
		}
		u, err := srv.dev.ListenUD(0, nic.ListenUDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if ports[0] == 0 || ports[1] == 0 || ports[0] == ports[1] || u.Port() == 0 {
			t.Fatalf("listeners of port 0 got ports %d and %d, and of the UDP port space %d: want ports of their own", ports[0], ports[1], u.Port())
		}
		if _, err := srv.dev.Listen(ports[1], opts); !errors.Is(err, nic.ErrBusy) {
			t.Errorf("Listen on port %d, which port 0's listener took: %v, want ErrBusy", ports[1], err)
		}
		l, err := srv.dev.Listen(0, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		r, dialed := takeRequest(t, peer, srv, l)
		c, err := r.Accept(nic.AcceptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := <-dialed; err != nil {
			t.Errorf("dialing port %d of a listener of port 0: %v", l.Port(), err)
		}
	})
}
