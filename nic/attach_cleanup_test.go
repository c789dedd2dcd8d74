package nic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire/mad"
)

// TestAttachDetachRejectsTakenRequests: a connection request the process
// took from its listener but never answered is rejected when the process
// detaches, as the requests still in the backlog are: the peer's dial
// ends at once with a REJ instead of waiting out the CM's retries.
func TestAttachDetachRejectsTakenRequests(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	dev, err := nic.Open(nic.Config{Attach: d.path})
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	l, err := dev.Listen(6100, nic.ListenOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
	if err != nil {
		t.Fatal(err)
	}
	peer := openCMEnd(t, nic.Config{})
	dialed := make(chan error, 1)
	go func() {
		_, err := peer.dev.Dial(cmContext(t), d.dev.Addr(), 6100, peer.dialOptions())
		dialed <- err
	}()
	if _, err := l.AcceptRequest(cmContext(t)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dev.Close()
	err = <-dialed
	var rej *nic.RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejectConsumer {
		t.Fatalf("the peer's dial after the process detached: %v, want a consumer REJ", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the REJ came %v after the detach", took)
	}
}

// TestAttachConnEndedAtOnce: a connection that ends as soon as it is made
// (the peer disconnects on accepting) still ends for the attached
// process: the daemon's news of the end must not reach the process before
// its answer to the dial, or the process, not knowing the connection yet,
// drops it and the connection's Done never closes.
func TestAttachConnEndedAtOnce(t *testing.T) {
	d := startDaemon(t, nic.Config{})
	dev := attachTo(t, d)
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	peer := openCMEnd(t, nic.Config{})
	l := peer.listen(t, 8)
	for i := range 100 {
		accepted := acceptAsync(t, cmContext(t), l, func(r *nic.Request) (*nic.Conn, error) {
			c, err := r.Accept(nic.AcceptOptions{})
			if err == nil {
				c.Close()
			}
			return c, err
		})
		c, err := dev.Dial(cmContext(t), peer.dev.Addr(), cmPort, nic.DialOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}})
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		<-accepted
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d: the peer disconnected, Done did not close", i)
		}
		c.Close()
	}
}
