package wire

import (
	"errors"
	"testing"
)

// decodeErrors are the errors Decode may return.
var decodeErrors = []error{ErrTruncated, ErrBadOpCode, ErrBadTVer, ErrBadPad, ErrBadLength}

func isDecodeError(err error) bool {
	for _, e := range decodeErrors {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestDecodeTruncated cuts a valid packet of every opcode, padded and not,
// at every byte. A cut inside the headers or the ICRC must give
// ErrTruncated. A longer cut may leave a well-formed shorter packet (nothing
// on the wire says where the payload ends); otherwise it must give one of
// Decode's errors. Decode must never panic.
func TestDecodeTruncated(t *testing.T) {
	for _, op := range validOpCodes() {
		lengths := []int{samplePayloadLen(op)}
		if op.HasPayload() && !op.IsAtomicWrite() && !op.IsFirst() && !op.IsMiddle() {
			lengths = append(lengths, 64, 1, 0) // unpadded, padded by 3, empty
		}
		for _, n := range lengths {
			f := sampleFields(op)
			b := make([]byte, f.Len(n))
			if _, err := f.Encode(b, samplePayload(n)); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			for cut := range len(b) {
				var p Packet
				err := p.Decode(b[:cut])
				switch {
				case cut < op.HeaderLen()+ICRCSize:
					if !errors.Is(err, ErrTruncated) {
						t.Errorf("%v (%d-byte payload) cut to %d bytes: %v, want ErrTruncated", op, n, cut, err)
					}
				case err == nil:
					if got, want := len(p.Payload)+int(p.BTH.PadCount()), cut-op.HeaderLen()-ICRCSize; got != want {
						t.Errorf("%v cut to %d bytes: payload+pad %d, want %d", op, cut, got, want)
					}
				case !isDecodeError(err):
					t.Errorf("%v cut to %d bytes: untyped error %v", op, cut, err)
				}
			}
		}
	}
}
