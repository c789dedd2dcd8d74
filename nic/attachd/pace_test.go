package attachd

import (
	"net"
	"testing"
	"time"

	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
)

// unpaced lets a fuzz target attach for every input, as fast as it runs:
// the pace is TestAttachPace's.
var unpaced = AttachPace{Burst: 1 << 20, Rate: 1 << 20}

// TestAttachPace: a user's attaches beyond AttachPace's burst wait for
// their turn at its rate, each counted once, and still attach.
func TestAttachPace(t *testing.T) {
	const burst, rate, n = 4, 50, 14
	_, srv, path := serveTest(t, Config{Attaches: AttachPace{Burst: burst, Rate: rate}})
	start := time.Now()
	for i := range n {
		c := attachRaw(t, path)
		c.Close()
		if i < burst && srv.PacedAttaches() != 0 {
			t.Fatalf("attach %d of a burst of %d waited", i+1, burst)
		}
	}
	took := time.Since(start)
	if want := time.Duration(n-burst) * time.Second / rate; took < want*9/10 {
		t.Errorf("%d attaches with a burst of %d at %d a second took %v, want %v at least", n, burst, rate, took, want)
	}
	if got := srv.PacedAttaches(); got != n-burst {
		t.Errorf("PacedAttaches %d, want %d", got, n-burst)
	}
	t.Logf("%d attaches in %v", n, took.Round(time.Millisecond))
}

// TestAttachPaceClose: an attach waiting for its turn ends when the
// server closes, refused, without a session.
func TestAttachPaceClose(t *testing.T) {
	_, srv, path := serveTest(t, Config{Attaches: AttachPace{Burst: 1, Rate: 1}})
	attachRaw(t, path).Close()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := shm.NewConn(uc, attachproto.MaxLine)
	defer c.Close()
	refused := make(chan error, 1)
	go func() {
		fds, err := sendAttachLine(c)
		shm.CloseFDs(fds)
		refused <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); srv.PacedAttaches() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second attach did not wait for its turn")
		}
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		srv.Close()
	}()
	select {
	case err := <-refused:
		if err == nil {
			t.Error("an attach waiting for its turn when the server closed: attached")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an attach waiting for its turn when the server closed: no answer in 5s")
	}
	c.Close()
	<-closed
}
