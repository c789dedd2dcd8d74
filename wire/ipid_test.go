package wire

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// rawCRC returns the CRC register after p from r, without the pre- and
// post-inversion of crc32.Update: r·x^(8·len(p)) mod P plus p's own CRC.
func rawCRC(r uint32, p []byte) uint32 { return ^crc32.Update(^r, crc32.IEEETable, p) }

// TestGF2 checks the polynomial arithmetic against the CRC itself: x times
// x^-1 is 1; multiplying by x^8 is the CRC of a zero byte; and invPow8[k]
// undoes 2^k zero bytes.
func TestGF2(t *testing.T) {
	if got := gf2Mul(gf2XInv, gf2X); got != gf2One {
		t.Fatalf("x·x^-1 = %#08x, want 1 (%#08x)", got, uint32(gf2One))
	}
	x8 := uint32(gf2One)
	for range 8 {
		x8 = gf2Mul(x8, gf2X)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		r := rng.Uint32()
		if got, want := gf2Mul(r, x8), rawCRC(r, []byte{0}); got != want {
			t.Fatalf("%#08x·x^8 = %#08x, the CRC of a zero byte gives %#08x", r, got, want)
		}
	}
	for k := range invPowLen {
		r := rng.Uint32()
		shifted := rawCRC(r, make([]byte, 1<<k))
		if got := shiftBack(shifted, 1<<k); got != r {
			t.Errorf("2^%d zero bytes after %#08x, shifted back: %#08x", k, r, got)
		}
	}
}

// TestRecoverIPIDBruteForce seals packets of several sizes with random IDs
// and checks RecoverIPID against trying all 65,536: exactly one ID
// verifies, and it is the one RecoverIPID finds.
func TestRecoverIPIDBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tt := range []struct {
		name string
		op   OpCode
		size int
	}{
		{"ACK", OpRCAck, 0},
		{"WRITE Only 1 byte", OpRCWriteOnly, 1},
		{"SEND Only 256 bytes", OpRCSendOnly, 256},
		{"WRITE First 1024 bytes", OpRCWriteFirst, 1024},
		{"READ response Only 4096 bytes", OpRCReadResponseOnly, 4096},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := sampleFields(tt.op)
			pkt := make([]byte, f.Len(tt.size))
			if _, err := f.Encode(pkt, samplePayload(tt.size)); err != nil {
				t.Fatal(err)
			}
			env := Envelope{Src: netip.MustParseAddrPort("10.77.0.12:49362"), Dst: netip.MustParseAddrPort("10.77.0.11:4791")}
			want := uint16(rng.Uint32())
			env.IPID = want
			env.Seal(pkt)
			var verifying []uint16
			for id := range 1 << 16 {
				env.IPID = uint16(id)
				if env.Check(pkt) == nil {
					verifying = append(verifying, uint16(id))
				}
			}
			if len(verifying) != 1 || verifying[0] != want {
				t.Fatalf("IDs that verify: %#04x, want only %#04x", verifying, want)
			}
			env.IPID = 0
			if id, ok := env.RecoverIPID(pkt); !ok || id != want {
				t.Errorf("RecoverIPID = %#04x, %v; want %#04x", id, ok, want)
			}
		})
	}
}

func TestRecoverIPIDCases(t *testing.T) {
	v4 := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), IPID: 0x4e3a}
	v6 := Envelope{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")}
	// guess returns env as a receiver sees it, assuming ID id.
	guess := func(env Envelope, id uint16) Envelope { env.IPID = id; return env }
	// sealed returns a packet of at least size bytes sealed in env.
	sealed := func(env Envelope, size int) []byte {
		b := encodeSample(t, OpRCSendOnly)
		b = append(b, make([]byte, max(0, size-len(b)))...)
		env.Seal(b)
		return b
	}
	flip := func(b []byte) []byte { b[BTHSize] ^= 0x01; return b }
	mapped := Envelope{Src: netip.MustParseAddrPort("[::ffff:10.0.0.1]:49152"), Dst: netip.MustParseAddrPort("[::ffff:10.0.0.2]:4791")}
	tests := []struct {
		name   string
		env    Envelope // the receiver's
		pkt    []byte
		wantID uint16
		wantOK bool
	}{
		{"verifies as it is", v4, sealed(v4, 0), 0x4e3a, true},
		{"from a wrong guess", guess(v4, 0x1111), sealed(v4, 0), 0x4e3a, true},
		{"sent with ID 0", guess(v4, 0x1111), sealed(guess(v4, 0), 0), 0, true},
		{"IPv4-mapped addresses are IPv4", mapped, sealed(v4, 0), 0x4e3a, true},
		{"IPv6 verifies", v6, sealed(v6, 0), 0, true},
		{"IPv6 has no ID to recover", v6, flip(sealed(v6, 0)), 0, false},
		{"corrupted payload", guess(v4, 0), flip(sealed(v4, 0)), 0, false},
		{"other addresses", Envelope{Src: v4.Dst, Dst: v4.Src}, sealed(v4, 0), 0, false},
		{"shorter than BTH and ICRC", v4, make([]byte, BTHSize+ICRCSize-1), 0, false},
		{"empty", v4, nil, 0, false},
		{"longer than a UDP datagram", v4, sealed(v4, maxUDPPayload+1), 0, false},
		{"the longest UDP datagram", guess(v4, 0), sealed(v4, maxUDPPayload), 0x4e3a, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := tt.env.RecoverIPID(tt.pkt)
			if id != tt.wantID || ok != tt.wantOK {
				t.Errorf("RecoverIPID = %#04x, %v; want %#04x, %v", id, ok, tt.wantID, tt.wantOK)
			}
		})
	}
}

