package tooldev

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/verbs"
)

func TestCompletionError(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.1:4791")
	tests := []struct {
		status verbs.WCStatus
		op     verbs.WROpcode
		n      int
		want   string
	}{
		{verbs.RemAccessErr, verbs.WRRead, 8, "remote access error: rkey 0x1234 is not valid for 8 bytes at 0x0 on 127.0.0.1:4791 (REM_ACCESS_ERR)"},
		{verbs.RemAccessErr, verbs.WRWrite, 1, "remote access error: rkey 0x1234 is not valid for 1 byte at 0x0 on 127.0.0.1:4791 (REM_ACCESS_ERR)"},
		{verbs.RemAccessErr, verbs.WRSend, 5, "remote access error: 127.0.0.1:4791 refused the SEND's access to its memory (REM_ACCESS_ERR)"},
		{verbs.RemInvReqErr, verbs.WRSend, 5, "remote invalid request error: 127.0.0.1:4791 refused the SEND as invalid (a SEND longer than its receive buffer, an operation its QP does not allow, or a misaligned atomic) (REM_INV_REQ_ERR)"},
		{verbs.RemOpErr, verbs.WRFetchAdd, 8, "remote operation error: 127.0.0.1:4791 could not carry out the ATOMIC_FETCH_AND_ADD (REM_OP_ERR)"},
		{verbs.RetryExcErr, verbs.WRRead, 8, "transport retry counter exceeded: 127.0.0.1:4791 stopped answering the RDMA_READ (RETRY_EXC_ERR)"},
		{verbs.RNRRetryExcErr, verbs.WRSend, 5, "RNR retry counter exceeded: 127.0.0.1:4791 had no receive buffer posted for the SEND (RNR_RETRY_EXC_ERR)"},
		{verbs.WRFlushErr, verbs.WRWrite, 5, "Work Request Flushed Error: the connection to 127.0.0.1:4791 ended before the RDMA_WRITE completed (WR_FLUSH_ERR)"},
		{verbs.LocLenErr, verbs.WRRead, 16, "local length error: the RDMA_READ of 16 bytes on 127.0.0.1:4791 failed (LOC_LEN_ERR)"},
	}
	for _, tt := range tests {
		t.Run(tt.status.String(), func(t *testing.T) {
			e := &CompletionError{Status: tt.status, Op: tt.op, RKey: 0x1234, Addr: 0, N: tt.n, Peer: peer}
			if got := e.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
