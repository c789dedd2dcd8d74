package verbs

import "testing"

// TestWakesSolicited: a CQ armed for solicited completions only wakes for
// a solicited completion and for any in error, as the IBTA has it.
func TestWakesSolicited(t *testing.T) {
	for _, tc := range []struct {
		name string
		wc   WC
		want bool
	}{
		{"a receive", WC{Opcode: WCRecv}, false},
		{"a receive with immediate data", WC{Opcode: WCRecv, Flags: WCWithImm}, false},
		{"a solicited receive", WC{Opcode: WCRecv, Flags: WCSolicited | WCWithImm}, true},
		{"a send", WC{Opcode: WCSend}, false},
		{"a send in error", WC{Opcode: WCSend, Status: RetryExcErr}, true},
		{"a receive flushed", WC{Opcode: WCRecv, Status: WRFlushErr}, true},
	} {
		if got := tc.wc.WakesSolicited(); got != tc.want {
			t.Errorf("%s: WakesSolicited %v, want %v", tc.name, got, tc.want)
		}
	}
}
