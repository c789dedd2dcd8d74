package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// A peer that stops answering for longer than the ACK timeout (its process
// descheduled) times out the first QP whose requests wait for it, which
// sends again; the timeouts of the device's other QPs toward it are held
// while that retry goes unanswered, and the peer's ACKs for the originals
// end them when it runs again: one QP resends, not every QP.
func TestSilentPeerTimesOutOneQP(t *testing.T) {
	const (
		timeout = 11 // 4.096 µs × 2^11: about 8.4 ms
		qps     = 16
	)
	ackTimeout := time.Duration(4096<<timeout) * time.Nanosecond
	opts := nic.ConnectOptions{Timeout: timeout, RetryCnt: 7}
	p := nictest.NewPair(t, &nictest.Options{Connect: opts})
	a, b := p.A, p.B
	var links []nicbench.Link
	for range qps {
		l, err := nicbench.Connect(a.Dev, b.Dev, a.PD, b.PD, opts, 4)
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
	}
	release := embedded.HoldProgress(device(b.Dev))
	start := time.Now()
	for i, l := range links {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.MR.SGE(8*i, 8)},
			RemoteAddr: b.MR.Addr() + uint64(8*i), RKey: b.MR.RKey()}
		if err := l.A.PostSend(&wr); err != nil {
			release()
			t.Fatal(err)
		}
	}
	time.Sleep(5 * ackTimeout / 2) // every QP's timer runs out twice
	release()
	stalled := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, l := range links {
		var wcs [1]verbs.WC
		if _, err := l.ACQ.Wait(ctx, wcs[:]); err != nil || wcs[0].Status != verbs.Success {
			t.Fatalf("QP %d: WRITE %v, %v", i, wcs[0].String(), err)
		}
	}
	retries, _ := a.Dev.Counter("completer_retry_err")
	t.Logf("peer silent for %v (ACK timeout %v): %d retries over %d QPs", stalled, ackTimeout, retries, qps)
	if stalled > 4*ackTimeout {
		t.Skipf("the peer stayed silent for %v, past the timeouts a QP's are held for: the machine is too loaded to tell", stalled)
	}
	if retries == 0 || retries >= qps {
		t.Errorf("%d retries over %d QPs, want at least one and fewer than one a QP", retries, qps)
	}
}
