package wire

import (
	"encoding/binary"
	"strconv"
	"time"
)

// AETHSize is the length of the ACK Extended Transport Header.
const AETHSize = 4

// AETH is a view of an ACK Extended Transport Header (IBTA 9.3.5), carried by
// Acknowledge, Atomic Acknowledge and the First, Last and Only READ response
// packets:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Syndrome    |             Message Sequence Number           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AETH []byte

const (
	aethSyndrome = 0
	aethMSN      = 1
	msnMask      = 1<<24 - 1
)

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24-bit message sequence number: requests completed by the responder
}

// Syndrome returns the syndrome.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[aethSyndrome]) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return get24(a[aethMSN:]) }

// SetSyndrome sets the syndrome.
func (a AETH) SetSyndrome(s Syndrome) { a[aethSyndrome] = byte(s) }

// SetMSN sets the message sequence number (its low 24 bits).
func (a AETH) SetMSN(msn uint32) { put24(a[aethMSN:], msn) }

// Fields returns the header's fields.
func (a AETH) Fields() AETHFields { return AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()} }

// Encode writes f into the header; MSN is truncated to 24 bits.
func (a AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(a, uint32(f.Syndrome)<<24|f.MSN&msnMask)
}

// Syndrome is the AETH syndrome byte (IBTA 9.7.5.1.1, Table 44):
//
//	  7   6   5   4   3   2   1   0
//	+---+-------+-------------------+
//	| 0 | type  |       value       |
//	+---+-------+-------------------+
//
// The type tells ACK, RNR NAK or NAK apart; the value is the credit count,
// the RNR timer code or the NAK code. Bit 7 is reserved.
type Syndrome uint8

const (
	synTypeShift = 5
	synTypeMask  = 0x60
	synValueMask = 0x1f
)

// AckType is the type field of a Syndrome.
type AckType uint8

// The syndrome types.
const (
	AckTypeACK      AckType = 0 // positive acknowledgement
	AckTypeRNRNak   AckType = 1 // receiver not ready
	AckTypeReserved AckType = 2
	AckTypeNak      AckType = 3 // negative acknowledgement
)

var ackTypeNames = [...]string{"ACK", "RNR NAK", "reserved", "NAK"}

// String returns "ACK", "RNR NAK", "reserved" or "NAK".
func (t AckType) String() string {
	if int(t) < len(ackTypeNames) {
		return ackTypeNames[t]
	}
	return "AckType(" + strconv.Itoa(int(t)) + ")"
}

// NakCode is the value of a NAK syndrome (IBTA 9.7.5.2.4).
type NakCode uint8

// The NAK codes.
const (
	NakPSNSequenceError       NakCode = 0
	NakInvalidRequest         NakCode = 1
	NakRemoteAccessError      NakCode = 2
	NakRemoteOperationalError NakCode = 3
	NakInvalidRDRequest       NakCode = 4
)

var nakCodeNames = [...]string{
	NakPSNSequenceError:       "PSN sequence error",
	NakInvalidRequest:         "invalid request",
	NakRemoteAccessError:      "remote access error",
	NakRemoteOperationalError: "remote operational error",
	NakInvalidRDRequest:       "invalid RD request",
}

// String returns the code's name, or "reserved (0x..)" for a reserved code.
func (c NakCode) String() string {
	if int(c) < len(nakCodeNames) {
		return nakCodeNames[c]
	}
	return string(c.appendName(nil))
}

func (c NakCode) appendName(dst []byte) []byte {
	if int(c) < len(nakCodeNames) {
		return append(dst, nakCodeNames[c]...)
	}
	dst = append(dst, "reserved ("...)
	return append(AppendHex(dst, uint64(c), 2), ')')
}

// CreditInvalid is the credit count code 31 of an ACK syndrome: the responder
// does not advertise end-to-end credits. rxe sends it on every ACK (0x1F).
const CreditInvalid = 31

// ACKSyndrome returns the syndrome of an ACK that advertises the credit count
// code credit (0..31).
func ACKSyndrome(credit uint8) Syndrome { return Syndrome(credit & synValueMask) }

// RNRNakSyndrome returns the syndrome of an RNR NAK that asks the requester to
// wait for RNR timer code timer (0..31, see RNRTimerMicros) before retrying.
func RNRNakSyndrome(timer uint8) Syndrome {
	return Syndrome(byte(AckTypeRNRNak)<<synTypeShift | timer&synValueMask)
}

// NakSyndrome returns the syndrome of a NAK with the given code.
func NakSyndrome(code NakCode) Syndrome {
	return Syndrome(byte(AckTypeNak)<<synTypeShift | byte(code)&synValueMask)
}

// Type returns the syndrome type.
func (s Syndrome) Type() AckType { return AckType(s & synTypeMask >> synTypeShift) }

// Credit returns the credit count code of an ACK syndrome.
func (s Syndrome) Credit() uint8 { return uint8(s & synValueMask) }

// RNRTimer returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() uint8 { return uint8(s & synValueMask) }

// NakCode returns the code of a NAK syndrome.
func (s Syndrome) NakCode() NakCode { return NakCode(s & synValueMask) }

// String describes the syndrome: "ACK(credit=31)", "RNR NAK(timer=14,1280us)",
// "NAK(PSN sequence error)" or "reserved(0x5f)".
func (s Syndrome) String() string { return string(s.AppendString(nil)) }

// AppendString appends what String returns, without allocating.
func (s Syndrome) AppendString(dst []byte) []byte {
	switch s.Type() {
	case AckTypeACK:
		dst = append(dst, "ACK(credit="...)
		dst = appendUint(dst, uint64(s.Credit()))
	case AckTypeRNRNak:
		dst = append(dst, "RNR NAK(timer="...)
		dst = appendUint(dst, uint64(s.RNRTimer()))
		dst = append(dst, ',')
		dst = appendUint(dst, uint64(RNRTimerMicros[s.RNRTimer()]))
		dst = append(dst, "us"...)
	case AckTypeNak:
		dst = append(dst, "NAK("...)
		dst = s.NakCode().appendName(dst)
	default:
		dst = append(dst, "reserved("...)
		dst = AppendHex(dst, uint64(s), 2)
	}
	return append(dst, ')')
}

// RNRTimerMicros maps an RNR NAK timer code to the minimum time, in
// microseconds, the requester waits before it retries (IBTA 9.7.5.2.8,
// Table 45). Code 0 is the longest wait.
var RNRTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimeout returns the wait of RNR timer code code (its low 5 bits).
func RNRTimeout(code uint8) time.Duration {
	return time.Duration(RNRTimerMicros[code&synValueMask]) * time.Microsecond
}
