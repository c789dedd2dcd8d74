package wire

import (
	"bytes"
	"errors"
	"testing"
)

// Whole packets (UDP payloads) from ../shared/golden, Linux 6.1 rxe.
const (
	// write_small.pcap: the ACK of the first WRITE (frame 21).
	goldenACK = "1100ffff0000005f0099f6921f000001db7ebda3"
	// atomic_fadd.pcap: a FETCH ADD and its ATOMIC ACKNOWLEDGE.
	goldenFetchAdd  = "1400ffff0000006580657a9c0000564c1a9b30000000629d00000000000000010000000000000000ec9a198a"
	goldenAtomicAck = "1200ffff0000006500657a9c1f000001c7af2fe19ef00f150c2e245e"
)

func TestDecodeGolden(t *testing.T) {
	tests := []struct {
		name    string
		hex     string
		want    Fields
		payload int
		icrc    uint32
	}{
		{
			name: "ACK",
			hex:  goldenACK,
			want: Fields{BTH: BTHFields{OpCode: OpRCAck, PKey: 0xffff, DestQP: 0x5f, PSN: 0x99f692}, AETH: AETHFields{Syndrome: 0x1f, MSN: 1}},
			icrc: 0xa3bd7edb,
		},
		{
			name: "FETCH ADD",
			hex:  goldenFetchAdd,
			want: Fields{
				BTH:       BTHFields{OpCode: OpRCFetchAdd, PKey: 0xffff, DestQP: 0x65, AckReq: true, PSN: 0x657a9c},
				AtomicETH: AtomicETHFields{VA: 0x564c1a9b3000, RKey: 0x629d, SwapAdd: 1},
			},
			icrc: 0x8a199aec,
		},
		{
			name: "ATOMIC ACKNOWLEDGE",
			hex:  goldenAtomicAck,
			want: Fields{
				BTH:          BTHFields{OpCode: OpRCAtomicAck, PKey: 0xffff, DestQP: 0x65, PSN: 0x657a9c},
				AETH:         AETHFields{Syndrome: 0x1f, MSN: 1},
				AtomicAckETH: AtomicAckETHFields{OrigData: 0xc7af2fe19ef00f15},
			},
			icrc: 0x5e242e0c,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unhex(t, tt.hex)
			var p Packet
			if err := p.Decode(b); err != nil {
				t.Fatal(err)
			}
			var f Fields
			p.Fields(&f)
			if f != tt.want {
				t.Errorf("Fields:\n got %+v\nwant %+v", f, tt.want)
			}
			if len(p.Payload) != tt.payload {
				t.Errorf("payload %d bytes, want %d", len(p.Payload), tt.payload)
			}
			if got := p.ICRC(); got != tt.icrc {
				t.Errorf("ICRC() = %#08x, want %#08x", got, tt.icrc)
			}
		})
	}
}

