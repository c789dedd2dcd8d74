package wire

import (
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"
)

// The per-packet paths must not allocate (DESIGN.md, principle 6).
func TestZeroAllocs(t *testing.T) {
	env4 := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	env6 := Envelope{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")}
	pkts := make([][]byte, 0, 64)
	for _, op := range validOpCodes() {
		p := encodeSample(t, op)
		env4.Seal(p)
		pkts = append(pkts, p)
	}
	write := pkts[0]
	fields := sampleFields(OpRCWriteOnly)
	payload := samplePayload(4096)
	buf := make([]byte, fields.Len(len(payload)))
	ipudp := appendFrame(nil, &env4, write)[ethHeaderSize : ethHeaderSize+ipv4HeaderSize+udpHeaderSize]
	var p Packet
	var f Fields
	if err := p.Decode(pkts[len(pkts)-1]); err != nil {
		t.Fatal(err)
	}
	pw, err := NewPcapWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var file bytes.Buffer
	fw, err := NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if err := fw.WritePacket(time.Time{}, &env6, write); err != nil {
			t.Fatal(err)
		}
	}
	pr, err := NewPcapReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	rxe := env4 // a receiver of a packet sent with a non-zero IPv4 ID
	rxe.IPID = 0x4e3a

	tests := []struct {
		name string
		fn   func()
	}{
		{"Decode", func() {
			for _, b := range pkts {
				_ = p.Decode(b)
			}
		}},
		{"Fields", func() { p.Fields(&f) }},
		{"EncodeHeaders", func() { _, _ = fields.EncodeHeaders(buf, len(payload)) }},
		{"Encode", func() { _, _ = fields.Encode(buf, payload) }},
		{"Envelope.ICRC IPv4", func() { _ = env4.ICRC(write[:len(write)-ICRCSize]) }},
		{"Envelope.ICRC IPv6", func() { _ = env6.ICRC(write[:len(write)-ICRCSize]) }},
		{"Envelope.Seal", func() { env6.Seal(buf) }},
		{"Envelope.Check", func() { _ = env4.Check(write) }},
		{"ICRCFromHeaders", func() { _, _ = ICRCFromHeaders(ipudp, write[:len(write)-ICRCSize]) }},
		{"PcapWriter.WritePacket", func() { _ = pw.WritePacket(time.Time{}, &env4, write) }},
		{"PcapReader.Next", func() { _, _ = pr.Next() }},
		{"Envelope.RecoverIPID", func() { _, _ = rxe.RecoverIPID(write) }},
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
