package wire

import (
	"encoding/hex"
	"testing"
)

// validOpCodes returns every opcode softnic implements, in numeric order.
func validOpCodes() []OpCode {
	var ops []OpCode
	for i := range 256 {
		if op := OpCode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// samplePayloadLen returns a payload length the opcode accepts: none where it
// carries none, 8 for ATOMIC WRITE, a multiple of 4 for First and Middle, and
// an odd length elsewhere so that the packet is padded.
func samplePayloadLen(op OpCode) int {
	switch {
	case !op.HasPayload():
		return 0
	case op.IsAtomicWrite():
		return atomicWritePayload
	case op.IsFirst(), op.IsMiddle():
		return 256
	}
	return 37
}

// sampleFields returns Fields for op with a distinct non-zero value in every
// field the opcode carries.
func sampleFields(op OpCode) Fields {
	f := Fields{
		BTH: BTHFields{
			OpCode: op, SE: op.IsSend(), PKey: 0xffff, DestQP: 0x123456,
			AckReq: op.IsRequest(), PSN: 0xabcdef,
		},
		RETH:         RETHFields{VA: 0x00007f1234567000, RKey: 0x1a2b3c4d, DMALen: 4096},
		AETH:         AETHFields{Syndrome: ACKSyndrome(CreditInvalid), MSN: 0x000102},
		AtomicETH:    AtomicETHFields{VA: 0x00007f00000000f8, RKey: 0x55aa, SwapAdd: 0x1111222233334444, Compare: 0x5555666677778888},
		AtomicAckETH: AtomicAckETHFields{OrigData: 0x0123456789abcdef},
		ImmDT:        0xdeadbeef,
		IETH:         0xcafe01,
		DETH:         DETHFields{QKey: 0x80010000, SrcQP: 0x000042},
		FETH:         FETHFields{PlacementType: 1, SelectivityLevel: 1},
	}
	if op.IsAck() || op.IsReadResponse() {
		f.BTH.AckReq = false
	}
	return f
}

// samplePayload returns n bytes of a recognisable pattern.
func samplePayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	return p
}

// encodeSample encodes the sample packet of op and fails the test on error.
func encodeSample(t testing.TB, op OpCode) []byte {
	t.Helper()
	f := sampleFields(op)
	payload := samplePayload(samplePayloadLen(op))
	buf := make([]byte, f.Len(len(payload)))
	n, err := f.Encode(buf, payload)
	if err != nil {
		t.Fatalf("encode %v: %v", op, err)
	}
	return buf[:n]
}

// unhex decodes a hex string and fails the test on error.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
