package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire/mad"
)

func TestExplainDial(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:4791")
	refused := &nic.RejectError{Addr: peer, Port: 7471, Reason: mad.RejectInvalidServiceID}
	consumer := &nic.RejectError{Addr: peer, Port: 7471, Reason: mad.RejectConsumer}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"deadline", fmt.Errorf("dial: %w", context.DeadlineExceeded), "no answer from 127.0.0.1:4791 (rdma_cm port 7471) within 2s: is softnic serve running there?"},
		{"CM retries exhausted", fmt.Errorf("dial: %w", nic.ErrTimedOut), "no answer from 127.0.0.1:4791 (rdma_cm port 7471) within 2s: is softnic serve running there?"},
		{"no listener", refused, "127.0.0.1:4791 has no listener on rdma_cm port 7471 (see --cm-port): "},
		{"rejected", consumer, "connecting to 127.0.0.1:4791, rdma_cm port 7471: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainDial(tt.err, peer, 7471, 2*time.Second)
			if !strings.HasPrefix(got.Error(), tt.want) {
				t.Errorf("got %q, want it to start with %q", got, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("%v does not wrap %v", got, tt.err)
			}
		})
	}
}

// TestUnreachablePeer: with nothing at the peer's address, an operation
// fails within its timeout, naming the peer.
func TestUnreachablePeer(t *testing.T) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0") // a port nobody answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	peer := c.LocalAddr().String()
	c.Close()
	for _, cmd := range [][]string{
		{"read", "--rkey", "1", "--addr", "0", "--len", "8"},
		{"send", "--data", "hello"},
	} {
		t.Run(cmd[0], func(t *testing.T) {
			const timeout = 500 * time.Millisecond
			start := time.Now()
			code, stdout, stderr := runCmd(append(cmd, "--peer", peer, "--timeout", timeout.String())...)
			elapsed := time.Since(start)
			if code != 1 || stdout != "" {
				t.Errorf("exit status %d, stdout %q; want 1", code, stdout)
			}
			want := fmt.Sprintf("softnic %s: no answer from %s (rdma_cm port %d) within 500ms", cmd[0], peer, defaultCMPort)
			if !strings.HasPrefix(stderr, want) {
				t.Errorf("stderr %q, want it to start with %q", stderr, want)
			}
			if elapsed < timeout || elapsed > timeout+2*time.Second {
				t.Errorf("gave up after %v, want about %v", elapsed, timeout)
			}
		})
	}
}
