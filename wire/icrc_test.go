package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"
	"time"
)

// IP and UDP headers of golden packets (../shared/golden, rxe on Linux 6.1),
// matching the packets in packet_test.go.
const (
	goldenACKIPUDP       = "45000030342340004011f1e90a4d000b0a4d000ce34112b7001c0000"
	goldenFetchAddIPUDP  = "4500004803144000401122e10a4d000c0a4d000be7d912b700340000"
	goldenAtomicAckIPUDP = "450000383f3840004011e6cc0a4d000b0a4d000ce7d912b700240000"
)

// ipv6Vector is an IPv6 packet whose ICRC, 0x9338acae, was computed outside
// Go with Python's zlib.crc32 following rxe_icrc.c: 8 bytes of 0xFF, the IPv6
// header with traffic class, flow label and hop limit set to ones, the UDP
// header with checksum 0xFFFF, the BTH with byte 4 0xFF, then the rest. The
// header carries flow label 0x12345, hop limit 64 and UDP checksum 0x1234 so
// that the masks matter.
const (
	ipv6VectorIPUDP = "60012345001c1140fd000000000000000000000000000001fd000000000000000000000000000002c00012b7001c1234"
	ipv6VectorPkt   = "1100ffff0000005f0099f6921f000001"
	ipv6VectorICRC  = 0x9338acae
	// The same packet from 127.0.0.1:50000 to 127.0.0.2:4791 in the IPv4
	// header Envelope assumes (ID 0, DF), by the same Python recipe.
	ipv4ZeroIDICRC = 0xfdd6748b
)

func TestICRCGolden(t *testing.T) {
	tests := []struct {
		name  string
		ipudp string
		pkt   string
	}{
		{"ACK", goldenACKIPUDP, goldenACK},
		{"FETCH ADD", goldenFetchAddIPUDP, goldenFetchAdd},
		{"ATOMIC ACKNOWLEDGE", goldenAtomicAckIPUDP, goldenAtomicAck},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ipudp, pkt := unhex(t, tt.ipudp), unhex(t, tt.pkt)
			want := binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:])
			got, err := ICRCFromHeaders(ipudp, pkt[:len(pkt)-ICRCSize])
			if err != nil || got != want {
				t.Errorf("ICRCFromHeaders = %#08x, %v; want %#08x", got, err, want)
			}
			// The Envelope rebuilds the same IPv4 header from addresses,
			// ports and the captured ID.
			env := envelopeOf(t, ipudp)
			if got := env.ICRC(pkt[:len(pkt)-ICRCSize]); got != want {
				t.Errorf("Envelope.ICRC = %#08x, want %#08x", got, want)
			}
			if err := env.Check(pkt); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
}

// envelopeOf reads addresses, ports and IPv4 ID from IP and UDP headers.
func envelopeOf(t *testing.T, ipudp []byte) Envelope {
	t.Helper()
	if ipudp[0]>>4 == 4 {
		src, _ := netip.AddrFromSlice(ipudp[12:16])
		dst, _ := netip.AddrFromSlice(ipudp[16:20])
		return Envelope{
			Src:  netip.AddrPortFrom(src, binary.BigEndian.Uint16(ipudp[20:])),
			Dst:  netip.AddrPortFrom(dst, binary.BigEndian.Uint16(ipudp[22:])),
			IPID: binary.BigEndian.Uint16(ipudp[4:]),
		}
	}
	src, _ := netip.AddrFromSlice(ipudp[8:24])
	dst, _ := netip.AddrFromSlice(ipudp[24:40])
	return Envelope{
		Src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(ipudp[40:])),
		Dst: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(ipudp[42:])),
	}
}

func TestICRCVectors(t *testing.T) {
	pkt := unhex(t, ipv6VectorPkt)
	t.Run("IPv6 from headers", func(t *testing.T) {
		got, err := ICRCFromHeaders(unhex(t, ipv6VectorIPUDP), pkt)
		if err != nil || got != ipv6VectorICRC {
			t.Errorf("= %#08x, %v; want %#08x", got, err, uint32(ipv6VectorICRC))
		}
	})
	t.Run("IPv6 envelope", func(t *testing.T) {
		env := envelopeOf(t, unhex(t, ipv6VectorIPUDP))
		if got := env.ICRC(pkt); got != ipv6VectorICRC {
			t.Errorf("= %#08x, want %#08x", got, uint32(ipv6VectorICRC))
		}
	})
	t.Run("IPv4 envelope, ID 0", func(t *testing.T) {
		env := Envelope{Src: netip.MustParseAddrPort("127.0.0.1:50000"), Dst: netip.MustParseAddrPort("127.0.0.2:4791")}
		if got := env.ICRC(pkt); got != ipv4ZeroIDICRC {
			t.Errorf("= %#08x, want %#08x", got, uint32(ipv4ZeroIDICRC))
		}
	})
	t.Run("IPv4-mapped IPv6 addresses are IPv4", func(t *testing.T) {
		env := Envelope{Src: netip.MustParseAddrPort("[::ffff:127.0.0.1]:50000"), Dst: netip.MustParseAddrPort("[::ffff:127.0.0.2]:4791")}
		if got := env.ICRC(pkt); got != ipv4ZeroIDICRC {
			t.Errorf("= %#08x, want %#08x", got, uint32(ipv4ZeroIDICRC))
		}
	})
}

