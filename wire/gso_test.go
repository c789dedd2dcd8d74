package wire

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// sealed returns packets of opcode op with payloads of the given sizes,
// PSNs from 100, each sealed for env as a datagram of its own.
func sealed(t *testing.T, env Envelope, op OpCode, sizes ...int) [][]byte {
	t.Helper()
	var pkts [][]byte
	for i, n := range sizes {
		f := sampleFields(op)
		f.BTH.PSN = PSN(100 + i)
		b := make([]byte, f.Len(n))
		if _, err := f.Encode(b, samplePayload(n)); err != nil {
			t.Fatal(err)
		}
		env.Seal(b)
		pkts = append(pkts, b)
	}
	return pkts
}

// TestPcapReaderGSO: a datagram carrying several packets back to back, a
// UDP GSO send captured whole, is read as a frame per packet, with its
// lengths; a datagram whose pieces do not all verify is one frame.
func TestPcapReaderGSO(t *testing.T) {
	v4 := Envelope{Src: netip.MustParseAddrPort("127.0.0.1:40000"), Dst: netip.MustParseAddrPort("127.0.0.1:40001")}
	v6 := Envelope{Src: netip.MustParseAddrPort("[::1]:40000"), Dst: netip.MustParseAddrPort("[::1]:4791")}
	concat := func(pkts [][]byte) []byte { return bytes.Join(pkts, nil) }
	middles := sealed(t, v4, OpRCWriteMiddle, 1024, 1024, 1024)
	last := sealed(t, v4, OpRCWriteLast, 100)[0]
	acks := sealed(t, v6, OpRCAck, 0, 0, 0, 0, 0)
	corrupt := bytes.Clone(concat(middles))
	corrupt[len(corrupt)-1] ^= 1
	tests := []struct {
		name   string
		env    Envelope
		udp    []byte
		pieces [][]byte // nil: one frame, not cut
		roce   bool
	}{
		{"three Middles and a shorter Last, other ports", v4, concat(append(middles, last)), append(middles, last), true},
		{"five ACKs over IPv6", v6, concat(acks), acks, true},
		{"one piece's ICRC wrong, other ports", v4, corrupt, nil, false},
		{"one piece's ICRC wrong, to 4791", Envelope{Src: v4.Src, Dst: netip.MustParseAddrPort("127.0.0.1:4791")}, corrupt, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, appendFrame(nil, &tt.env, tt.udp), make([]byte, 60))
			var frames []Frame
			for _, fr := range readAllFrames(t, file) {
				if fr.Data != nil && len(fr.Data) != 60 { // not the padding frame after it
					frames = append(frames, fr)
				}
			}
			if tt.pieces == nil {
				if len(frames) != 1 || frames[0].Pieces != 0 || frames[0].RoCE != tt.roce || (tt.roce && frames[0].ICRC != ICRCBad) {
					t.Fatalf("%d frames %+v, want one, RoCE %v, not cut", len(frames), frames, tt.roce)
				}
				return
			}
			if len(frames) != len(tt.pieces) {
				t.Fatalf("%d frames, want %d", len(frames), len(tt.pieces))
			}
			for i, fr := range frames {
				if !fr.RoCE || fr.ICRC != ICRCOK || fr.Piece != i+1 || fr.Pieces != len(tt.pieces) || !bytes.Equal(fr.Payload, tt.pieces[i]) {
					t.Errorf("frame %d: RoCE %v ICRC %v piece %d/%d payload %d bytes", i, fr.RoCE, fr.ICRC, fr.Piece, fr.Pieces, len(fr.Payload))
				}
				if icrc, err := ICRCFromHeaders(fr.IPUDP, fr.Payload[:len(fr.Payload)-ICRCSize]); err != nil || icrc != binary.LittleEndian.Uint32(fr.Payload[len(fr.Payload)-ICRCSize:]) {
					t.Errorf("frame %d: its IPUDP does not verify its ICRC: %v", i, err)
				}
			}
		})
	}
}
