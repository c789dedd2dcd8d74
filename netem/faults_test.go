package netem_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/wire"
)

func TestParseFaultRules(t *testing.T) {
	tests := []struct {
		spec string
		want []netem.Rule
	}{
		{"drop@op=0x07+psn=0x7ad930", []netem.Rule{{Action: netem.ActionDrop, OpCodes: []wire.OpCode{wire.OpRCWriteMiddle}, PSN: 0x7ad930, MatchPSN: true}}},
		{"dup@op=0x14+count=2", []netem.Rule{{Action: netem.ActionDuplicate, OpCodes: []wire.OpCode{wire.OpRCFetchAdd}, Count: 2}}},
		{"delay:20ms@psn=16+qp=0x11", []netem.Rule{{Action: netem.ActionDelay, Hold: 20 * time.Millisecond, PSN: 16, MatchPSN: true, QP: 0x11}}},
		{"corrupt@op=17+op=18, drop=0.5", []netem.Rule{{Action: netem.ActionCorrupt, OpCodes: []wire.OpCode{wire.OpRCAck, wire.OpRCAtomicAck}}}},
		{"drop@psn=0", []netem.Rule{{Action: netem.ActionDrop, MatchPSN: true}}},
	}
	for _, tt := range tests {
		f, err := netem.ParseFaults(tt.spec)
		if err != nil || !reflect.DeepEqual(f.Rules, tt.want) {
			t.Errorf("ParseFaults(%q): rules %+v, %v; want %+v", tt.spec, f.Rules, err, tt.want)
		}
		if !f.Enabled() {
			t.Errorf("ParseFaults(%q): not Enabled", tt.spec)
		}
	}
	bad := []struct{ spec, msg string }{
		{"lose@psn=1", "unknown action"},
		{"drop:5ms@psn=1", "drop takes no ':' part"},
		{"delay:soon@psn=1", "hold \"soon\""},
		{"drop@psn", "want key=value"},
		{"drop@psn=0x1000000", "24 bits"},
		{"drop@op=0x15", "a valid opcode"},
		{"drop@count=0", "count (> 0)"},
		{"drop@color=red", "not a number"},
		{"drop@size=4", "want psn, qp"},
	}
	for _, tt := range bad {
		_, err := netem.ParseFaults(tt.spec)
		if !errors.Is(err, netem.ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseFaults(%q): %v, want ErrInvalid mentioning %q", tt.spec, err, tt.msg)
		}
	}
}

// bthOnly returns a packet of opcode op to QP qpn with PSN psn: a BTH and
// an ICRC, enough for the injector.
func bthOnly(op wire.OpCode, qpn uint32, psn wire.PSN) []byte {
	b := make([]byte, wire.BTHSize+wire.ICRCSize)
	wire.BTH(b).Encode(&wire.BTHFields{OpCode: op, DestQP: qpn, PSN: psn})
	return b
}

// TestInjectorRules: a rule hits the packets it matches, Count of them,
// before the probabilities are drawn; others go to the probabilities.
func TestInjectorRules(t *testing.T) {
	in := netem.NewInjector(netem.Faults{
		Duplicate: 1, // every packet no rule hits is duplicated
		Rules: []netem.Rule{
			{Action: netem.ActionDrop, OpCodes: []wire.OpCode{wire.OpRCWriteMiddle}, PSN: 5, MatchPSN: true},
			{Action: netem.ActionDelay, QP: 0x22, Count: 2, Hold: 3 * time.Millisecond},
			{Action: netem.ActionCorrupt, OpCodes: []wire.OpCode{wire.OpRCAck}},
		},
	})
	steps := []struct {
		pkt  []byte
		want netem.Fate
	}{
		{bthOnly(wire.OpRCWriteMiddle, 0x11, 4), netem.Fate{Duplicate: true, CorruptBit: -1}},
		{bthOnly(wire.OpRCWriteFirst, 0x11, 5), netem.Fate{Duplicate: true, CorruptBit: -1}}, // not the opcode
		{bthOnly(wire.OpRCWriteMiddle, 0x11, 5), netem.Fate{Drop: true, CorruptBit: -1}},
		{bthOnly(wire.OpRCWriteMiddle, 0x11, 5), netem.Fate{Duplicate: true, CorruptBit: -1}}, // its retransmission passes
		{bthOnly(wire.OpRCSendOnly, 0x22, 9), netem.Fate{Delay: 3 * time.Millisecond, CorruptBit: -1}},
		{bthOnly(wire.OpRCSendOnly, 0x23, 9), netem.Fate{Duplicate: true, CorruptBit: -1}},
		{bthOnly(wire.OpRCSendOnly, 0x22, 10), netem.Fate{Delay: 3 * time.Millisecond, CorruptBit: -1}},
		{bthOnly(wire.OpRCSendOnly, 0x22, 11), netem.Fate{Duplicate: true, CorruptBit: -1}}, // Count 2 used up
		{bthOnly(wire.OpRCAck, 0x11, 11), netem.Fate{CorruptBit: (wire.BTHSize+wire.ICRCSize-1)*8 + 1}},
		{[]byte{byte(wire.OpRCAck)}, netem.Fate{Duplicate: true, CorruptBit: -1}}, // too short for a rule
	}
	for i, s := range steps {
		if got := in.Decide(s.pkt); got != s.want {
			t.Errorf("packet %d: fate %+v, want %+v", i+1, got, s.want)
		}
	}
}
