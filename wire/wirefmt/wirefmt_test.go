package wirefmt

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/softnic/softnic/wire"
)

// Whole packets (UDP payloads) from ../shared/golden, Linux 6.1 rxe.
const (
	// write_small.pcap: the ACK of the first WRITE (frame 21).
	goldenACK = "1100ffff0000005f0099f6921f000001db7ebda3"
	// atomic_fadd.pcap: a FETCH ADD and its ATOMIC ACKNOWLEDGE.
	goldenFetchAdd  = "1400ffff0000006580657a9c0000564c1a9b30000000629d00000000000000010000000000000000ec9a198a"
	goldenAtomicAck = "1200ffff0000006500657a9c1f000001c7af2fe19ef00f150c2e245e"
)

// Packets with a distinct value in every field (package wire's test
// samples), one for each extension header: 37 or 256 bytes of payload.
const (
	writeOnlyImm      = "0b30ffff0012345680abcdef00007f12345670001a2b3c4d00001000deadbeef01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd00000000000000"
	compareSwap       = "1300ffff0012345680abcdef00007f00000000f8000055aa1111222233334444555566667777888800000000"
	sendOnlyInv       = "17b0ffff0012345680abcdef00cafe0101080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd00000000000000"
	udSendOnlyImm     = "65b0ffff0012345680abcdef8001000000000042deadbeef01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd00000000000000"
	flush             = "1c00ffff0012345680abcdef0000001100007f12345670001a2b3c4d0000100000000000"
	readResponseFirst = "0d00ffff0012345600abcdef1f00010201080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b121920272e353c434a51585f666d747b828990979ea5acb3bac1c8cfd6dde4ebf2f900070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9e0e7eef5fc030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959ca3aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21282f363d444b525960676e757c838a91989fa6adb4bbc2c9d0d7dee5ecf3fa00000000"
)

