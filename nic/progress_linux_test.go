//go:build !softnic_portable

package nic_test

import (
	"context"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// TestPostAfterPollLeavesWithoutAnotherPoll: a WRITE posted just after a
// poll, while the reader goroutine still waits for the socket (nothing
// has arrived since the device opened), is left for the next poll; a
// program that then blocks elsewhere than CQ.Wait (in Dial, say) polls no
// more, and the reader, woken by nothing, must still send it, within the
// pollIdle the reader parks for, not at the QP's ACK timeout (4.3 s here).
// The portable socket's wait cannot be interrupted: there such a post
// still waits for a packet or a timer (see the README).
func TestPostAfterPollLeavesWithoutAnotherPoll(t *testing.T) {
	a, b := connected(t, nic.Config{}, nic.ConnectOptions{Timeout: 20})
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	before, _ := a.dev.Counter("sent_pkts")
	var wcs [1]verbs.WC
	if n, err := a.cq.Poll(wcs[:]); n != 0 || err != nil {
		t.Fatalf("poll of a new CQ: %d, %v", n, err)
	}
	if err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		if sent, _ := a.dev.Counter("sent_pkts"); sent > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE posted after a poll was not sent within 1 s without another poll")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.cq.Wait(ctx, wcs[:]); err != nil || wcs[0].Status != verbs.Success {
		t.Fatalf("the WRITE's completion: %v, %v", err, wcs[0].Status)
	}
}
