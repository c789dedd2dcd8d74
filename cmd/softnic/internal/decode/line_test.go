package decode

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

// TestAppendPacketLineTrafficClass: the line names a traffic class that is
// set, after the addresses, and no class of 0.
func TestAppendPacketLineTrafficClass(t *testing.T) {
	p := writePacket(t)
	for _, tt := range []struct {
		class uint8
		want  string
	}{
		{0, "0.001000 10.0.0.1:49152 → 10.0.0.2:4791 RC RDMA Write Only qp=0x000011"},
		{0xb8, "0.001000 10.0.0.1:49152 → 10.0.0.2:4791 tclass=0xb8 RC RDMA Write Only qp=0x000011"},
		{0x02, "0.001000 10.0.0.1:49152 → 10.0.0.2:4791 tclass=0x02 RC RDMA Write Only qp=0x000011"},
	} {
		env := wire.Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), TrafficClass: tt.class}
		if line := string(AppendPacketLine(nil, time.Millisecond, &env, p, wire.ICRCOK, 0)); !strings.HasPrefix(line, tt.want) {
			t.Errorf("class %#x: %q, want it to start %q", tt.class, line, tt.want)
		}
	}
}

// writePacket is a decoded 8-byte RC WRITE_ONLY to QP 0x11.
func writePacket(t *testing.T) *wire.Packet {
	t.Helper()
	f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCWriteOnly, DestQP: 0x11}, RETH: wire.RETHFields{DMALen: 8}}
	b := make([]byte, f.Len(8))
	if _, err := f.Encode(b, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestAppendPacketLineAllocs(t *testing.T) {
	env := wire.Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), TrafficClass: 0xb8}
	p := writePacket(t)
	line := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { line = AppendPacketLine(line[:0], time.Millisecond, &env, p, wire.ICRCOK, 0) }); n != 0 {
		t.Errorf("%v allocations per line, want 0", n)
	}
}
