package qp_test

import (
	"testing"

	"github.com/softnic/softnic/wire"
)

// TestPSNWrap runs the scenarios again with a's PSNs starting just below
// 2^24, so that they wrap to 0 inside the first multi-packet message (PSNs
// are 24 bits and compared modulo 2^24, as rxe's psn_compare does). Every scenario must
// behave exactly as before: its transcript, with a's PSNs shifted back, is
// the same golden transcript. b's PSNs start at 0xFFFFF0 in every run.
func TestPSNWrap(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T)
	}{
		{"TestRCOperations", TestRCOperations},
		{"TestScenarioRNRRetryThenSuccess", TestScenarioRNRRetryThenSuccess},
		{"TestScenarioRNRRetryExhausted", TestScenarioRNRRetryExhausted},
		{"TestScenarioAckTimeoutThenSuccess", TestScenarioAckTimeoutThenSuccess},
		{"TestScenarioRetryExhausted", TestScenarioRetryExhausted},
		{"TestScenarioSequenceErrorNak", TestScenarioSequenceErrorNak},
		{"TestScenarioImpliedNak", TestScenarioImpliedNak},
		{"TestScenarioGhostAck", TestScenarioGhostAck},
		{"TestScenarioRemoteErrors", TestScenarioRemoteErrors},
		{"TestScenarioPartialRetransmitWrite", TestScenarioPartialRetransmitWrite},
		{"TestScenarioPartialRetransmitRead", TestScenarioPartialRetransmitRead},
		{"TestScenarioDuplicateAtomicReplayed", TestScenarioDuplicateAtomicReplayed},
		{"TestResponderReplaysDoNotTakeResources", TestResponderReplaysDoNotTakeResources},
	}
	defer func(p wire.PSN) { psnA = p }(psnA)
	psnA = 0xFFFFFE
	for _, sc := range scenarios {
		t.Run(sc.name, sc.run)
	}
}