// TestICRCCoverage flips each byte of the IP, UDP and BTH headers and checks
// that exactly the variant fields leave the ICRC unchanged.
func TestICRCCoverage(t *testing.T) {
	tests := []struct {
		name       string
		ipudp      string
		structural map[int]bool   // offsets whose change makes the header unusable
		masked     map[int]string // offset in ipudp+BTH -> field name
	}{
		{"IPv4", goldenACKIPUDP, map[int]bool{0: true, 9: true}, map[int]string{
			1: "TOS", 8: "TTL", 10: "checksum", 11: "checksum", 26: "UDP checksum", 27: "UDP checksum", 28 + 4: "BTH FECN/BECN/Resv6a",
		}},
		{"IPv6", ipv6VectorIPUDP, map[int]bool{6: true}, map[int]string{
			0: "traffic class (low nibble of byte 0)", 1: "traffic class/flow label", 2: "flow label", 3: "flow label",
			7: "hop limit", 46: "UDP checksum", 47: "UDP checksum", 48 + 4: "BTH FECN/BECN/Resv6a",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := unhex(t, tt.ipudp)
			pkt := unhex(t, ipv6VectorPkt)
			base, err := ICRCFromHeaders(hdr, pkt)
			if err != nil {
				t.Fatal(err)
			}
			for off := range len(hdr) + BTHSize {
				h, p := append([]byte(nil), hdr...), append([]byte(nil), pkt...)
				flip := byte(0x0f) // low nibble: keeps the IP version intact
				if off < len(h) {
					h[off] ^= flip
				} else {
					p[off-len(h)] ^= flip
				}
				got, err := ICRCFromHeaders(h, p)
				if tt.structural[off] {
					if !errors.Is(err, ErrBadIPHeader) {
						t.Errorf("offset %d: err = %v, want ErrBadIPHeader", off, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("offset %d: %v", off, err)
				}
				field, masked := tt.masked[off]
				if masked && got != base {
					t.Errorf("offset %d (%s) is covered, want masked", off, field)
				}
				if !masked && got == base {
					t.Errorf("offset %d is masked, want covered", off)
				}
			}
		})
	}
	t.Run("payload", func(t *testing.T) {
		env := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
		pkt := encodeSample(t, OpRCWriteOnly)
		base := env.ICRC(pkt[:len(pkt)-ICRCSize])
		for off := BTHSize; off < len(pkt)-ICRCSize; off++ {
			pkt[off] ^= 1
			if env.ICRC(pkt[:len(pkt)-ICRCSize]) == base {
				t.Errorf("offset %d not covered", off)
			}
			pkt[off] ^= 1
		}
	})
}

func TestEnvelopeFieldsCovered(t *testing.T) {
	base := Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	pkt := encodeSample(t, OpRCSendOnly)
	want := base.ICRC(pkt)
	tests := []struct {
		name string
		env  Envelope
	}{
		{"IP ID", Envelope{Src: base.Src, Dst: base.Dst, IPID: 1}},
		{"source address", Envelope{Src: netip.MustParseAddrPort("10.0.0.3:49152"), Dst: base.Dst}},
		{"destination address", Envelope{Src: base.Src, Dst: netip.MustParseAddrPort("10.0.0.3:4791")}},
		{"source port", Envelope{Src: netip.MustParseAddrPort("10.0.0.1:49153"), Dst: base.Dst}},
		{"destination port", Envelope{Src: base.Src, Dst: netip.MustParseAddrPort("10.0.0.2:4792")}},
		{"IPv6", Envelope{Src: netip.MustParseAddrPort("[fd00::1]:49152"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")}},
		{"mixed families count as IPv6", Envelope{Src: base.Src, Dst: netip.MustParseAddrPort("[fd00::2]:4791")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env.ICRC(pkt) == want {
				t.Errorf("ICRC unchanged")
			}
		})
	}
}

// TestTrafficClass: an envelope's traffic class goes into the IP header a
// capture shows (IPv4 TOS, IPv6 Traffic Class), is read back from it, and
// leaves the ICRC alone, which masks it: a packet sealed with one class
// checks under another.
func TestTrafficClass(t *testing.T) {
	for _, tt := range []struct{ name, src, dst string }{
		{"IPv4", "10.0.0.1:49152", "10.0.0.2:4791"},
		{"IPv6", "[fd00::1]:49152", "[fd00::2]:4791"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plain := Envelope{Src: netip.MustParseAddrPort(tt.src), Dst: netip.MustParseAddrPort(tt.dst)}
			marked := plain
			marked.TrafficClass = 0xb9 // DSCP 46 (EF), ECN 01 (ECT(1))
			pkt := encodeSample(t, OpRCSendOnly)
			if plain.ICRC(pkt) != marked.ICRC(pkt) {
				t.Error("the traffic class changes the ICRC")
			}
			marked.Seal(pkt)
			if err := plain.Check(pkt); err != nil {
				t.Errorf("sealed with class %#x, checked with 0: %v", marked.TrafficClass, err)
			}
			var buf bytes.Buffer
			w, err := NewPcapWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WritePacket(time.Unix(1, 0), &marked, pkt); err != nil {
				t.Fatal(err)
			}
			r, err := NewPcapReader(&buf)
			if err != nil {
				t.Fatal(err)
			}
			f, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f.Env != marked || f.ICRC != ICRCOK {
				t.Errorf("captured envelope %+v, ICRC %v; want %+v, ICRCOK", f.Env, f.ICRC, marked)
			}
		})
	}
}

func TestSealCheck(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("[::1]:49152"), Dst: netip.MustParseAddrPort("[::1]:4791")}
	pkt := encodeSample(t, OpRCWriteFirst)
	if err := env.Check(pkt); !errors.Is(err, ErrBadICRC) {
		t.Fatalf("unsealed packet: Check = %v, want ErrBadICRC", err)
	}
	env.Seal(pkt)
	if err := env.Check(pkt); err != nil {
		t.Fatalf("sealed packet: Check = %v", err)
	}
	n := len(pkt) - ICRCSize
	if got, want := binary.LittleEndian.Uint32(pkt[n:]), env.ICRC(pkt[:n]); got != want {
		t.Errorf("stored %#08x, want %#08x little-endian", got, want)
	}
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		want   error
	}{
		{"payload bit", func(b []byte) []byte { b[40] ^= 0x80; return b }, ErrBadICRC},
		{"ICRC bit", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrBadICRC},
		{"PSN", func(b []byte) []byte { BTH(b).SetPSN(BTH(b).PSN().Add(1)); return b }, ErrBadICRC},
		{"FECN is variant", func(b []byte) []byte { BTH(b).SetFECN(true); return b }, nil},
		{"too short", func(b []byte) []byte { return b[:BTHSize+ICRCSize-1] }, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mutate(append([]byte(nil), pkt...))
			if err := env.Check(b); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Check = %v, want %v", err, tt.want)
			}
		})
	}
	short := []byte{1, 2, 3}
	env.Seal(short)
	if short[0] != 1 || short[1] != 2 || short[2] != 3 {
		t.Errorf("Seal wrote into a slice shorter than an ICRC")
	}
}