// falseAcceptPacket returns a 64-byte RDMA WRITE Only sealed as rxe would,
// with a non-zero ID, and the envelope a UDP receiver knows (ID 0).
func falseAcceptPacket(t testing.TB) ([]byte, Envelope) {
	f := sampleFields(OpRCWriteOnly)
	pkt := make([]byte, f.Len(64))
	if _, err := f.Encode(pkt, samplePayload(64)); err != nil {
		t.Fatal(err)
	}
	env := Envelope{Src: netip.MustParseAddrPort("10.77.0.12:49362"), Dst: netip.MustParseAddrPort("10.77.0.11:4791"), IPID: 0x09ab}
	env.Seal(pkt)
	env.IPID = 0
	return pkt, env
}

// TestRecoverIPIDFalseAccept measures how often a corrupted packet passes:
// 2^20 copies of a packet, each with eight random bytes (any but the
// variant one the ICRC masks) changed by a random non-zero XOR, from a
// seeded generator. Such errors span more than 32 bits, so the ICRC
// difference they make is uniform: with recovery about 2^20 / 2^16 = 16
// should pass, and the bounds leave room for a Poisson count (P < 10^-4
// outside them). Every packet accepted must really verify with the ID
// found; a plain Check with the right ID passes none.
func TestRecoverIPIDFalseAccept(t *testing.T) {
	const trials = 1 << 20
	pkt, env := falseAcceptPacket(t)
	right := env
	right.IPID = 0x09ab
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, len(pkt))
	recovered, checked := 0, 0
	for range trials {
		copy(buf, pkt)
		for range 8 {
			i := rng.IntN(len(buf) - 1)
			if i >= bthECN {
				i++ // skip the masked byte
			}
			buf[i] ^= byte(1 + rng.IntN(255))
		}
		if bytes.Equal(buf, pkt) { // the changes cancelled out
			continue
		}
		if id, ok := env.RecoverIPID(buf); ok {
			recovered++
			if found := (Envelope{Src: env.Src, Dst: env.Dst, IPID: id}); found.Check(buf) != nil {
				t.Errorf("accepted with ID %#04x, which does not verify", id)
			}
		}
		if right.Check(buf) == nil {
			checked++
		}
	}
	t.Logf("%d of %d corrupted packets accepted through RecoverIPID: %.3g (2^-16 = %.3g); %d by Check",
		recovered, trials, float64(recovered)/trials, 1.0/(1<<16), checked)
	if recovered < 4 || recovered > 36 {
		t.Errorf("%d false accepts in %d trials, expected about 16", recovered, trials)
	}
	if checked != 0 {
		t.Errorf("Check accepted %d corrupted packets", checked)
	}
}

// TestRecoverIPIDSingleByte backs what RecoverIPID's documentation says of
// short errors, which are not spread evenly: 15 of the 255 ways to corrupt
// byte 93 of the UDP payload pass (the byte whose CRC contribution comes
// closest to an identification change), and 21 of the 1,049,325 single-byte
// corruptions of a READ response with a 4 KiB payload. Each corruption of
// byte 93 that passes must verify with the ID found, and three that do not
// pass must verify with no ID at all.
func TestRecoverIPIDSingleByte(t *testing.T) {
	pkt, env := falseAcceptPacket(t)
	const weak = 93
	passed := 0
	var rejected []byte
	for v := 1; v < 256; v++ {
		pkt[weak] ^= byte(v)
		if id, ok := env.RecoverIPID(pkt); ok {
			passed++
			if found := (Envelope{Src: env.Src, Dst: env.Dst, IPID: id}); found.Check(pkt) != nil {
				t.Errorf("byte %d ^ %#02x accepted with ID %#04x, which does not verify", weak, v, id)
			}
		} else if len(rejected) < 3 {
			rejected = append(rejected, byte(v))
		}
		pkt[weak] ^= byte(v)
	}
	if passed != 15 {
		t.Errorf("%d of 255 corruptions of byte %d pass, want 15", passed, weak)
	}
	for _, v := range rejected {
		pkt[weak] ^= v
		for id := range 1 << 16 {
			if try := (Envelope{Src: env.Src, Dst: env.Dst, IPID: uint16(id)}); try.Check(pkt) == nil {
				t.Errorf("byte %d ^ %#02x rejected, yet ID %#04x verifies", weak, v, id)
			}
		}
		pkt[weak] ^= v
	}

	// Every single-byte error of a 4116-byte packet, counted the way
	// RecoverIPID sees it: the CRC of the changed byte, shifted back to the
	// end of the identification, 22 bytes of IPv4 and UDP header before the
	// UDP payload.
	const pktLen = BTHSize + AETHSize + 4096 + ICRCSize
	const before = ipv4HeaderSize - ipv4IDEnd + udpHeaderSize
	total := 0
	for off := range pktLen {
		if off == bthECN {
			continue
		}
		for v := 1; v < 256; v++ {
			if _, ok := ipidSolver.solve(shiftBack(rawCRC(0, []byte{byte(v)}), before+off+1)); ok {
				total++
			}
		}
	}
	if total != 21 {
		t.Errorf("%d of %d single-byte errors pass, want 21", total, (pktLen-1)*255)
	}
}

