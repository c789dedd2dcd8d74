package qp_test

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestReceiveDrops: packets a QP must not take are dropped and counted by
// reason, and change nothing.
func TestReceiveDrops(t *testing.T) {
	tests := []struct {
		name    string
		from    string // source address
		pkey    uint16
		op      wire.OpCode
		counter verbs.CounterID
	}{
		{"another peer (rxe checks the source of connected QPs)", "10.0.0.9:4791", 0xFFFF, wire.OpRCWriteOnly, verbs.WrongSource},
		{"another partition", "10.0.0.1:4791", 0x8001, wire.OpRCWriteOnly, verbs.BadPKey},
		{"a UC opcode on an RC QP", "10.0.0.1:4791", 0xFFFF, wire.OpUCWriteOnly, verbs.WrongTransport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, b := pair(t, defaultAttr())
			f := wire.Fields{BTH: wire.BTHFields{OpCode: tt.op, PKey: tt.pkey, DestQP: b.qp.Num(), PSN: 0x100, AckReq: true},
				RETH: wire.RETHFields{VA: b.va(0), RKey: b.region.RKey(), DMALen: 4}}
			raw := make([]byte, f.Len(4))
			if _, err := f.Encode(raw, []byte("evil")); err != nil {
				t.Fatal(err)
			}
			env := wire.Envelope{Src: netip.MustParseAddrPort(tt.from), Dst: b.addr}
			env.Seal(raw)
			s.send(b, raw, env, 0)
			s.settle(0)
			if got := b.counter(tt.counter); got != 1 {
				t.Errorf("%v = %d, want 1", tt.counter, got)
			}
			if string(b.buf[:4]) == "evil" || b.qp.Status().ExpectedPSN != 0x100 {
				t.Errorf("the dropped packet was executed: memory %q, expected PSN %v", b.buf[:4], b.qp.Status().ExpectedPSN)
			}
		})
	}
}