// TestEncodeDecodeEveryOpCode encodes the sample packet of every opcode and
// decodes it again.
func TestEncodeDecodeEveryOpCode(t *testing.T) {
	for _, op := range validOpCodes() {
		t.Run(op.String(), func(t *testing.T) {
			want := sampleFields(op)
			payload := samplePayload(samplePayloadLen(op))
			b := encodeSample(t, op)
			if len(b)%4 != 0 {
				t.Errorf("packet length %d is not a multiple of 4", len(b))
			}
			var p Packet
			if err := p.Decode(b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p.Payload, payload) {
				t.Errorf("payload %x, want %x", p.Payload, payload)
			}
			if got, want := int(p.BTH.PadCount()), padLen(len(payload)); got != want {
				t.Errorf("pad count %d, want %d", got, want)
			}
			var got Fields
			p.Fields(&got)
			// Fields the opcode does not carry come back zero.
			want.BTH.PadCount = uint8(padLen(len(payload)))
			if !op.HasRETH() {
				want.RETH = RETHFields{}
			}
			if !op.HasAETH() {
				want.AETH = AETHFields{}
			}
			if !op.HasAtomicETH() {
				want.AtomicETH = AtomicETHFields{}
			}
			if !op.HasAtomicAckETH() {
				want.AtomicAckETH = AtomicAckETHFields{}
			}
			if !op.HasImmDT() {
				want.ImmDT = 0
			}
			if !op.HasIETH() {
				want.IETH = 0
			}
			if !op.HasDETH() {
				want.DETH = DETHFields{}
			}
			if !op.HasFETH() {
				want.FETH = FETHFields{}
			}
			if got != want {
				t.Errorf("Fields:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// packetBytes builds a packet byte by byte: a BTH with opcode op and pad
// count pad, then n bytes of extension headers and payload, then an ICRC.
func packetBytes(op OpCode, pad uint8, n int) []byte {
	b := make([]byte, BTHSize+n+ICRCSize)
	BTH(b).Encode(&BTHFields{OpCode: op, PadCount: pad, PKey: 0xffff, DestQP: 0x11})
	return b
}

func TestDecodeValidation(t *testing.T) {
	withTVer := func(b []byte) []byte { b[1] |= 0x01; return b }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"BTH only, no ICRC", packetBytes(OpRCSendOnly, 0, 0)[:BTHSize], ErrTruncated},
		{"ICRC cut", packetBytes(OpRCSendOnly, 0, 0)[:BTHSize+3], ErrTruncated},
		{"TVer 1", withTVer(packetBytes(OpRCSendOnly, 0, 0)), ErrBadTVer},
		{"reserved RC opcode 0x15", packetBytes(0x15, 0, 0), ErrBadOpCode},
		{"RD opcode", packetBytes(0x44, 0, 0), ErrBadOpCode},
		{"CNP", packetBytes(0x81, 0, 16), ErrBadOpCode},
		{"RETH cut", packetBytes(OpRCWriteOnly, 0, RETHSize-1), ErrTruncated},
		{"AtomicETH cut", packetBytes(OpRCCompareSwap, 0, AtomicETHSize-4), ErrTruncated},
		{"AtomicAckETH missing", packetBytes(OpRCAtomicAck, 0, AETHSize), ErrTruncated},
		{"DETH cut", packetBytes(OpUDSendOnly, 0, 4), ErrTruncated},
		{"FETH but no RETH", packetBytes(OpRCFlush, 0, FETHSize), ErrTruncated},
		{"SEND Only empty", packetBytes(OpRCSendOnly, 0, 0), nil},
		{"SEND Only 1 byte + 3 pad", packetBytes(OpRCSendOnly, 3, 4), nil},
		{"SEND Only unaligned", packetBytes(OpRCSendOnly, 0, 5), ErrBadPad},
		{"SEND Only pad larger than payload", packetBytes(OpRCSendOnly, 1, 0), ErrBadPad},
		{"SEND Last 4 bytes, pad 3", packetBytes(OpRCSendLast, 3, 4), nil},
		{"SEND First padded", packetBytes(OpRCSendFirst, 1, 8), ErrBadPad},
		{"SEND First empty", packetBytes(OpRCSendFirst, 0, 0), ErrBadLength},
		{"SEND Middle empty", packetBytes(OpRCSendMiddle, 0, 0), ErrBadLength},
		{"WRITE Middle padded", packetBytes(OpRCWriteMiddle, 2, 4), ErrBadPad},
		{"READ response Middle empty", packetBytes(OpRCReadResponseMiddle, 0, 0), ErrBadLength},
		{"WRITE Only zero length", packetBytes(OpRCWriteOnly, 0, RETHSize), nil},
		{"WRITE Only Imm zero length", packetBytes(OpRCWriteOnlyImm, 0, RETHSize+ImmDTSize), nil},
		{"READ request with payload", packetBytes(OpRCReadRequest, 0, RETHSize+4), ErrBadLength},
		{"READ request padded", packetBytes(OpRCReadRequest, 1, RETHSize), ErrBadPad},
		{"ACK with payload", packetBytes(OpRCAck, 0, AETHSize+4), ErrBadLength},
		{"ACK with stray byte", packetBytes(OpRCAck, 0, AETHSize+1), ErrBadLength},
		{"COMPARE SWAP with payload", packetBytes(OpRCCompareSwap, 0, AtomicETHSize+8), ErrBadLength},
		{"FLUSH with payload", packetBytes(OpRCFlush, 0, FETHSize+RETHSize+4), ErrBadLength},
		{"ATOMIC WRITE 8 bytes", packetBytes(OpRCAtomicWrite, 0, RETHSize+8), nil},
		{"ATOMIC WRITE 4 bytes", packetBytes(OpRCAtomicWrite, 0, RETHSize+4), ErrBadLength},
		{"ATOMIC WRITE 16 bytes", packetBytes(OpRCAtomicWrite, 0, RETHSize+16), ErrBadLength},
		{"ATOMIC WRITE 5 bytes + 3 pad", packetBytes(OpRCAtomicWrite, 3, RETHSize+8), ErrBadLength},
		{"READ response Only empty", packetBytes(OpRCReadResponseOnly, 0, AETHSize), nil},
		{"UD SEND Only Imm", packetBytes(OpUDSendOnlyImm, 2, DETHSize+ImmDTSize+256), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Packet{Payload: []byte("stale")}
			err := p.Decode(tt.b)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Decode = %v, want %v", err, tt.want)
			}
			if err != nil {
				if p.BTH != nil || p.Payload != nil || p.Raw != nil {
					t.Errorf("Packet not reset after error: %+v", p)
				}
				return
			}
			if got, want := len(p.Payload), len(tt.b)-p.OpCode().HeaderLen()-ICRCSize-int(p.BTH.PadCount()); got != want {
				t.Errorf("payload %d bytes, want %d", got, want)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	big := make([]byte, 4096)
	tests := []struct {
		name       string
		f          Fields
		buf        []byte
		payloadLen int
		want       error
	}{
		{"unknown opcode", Fields{BTH: BTHFields{OpCode: 0x15}}, big, 0, ErrBadOpCode},
		{"TVer 1", Fields{BTH: BTHFields{OpCode: OpRCSendOnly, TVer: 1}}, big, 0, ErrBadTVer},
		{"ACK with payload", Fields{BTH: BTHFields{OpCode: OpRCAck}}, big, 4, ErrBadLength},
		{"negative payload", Fields{BTH: BTHFields{OpCode: OpRCSendOnly}}, big, -1, ErrBadLength},
		{"SEND First unaligned", Fields{BTH: BTHFields{OpCode: OpRCSendFirst}}, big, 1023, ErrBadLength},
		{"SEND Middle empty", Fields{BTH: BTHFields{OpCode: OpRCSendMiddle}}, big, 0, ErrBadLength},
		{"ATOMIC WRITE 7 bytes", Fields{BTH: BTHFields{OpCode: OpRCAtomicWrite}}, big, 7, ErrBadLength},
		{"buffer one byte short", Fields{BTH: BTHFields{OpCode: OpRCWriteOnly}}, make([]byte, BTHSize+RETHSize+8+ICRCSize-1), 5, ErrShortBuffer},
		{"buffer exact", Fields{BTH: BTHFields{OpCode: OpRCWriteOnly}}, make([]byte, BTHSize+RETHSize+8+ICRCSize), 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.f.EncodeHeaders(tt.buf, tt.payloadLen)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("EncodeHeaders = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestEncodeHeadersLayout: the payload goes at the returned offset, pad and
// ICRC are zeroed whatever the buffer held, the pad count is computed.
func TestEncodeHeadersLayout(t *testing.T) {
	f := Fields{BTH: BTHFields{OpCode: OpRCWriteOnlyImm, PadCount: 0, PSN: 1}, RETH: RETHFields{DMALen: 5}, ImmDT: 7}
	buf := bytes.Repeat([]byte{0xaa}, 64)
	off, err := f.EncodeHeaders(buf, 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := BTHSize + RETHSize + ImmDTSize; off != want {
		t.Fatalf("offset %d, want %d", off, want)
	}
	n := f.Len(5)
	if want := off + 5 + 3 + ICRCSize; n != want {
		t.Fatalf("Len(5) = %d, want %d", n, want)
	}
	if got := buf[off : off+5]; !bytes.Equal(got, bytes.Repeat([]byte{0xaa}, 5)) {
		t.Errorf("payload area touched: %x", got)
	}
	if got := buf[off+5 : n]; !bytes.Equal(got, make([]byte, 3+ICRCSize)) {
		t.Errorf("pad and ICRC not zeroed: %x", got)
	}
	if buf[n] != 0xaa {
		t.Errorf("byte after the packet touched")
	}
	if got := BTH(buf).PadCount(); got != 3 {
		t.Errorf("pad count %d, want 3", got)
	}
}
