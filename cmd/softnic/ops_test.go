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
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

func TestCompletionError(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:4791")
	tests := []struct {
		status qp.WCStatus
		op     qp.WROpcode
		n      int
		want   string
	}{
		{qp.RemAccessErr, qp.WRRead, 8, "remote access error: rkey 0x1234 is not valid for 8 bytes at 0x0 on 127.0.0.1:4791 (REM_ACCESS_ERR)"},
		{qp.RemAccessErr, qp.WRWrite, 1, "remote access error: rkey 0x1234 is not valid for 1 byte at 0x0 on 127.0.0.1:4791 (REM_ACCESS_ERR)"},
		{qp.RemAccessErr, qp.WRSend, 5, "remote access error: 127.0.0.1:4791 refused the SEND's access to its memory (REM_ACCESS_ERR)"},
		{qp.RemInvReqErr, qp.WRSend, 5, "remote invalid request error: 127.0.0.1:4791 refused the SEND as invalid (a SEND longer than its receive buffer, an operation its QP does not allow, or a misaligned atomic) (REM_INV_REQ_ERR)"},
		{qp.RemOpErr, qp.WRFetchAdd, 8, "remote operation error: 127.0.0.1:4791 could not carry out the ATOMIC_FETCH_AND_ADD (REM_OP_ERR)"},
		{qp.RetryExcErr, qp.WRRead, 8, "transport retry counter exceeded: 127.0.0.1:4791 stopped answering the RDMA_READ (RETRY_EXC_ERR)"},
		{qp.RNRRetryExcErr, qp.WRSend, 5, "RNR retry counter exceeded: 127.0.0.1:4791 had no receive buffer posted for the SEND (RNR_RETRY_EXC_ERR)"},
		{qp.WRFlushErr, qp.WRWrite, 5, "Work Request Flushed Error: the connection to 127.0.0.1:4791 ended before the RDMA_WRITE completed (WR_FLUSH_ERR)"},
		{qp.LocLenErr, qp.WRRead, 16, "local length error: the RDMA_READ of 16 bytes on 127.0.0.1:4791 failed (LOC_LEN_ERR)"},
	}
	for _, tt := range tests {
		t.Run(tt.status.String(), func(t *testing.T) {
			e := &completionError{status: tt.status, op: tt.op, rkey: 0x1234, addr: 0, n: tt.n, peer: peer}
			if got := e.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestExplainDial(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:4791")
	refused := &nic.RejectError{Addr: peer, Port: 7471, Reason: wire.RejectInvalidServiceID}
	consumer := &nic.RejectError{Addr: peer, Port: 7471, Reason: wire.RejectConsumer}
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
