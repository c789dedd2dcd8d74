package wire

import (
	"net/netip"
	"testing"
)

// benchPacket returns a sealed RDMA WRITE Only with a 4 KiB payload.
func benchPacket(b *testing.B) (Fields, []byte, []byte, Envelope) {
	f := sampleFields(OpRCWriteOnly)
	payload := samplePayload(4096)
	pkt := make([]byte, f.Len(len(payload)))
	if _, err := f.Encode(pkt, payload); err != nil {
		b.Fatal(err)
	}
	env := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	env.Seal(pkt)
	return f, payload, pkt, env
}

func BenchmarkDecode(b *testing.B) {
	_, _, pkt, _ := benchPacket(b)
	var p Packet
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Decode(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	f, payload, pkt, _ := benchPacket(b)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Encode(pkt, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkICRC(b *testing.B) {
	_, _, pkt, env := benchPacket(b)
	b.Run("Seal", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			env.Seal(pkt)
		}
	})
	b.Run("SealACK", func(b *testing.B) {
		ack := encodeSample(b, OpRCAck)
		b.SetBytes(int64(len(ack)))
		b.ReportAllocs()
		for b.Loop() {
			env.Seal(ack)
		}
	})
	b.Run("Check", func(b *testing.B) {
		b.SetBytes(int64(len(pkt)))
		b.ReportAllocs()
		for b.Loop() {
			if err := env.Check(pkt); err != nil {
				b.Fatal(err)
			}
		}
	})
}
