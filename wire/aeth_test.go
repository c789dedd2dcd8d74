package wire

import (
	"testing"
	"time"
)

func TestSyndrome(t *testing.T) {
	tests := []struct {
		name   string
		s      Syndrome
		byte   uint8
		typ    AckType
		value  uint8
		string string
	}{
		{"rxe ACK", ACKSyndrome(CreditInvalid), 0x1f, AckTypeACK, 31, "ACK(credit=31)"},
		{"ACK no credit", ACKSyndrome(0), 0x00, AckTypeACK, 0, "ACK(credit=0)"},
		{"credit truncated to 5 bits", ACKSyndrome(0x25), 0x05, AckTypeACK, 5, "ACK(credit=5)"},
		{"RNR NAK", RNRNakSyndrome(14), 0x2e, AckTypeRNRNak, 14, "RNR NAK(timer=14,1280us)"},
		{"RNR NAK longest", RNRNakSyndrome(0), 0x20, AckTypeRNRNak, 0, "RNR NAK(timer=0,655360us)"},
		{"NAK PSN sequence error", NakSyndrome(NakPSNSequenceError), 0x60, AckTypeNak, 0, "NAK(PSN sequence error)"},
		{"NAK invalid request", NakSyndrome(NakInvalidRequest), 0x61, AckTypeNak, 1, "NAK(invalid request)"},
		{"NAK remote access error", NakSyndrome(NakRemoteAccessError), 0x62, AckTypeNak, 2, "NAK(remote access error)"},
		{"NAK remote operational error", NakSyndrome(NakRemoteOperationalError), 0x63, AckTypeNak, 3, "NAK(remote operational error)"},
		{"NAK invalid RD request", NakSyndrome(NakInvalidRDRequest), 0x64, AckTypeNak, 4, "NAK(invalid RD request)"},
		{"NAK reserved code", NakSyndrome(9), 0x69, AckTypeNak, 9, "NAK(reserved (0x09))"},
		{"reserved type", Syndrome(0x5f), 0x5f, AckTypeReserved, 31, "reserved(0x5f)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if uint8(tt.s) != tt.byte {
				t.Errorf("byte %#02x, want %#02x", uint8(tt.s), tt.byte)
			}
			if got := tt.s.Type(); got != tt.typ {
				t.Errorf("Type() = %v, want %v", got, tt.typ)
			}
			var value uint8
			switch tt.typ {
			case AckTypeACK:
				value = tt.s.Credit()
			case AckTypeRNRNak:
				value = tt.s.RNRTimer()
			default:
				value = uint8(tt.s.NakCode())
			}
			if value != tt.value {
				t.Errorf("value %d, want %d", value, tt.value)
			}
			if got := tt.s.String(); got != tt.string {
				t.Errorf("String() = %q, want %q", got, tt.string)
			}
		})
	}
}

func TestAckTypeString(t *testing.T) {
	for typ, want := range map[AckType]string{
		AckTypeACK: "ACK", AckTypeRNRNak: "RNR NAK", AckTypeReserved: "reserved", AckTypeNak: "NAK", 4: "AckType(4)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("AckType(%d).String() = %q, want %q", typ, got, want)
		}
	}
}

func TestRNRTimeout(t *testing.T) {
	tests := []struct {
		code uint8
		want time.Duration
	}{
		{0, 655360 * time.Microsecond},
		{1, 10 * time.Microsecond},
		{2, 20 * time.Microsecond},
		{12, 640 * time.Microsecond},
		{14, 1280 * time.Microsecond},
		{31, 491520 * time.Microsecond},
		{32 + 1, 10 * time.Microsecond}, // only the 5-bit code counts
	}
	for _, tt := range tests {
		if got := RNRTimeout(tt.code); got != tt.want {
			t.Errorf("RNRTimeout(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
	// Codes 1..31 grow strictly; code 0 is the longest of all.
	for c := 2; c < 32; c++ {
		if RNRTimerMicros[c] <= RNRTimerMicros[c-1] {
			t.Errorf("RNRTimerMicros[%d] = %d <= RNRTimerMicros[%d]", c, RNRTimerMicros[c], c-1)
		}
	}
	if RNRTimerMicros[0] <= RNRTimerMicros[31] {
		t.Errorf("code 0 (%d us) is not the longest", RNRTimerMicros[0])
	}
}

func TestAETH(t *testing.T) {
	// The AETH of an rxe ACK in golden/write_small.pcap: syndrome 0x1f, MSN 1.
	a := AETH(unhex(t, "1f000001"))
	if got, want := a.Fields(), (AETHFields{Syndrome: 0x1f, MSN: 1}); got != want {
		t.Fatalf("Fields() = %+v, want %+v", got, want)
	}
	b := make(AETH, AETHSize)
	b.Encode(&AETHFields{Syndrome: NakSyndrome(NakRemoteAccessError), MSN: 0xff123456})
	if got, want := b.Fields(), (AETHFields{Syndrome: 0x62, MSN: 0x123456}); got != want {
		t.Errorf("MSN not truncated to 24 bits: %+v, want %+v", got, want)
	}
	b.SetSyndrome(RNRNakSyndrome(3))
	b.SetMSN(7)
	if b.Syndrome() != 0x23 || b.MSN() != 7 {
		t.Errorf("after setters: %+v", b.Fields())
	}
}