func decode(t testing.TB, s string) *wire.Packet {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	p := new(wire.Packet)
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestText checks the summary of packets rxe sent and of one packet for
// each extension header, and lines of their verbose listing.
func TestText(t *testing.T) {
	tests := []struct {
		name    string
		hex     string
		summary string
		verbose []string // lines that must appear
	}{
		{"rxe ACK", goldenACK,
			"RC Acknowledge qp=0x00005f psn=0x99f692 ackreq=0 syndrome=ACK(credit=31) msn=1 payload=0",
			[]string{"  AETH syndrome=0x1f ACK(credit=31) msn=1\n"}},
		{"rxe FETCH ADD", goldenFetchAdd,
			"RC Fetch Add qp=0x000065 psn=0x657a9c ackreq=1 va=0x0000564c1a9b3000 rkey=0x0000629d add=0x1 payload=0",
			[]string{"  AtomicETH va=0x0000564c1a9b3000 rkey=0x0000629d swapadd=0x0000000000000001 compare=0x0000000000000000\n"}},
		{"rxe ATOMIC ACKNOWLEDGE", goldenAtomicAck,
			"RC Atomic Acknowledge qp=0x000065 psn=0x657a9c ackreq=0 syndrome=ACK(credit=31) msn=1 orig=0xc7af2fe19ef00f15 payload=0",
			[]string{"  AtomicAckETH orig=0xc7af2fe19ef00f15\n"}},
		{"RETH and ImmDT", writeOnlyImm,
			"RC RDMA Write Only Immediate qp=0x123456 psn=0xabcdef ackreq=1 va=0x00007f1234567000 rkey=0x1a2b3c4d dmalen=4096 imm=0xdeadbeef payload=37",
			[]string{"  RETH va=0x00007f1234567000 rkey=0x1a2b3c4d dmalen=4096\n", "  ImmDT imm=0xdeadbeef\n", "  payload=37 pad=3 icrc=0x00000000\n"}},
		{"AtomicETH", compareSwap,
			"RC Compare Swap qp=0x123456 psn=0xabcdef ackreq=1 va=0x00007f00000000f8 rkey=0x000055aa swap=0x1111222233334444 compare=0x5555666677778888 payload=0",
			[]string{"  AtomicETH va=0x00007f00000000f8 rkey=0x000055aa swapadd=0x1111222233334444 compare=0x5555666677778888\n"}},
		{"IETH", sendOnlyInv,
			"RC Send Only Invalidate qp=0x123456 psn=0xabcdef ackreq=1 invrkey=0x00cafe01 payload=37",
			[]string{"  IETH rkey=0x00cafe01\n", " se=1 "}},
		{"DETH", udSendOnlyImm,
			"UD Send Only Immediate qp=0x123456 psn=0xabcdef ackreq=1 qkey=0x80010000 srcqp=0x000042 imm=0xdeadbeef payload=37",
			[]string{"  DETH qkey=0x80010000 resv8=0x00 srcqp=0x000042\n"}},
		{"FETH", flush,
			"RC Flush qp=0x123456 psn=0xabcdef ackreq=1 plt=1 sel=1 va=0x00007f1234567000 rkey=0x1a2b3c4d dmalen=4096 payload=0",
			[]string{"  FETH plt=1 sel=1 resv=0x00000000\n"}},
		{"AETH", readResponseFirst,
			"RC RDMA Read Response First qp=0x123456 psn=0xabcdef ackreq=0 syndrome=ACK(credit=31) msn=258 payload=256",
			[]string{"  AETH syndrome=0x1f ACK(credit=31) msn=258\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decode(t, tt.hex)
			if got := string(AppendSummary(nil, p)); got != tt.summary {
				t.Errorf("AppendSummary:\n got %q\nwant %q", got, tt.summary)
			}
			verbose := string(AppendVerbose(nil, p))
			for _, line := range tt.verbose {
				if !strings.Contains(verbose, line) {
					t.Errorf("AppendVerbose lacks %q:\n%s", line, verbose)
				}
			}
		})
	}
}

func TestAppendVerbose(t *testing.T) {
	want := "" +
		"  BTH opcode=0x12 se=0 m=0 padcnt=0 tver=0 pkey=0xffff fecn=0 becn=0 resv6a=0x00 destqp=0x000065 ackreq=0 resv7=0x00 psn=0x657a9c\n" +
		"  AETH syndrome=0x1f ACK(credit=31) msn=1\n" +
		"  AtomicAckETH orig=0xc7af2fe19ef00f15\n" +
		"  payload=0 pad=0 icrc=0x5e242e0c\n"
	if got := string(AppendVerbose(nil, decode(t, goldenAtomicAck))); got != want {
		t.Errorf("AppendVerbose:\n%s\nwant:\n%s", got, want)
	}
}

// TestNoAllocs: printing a packet into a buffer with room allocates
// nothing, so that a capture can be printed per packet.
func TestNoAllocs(t *testing.T) {
	p := decode(t, writeOnlyImm)
	text := make([]byte, 0, 4096)
	for name, fn := range map[string]func(){
		"AppendSummary": func() { _ = AppendSummary(text[:0], p) },
		"AppendVerbose": func() { _ = AppendVerbose(text[:0], p) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, n)
		}
	}
}

// FuzzText prints whatever decodes: no packet may panic the printer.
func FuzzText(f *testing.F) {
	for _, s := range []string{goldenACK, goldenFetchAdd, goldenAtomicAck, writeOnlyImm, compareSwap, sendOnlyInv, udSendOnlyImm, flush, readResponseFirst} {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if p.Decode(b) != nil {
			return
		}
		if s := AppendSummary(nil, &p); len(s) == 0 {
			t.Error("empty summary")
		}
		if v := AppendVerbose(nil, &p); !strings.HasPrefix(string(v), "  BTH ") {
			t.Errorf("verbose listing does not start with the BTH: %q", v)
		}
	})
}
