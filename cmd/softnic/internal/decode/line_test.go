package decode

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

func TestAppendPacketLineAllocs(t *testing.T) {
	env := wire.Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCWriteOnly, DestQP: 0x11}, RETH: wire.RETHFields{DMALen: 8}}
	b := make([]byte, f.Len(8))
	if _, err := f.Encode(b, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { line = AppendPacketLine(line[:0], time.Millisecond, &env, &p, wire.ICRCOK, 0) }); n != 0 {
		t.Errorf("%v allocations per line, want 0", n)
	}
}
