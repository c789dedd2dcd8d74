package mad

import (
	"testing"

	"github.com/softnic/softnic/wire"
)

// The per-packet paths must not allocate (DESIGN.md, principle 6): a CM MAD
// is decoded, encoded and shown as the transport's packets are.
func TestZeroAllocs(t *testing.T) {
	buf := make([]byte, MADSize+128)
	text := make([]byte, 0, 4096)
	madFields := sampleMAD(AttrConnectRequest)
	mad := encodeMAD(t, &madFields)
	copy(madFields.REQ.PrivateData[:], unhex(t, rpingREQPrivate))
	cmPkt := encodeUD(t, wire.GSIQPN, encodeMAD(t, &madFields))
	var m MAD
	var mf MADFields
	var cm wire.Packet
	if err := m.Decode(mad); err != nil {
		t.Fatal(err)
	}
	if err := cm.Decode(cmPkt); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		fn   func()
	}{
		{"MAD.Decode", func() { _ = m.Decode(mad) }},
		{"MAD.Fields", func() { m.Fields(&mf) }},
		{"MADFields.Encode", func() { _, _ = madFields.Encode(buf) }},
		{"DecodeCMAHeader", func() { _, _ = DecodeCMAHeader(madFields.REQ.PrivateData[:]) }},
		{"AppendPacketSummary of a CM MAD", func() { _ = AppendPacketSummary(text[:0], &cm) }},
		{"AppendPacketVerbose of a CM MAD", func() { _ = AppendPacketVerbose(text[:0], &cm) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn() // warm up buffers that grow once
			if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
				t.Errorf("%v allocations per run, want 0", n)
			}
		})
	}
}