func TestICRCFromHeadersErrors(t *testing.T) {
	v4 := unhex(t, goldenACKIPUDP)
	v6 := unhex(t, ipv6VectorIPUDP)
	pkt := unhex(t, ipv6VectorPkt)
	with := func(b []byte, off int, v byte) []byte {
		b = append([]byte(nil), b...)
		b[off] = v
		return b
	}
	tests := []struct {
		name  string
		ipudp []byte
		pkt   []byte
		want  error
	}{
		{"empty headers", nil, pkt, ErrTruncated},
		{"packet shorter than BTH", v4, pkt[:BTHSize-1], ErrTruncated},
		{"IPv4 without UDP", v4[:20], pkt, ErrTruncated},
		{"IPv6 without UDP", v6[:40], pkt, ErrTruncated},
		{"IPv4 with options", with(v4, 0, 0x46), pkt, ErrBadIPHeader},
		{"IPv4 TCP", with(v4, 9, 6), pkt, ErrBadIPHeader},
		{"IPv6 extension header", with(v6, 6, 0), pkt, ErrBadIPHeader},
		{"IPv4 trailing bytes", append(append([]byte(nil), v4...), 0), pkt, ErrBadIPHeader},
		{"version 5", with(v4, 0, 0x55), pkt, ErrBadIPHeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ICRCFromHeaders(tt.ipudp, tt.pkt); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestUpdateIEEE compares the slicing-by-8 CRC with hash/crc32 for every
// length up to 64 and chained calls.
func TestUpdateIEEE(t *testing.T) {
	data := samplePayload(64)
	for n := range len(data) + 1 {
		if got, want := updateIEEE(0, data[:n]), crc32.ChecksumIEEE(data[:n]); got != want {
			t.Errorf("length %d: %#08x, want %#08x", n, got, want)
		}
		split := n / 3
		if got, want := updateIEEE(updateIEEE(0, data[:split]), data[split:n]), crc32.ChecksumIEEE(data[:n]); got != want {
			t.Errorf("length %d split at %d: %#08x, want %#08x", n, split, got, want)
		}
	}
}
