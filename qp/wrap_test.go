package qp_test

import (
	"testing"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/wire"
)

// TestPSNWrap runs the scenarios again with a's PSNs starting at 0xFFFFFE
// and at 0xFFFFFF, so that they wrap to 0 inside the first messages (PSNs
// are 24 bits and compared modulo 2^24, as rxe's psn_compare does). Every
// scenario must behave exactly as before: its transcript, with a's PSNs
// shown as from 0x100, is the same golden transcript. b's PSNs start at
// 0xFFFFF0 in every run.
func TestPSNWrap(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T)
	}{
		{"TestRCOperations", TestRCOperations},
		{"TestTranscripts", func(t *testing.T) { runTranscripts(t, false) }},
		{"TestScenarioGhostAck", TestScenarioGhostAck},
		{"TestResponderReplaysDoNotTakeResources", TestResponderReplaysDoNotTakeResources},
		{"lossy", func(t *testing.T) {
			runLossy(t, 1, 300, netem.Faults{Drop: 0.10, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01, Seed: 1})
		}},
		{"TestUCOperations", TestUCOperations},
		{"TestUCSendWithoutRecvWR", TestUCSendWithoutRecvWR},
		{"TestUDSend", TestUDSend},
		{"TestUDQKey", TestUDQKey},
		{"TestSRQSharedInOrder", TestSRQSharedInOrder},
		{"TestSRQEmptyRNR", TestSRQEmptyRNR},
		{"TestUnsignaled", TestUnsignaled},
		{"TestInline", TestInline},
		{"TestScatterGather", TestScatterGather},
		{"TestLocalErrors", TestLocalErrors},
		{"TestMemoryWindowAccess", TestMemoryWindowAccess},
		{"TestMemoryWindowSendInvalidate", TestMemoryWindowSendInvalidate},
		{"TestRNRTimer", TestRNRTimer},
	}
	defer func(p wire.PSN) { psnA = p }(psnA)
	for _, first := range []wire.PSN{0xFFFFFE, 0xFFFFFF} {
		psnA = first
		t.Run("psn="+first.String(), func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, sc.run)
			}
		})
	}
}