// TestRecoverIPIDBits: every single-bit error in a packet with a 4 KiB
// payload, the largest RoCE MTU, is still caught; algebraically, the first
// bit whose flip passes as an identification change lies 26,766 bytes after
// the identification, beyond any packet a 9000-byte Ethernet MTU carries.
// Double-bit errors are another matter: 14 of the 288,420 of a 96-byte
// packet pass, as RecoverIPID's documentation says, and each must verify
// with the ID found.
func TestRecoverIPIDBits(t *testing.T) {
	f := sampleFields(OpRCReadResponseOnly)
	pkt := make([]byte, f.Len(4096))
	if _, err := f.Encode(pkt, samplePayload(4096)); err != nil {
		t.Fatal(err)
	}
	env := Envelope{Src: netip.MustParseAddrPort("10.77.0.12:49362"), Dst: netip.MustParseAddrPort("10.77.0.11:4791"), IPID: 0x4e3a}
	env.Seal(pkt)
	env.IPID = 0
	for i := range pkt {
		for b := range 8 {
			pkt[i] ^= 1 << b
			if id, ok := env.RecoverIPID(pkt); ok && i != bthECN {
				t.Errorf("byte %d bit %d flipped: accepted with ID %#04x", i, b, id)
			}
			pkt[i] ^= 1 << b
		}
	}
	// A flip of bit b of the byte q bytes after the identification changes
	// the CRC, seen from the end of the identification, by the CRC of that
	// byte shifted back q+1 bytes.
	first := -1
	for q := 0; q < 1<<15 && first < 0; q++ {
		for b := range 8 {
			if _, ok := ipidSolver.solve(shiftBack(rawCRC(0, []byte{1 << b}), q+1)); ok {
				first = q
			}
		}
	}
	if first != 26766 {
		t.Errorf("first undetected single-bit error %d bytes after the ID, want 26766", first)
	}

	small, env := falseAcceptPacket(t)
	var bits []int // every bit but those of the masked byte
	for i := range len(small) * 8 {
		if i/8 != bthECN {
			bits = append(bits, i)
		}
	}
	passed, pairs := 0, 0
	flip := func(i int) { small[i/8] ^= 1 << (i % 8) }
	for x, a := range bits {
		for _, b := range bits[x+1:] {
			flip(a)
			flip(b)
			pairs++
			if id, ok := env.RecoverIPID(small); ok {
				passed++
				if found := (Envelope{Src: env.Src, Dst: env.Dst, IPID: id}); found.Check(small) != nil {
					t.Errorf("bits %d and %d flipped: accepted with ID %#04x, which does not verify", a, b, id)
				}
			}
			flip(a)
			flip(b)
		}
	}
	if passed != 14 || pairs != 288420 {
		t.Errorf("%d of %d double-bit errors pass, want 14 of 288420", passed, pairs)
	}
}

func BenchmarkRecoverIPID(b *testing.B) {
	for _, tt := range []struct {
		name string
		op   OpCode
		size int
		id   uint16 // the sender's ID; the receiver assumes 0
	}{
		{"4KiB", OpRCWriteOnly, 4096, 0x4e3a},
		{"4KiB/verifies", OpRCWriteOnly, 4096, 0},
		{"ACK", OpRCAck, 0, 0x4e3a},
	} {
		b.Run(tt.name, func(b *testing.B) {
			f := sampleFields(tt.op)
			pkt := make([]byte, f.Len(tt.size))
			if _, err := f.Encode(pkt, samplePayload(tt.size)); err != nil {
				b.Fatal(err)
			}
			env := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), IPID: tt.id}
			env.Seal(pkt)
			env.IPID = 0
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if id, ok := env.RecoverIPID(pkt); !ok || id != tt.id {
					b.Fatalf("RecoverIPID = %#04x, %v", id, ok)
				}
			}
		})
	}
}
