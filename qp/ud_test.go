package qp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

const udQKey = 0x11111111 // the Q_Key connect gives UD QPs

// udPair returns two UD QPs in RTS at ipA and ipB ("10.0.0.1", "[fd00::2]").
func udPair(t *testing.T, ipA, ipB string) (*sim, *host, *host) {
	a := newHost(t, "a", ipA, verbs.UD, 0x11, qp.Config{})
	b := newHost(t, "b", ipB, verbs.UD, 0x22, qp.Config{})
	connect(t, a, b, defaultAttr())
	return newSim(t, a, b), a, b
}

// udSend returns a SEND of n bytes at offset 0 of a's region to b's QP.
func udSend(a, b *host, n uint32) *verbs.SendWR {
	return &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)),
		Dest: b.addr, DestQPN: b.qp.Num(), QKey: udQKey}
}

// TestUDSend: SEND and SEND with immediate between two UD QPs. The
// receiver finds the 40-byte GRH in front of the data (ibv_post_recv(3): a
// UD receive buffer starts with 40 bytes for it; on RoCEv2 rxe puts there the IP header the datagram came in: over IPv4, 20
// zero bytes then the IPv4 header), and a completion with the sender's QPN
// and address, IBV_WC_GRH and byte_len = 40 + payload. The sender's WR
// completes once sent (nothing acknowledges a datagram).
func TestUDSend(t *testing.T) {
	nets := []struct{ name, ipA, ipB string }{
		{"ipv4", "10.0.0.1", "10.0.0.2"},
		{"ipv6", "[fd00::1]", "[fd00::2]"},
	}
	for _, nw := range nets {
		for _, imm := range []bool{false, true} {
			for _, n := range []uint32{0, 100, 4096} {
				name := nw.name + "/send/" + itoa(n)
				if imm {
					name = nw.name + "/send-imm/" + itoa(n)
				}
				t.Run(name, func(t *testing.T) {
					s, a, b := udPair(t, nw.ipA, nw.ipB)
					var pktLen int
					s.drop = func(h *host, p *wire.Packet) bool {
						if h == a {
							pktLen = len(p.Raw)
						}
						return false
					}
					fill(a.buf[:n], 4)
					const off = 4096 // of the receive buffer in b's region
					postRecv(t, b, &verbs.RecvWR{ID: 9, SGL: sgl(b.sge(off, wire.GRHSize+4096))})
					wr := udSend(a, b, n)
					if imm {
						wr.Opcode, wr.Imm = verbs.WRSendImm, 0xABCD
					}
					post(t, a, wr)
					s.transmitAll()
					want := verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCSend, ByteLen: n, QPN: a.qp.Num()}
					if imm {
						want.Flags = verbs.WCWithImm
					}
					if got := a.poll(); len(got) != 1 {
						t.Fatalf("%d send completions once sent, want 1", len(got))
					}
					expectWC(t, a.wcs[0], want)

					wcs := s.waitWC(b, 1, time.Second)
					want = verbs.WC{ID: 9, Status: verbs.Success, Opcode: verbs.WCRecv, Flags: verbs.WCGRH, ByteLen: wire.GRHSize + n,
						QPN: b.qp.Num(), SrcQPN: a.qp.Num(), Src: a.addr}
					if imm {
						want.Flags |= verbs.WCWithImm
						want.Imm = 0xABCD
					}
					expectWC(t, wcs[0], want)
					if !bytes.Equal(b.buf[off+wire.GRHSize:off+wire.GRHSize+n], a.buf[:n]) {
						t.Error("the data behind the GRH differs from what was sent")
					}
					checkGRH(t, b.buf[off:off+wire.GRHSize], a.addr.Addr(), b.addr.Addr(), pktLen)
				})
			}
		}
	}
}

// checkGRH checks the GRH area of a UD receive buffer against the IP
// header of a datagram of pktLen bytes (BTH through ICRC) from src to dst,
// as wire.Envelope.PutGRH writes it.
func checkGRH(t *testing.T, grh []byte, src, dst netip.Addr, pktLen int) {
	t.Helper()
	udpLen := 8 + pktLen
	if src.Is4() {
		if !bytes.Equal(grh[:20], make([]byte, 20)) {
			t.Errorf("IPv4: the first 20 bytes of the GRH are %x, want zeros", grh[:20])
		}
		ip := grh[20:]
		switch {
		case ip[0] != 0x45:
			t.Errorf("IPv4 version/IHL %#x, want 0x45", ip[0])
		case int(binary.BigEndian.Uint16(ip[2:])) != 20+udpLen:
			t.Errorf("IPv4 total length %d, want %d", binary.BigEndian.Uint16(ip[2:]), 20+udpLen)
		case binary.BigEndian.Uint16(ip[6:]) != 0x4000:
			t.Errorf("IPv4 flags/fragment %#x, want DF", binary.BigEndian.Uint16(ip[6:]))
		case ip[9] != 17:
			t.Errorf("IPv4 protocol %d, want 17 (UDP)", ip[9])
		case netip.AddrFrom4([4]byte(ip[12:16])) != src || netip.AddrFrom4([4]byte(ip[16:20])) != dst:
			t.Errorf("IPv4 addresses %v → %v, want %v → %v", ip[12:16], ip[16:20], src, dst)
		case onesSum(ip) != 0xFFFF:
			t.Errorf("IPv4 header checksum %#x does not verify", binary.BigEndian.Uint16(ip[10:]))
		}
		return
	}
	switch {
	case grh[0]>>4 != 6:
		t.Errorf("IPv6 version %d, want 6", grh[0]>>4)
	case int(binary.BigEndian.Uint16(grh[4:])) != udpLen:
		t.Errorf("IPv6 payload length %d, want %d", binary.BigEndian.Uint16(grh[4:]), udpLen)
	case grh[6] != 17:
		t.Errorf("IPv6 next header %d, want 17 (UDP)", grh[6])
	case netip.AddrFrom16([16]byte(grh[8:24])) != src || netip.AddrFrom16([16]byte(grh[24:40])) != dst:
		t.Errorf("IPv6 addresses %x → %x, want %v → %v", grh[8:24], grh[24:40], src, dst)
	}
}

// onesSum is the RFC 1071 one's complement sum of b.
func onesSum(b []byte) uint16 {
	s := uint32(0)
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}

// TestUDQKey: a UD QP accepts only datagrams carrying its Q_Key (the IBTA
// Q_Key check; rxe drops the others) and counts the others (bad_qkey); a WR
// whose Q_Key has the high bit set sends the QP's own Q_Key instead (the
// IBTA rule for privileged Q_Keys in a WR, as rxe applies it).
func TestUDQKey(t *testing.T) {
	cases := []struct {
		name      string
		wrQKey    uint32
		wireQKey  uint32
		delivered bool
	}{
		{"matching", udQKey, udQKey, true},
		{"wrong", 0x22222222, 0x22222222, false},
		{"high-bit-uses-own", 0x80000000, udQKey, true},
		{"high-bit-ignores-rest", 0x8000ABCD, udQKey, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, a, b := udPair(t, "10.0.0.1", "10.0.0.2")
			var sent []uint32
			s.drop = func(h *host, p *wire.Packet) bool {
				sent = append(sent, p.DETH.QKey())
				return false
			}
			postRecv(t, b, &verbs.RecvWR{ID: 9, SGL: sgl(b.sge(0, 4096))})
			wr := udSend(a, b, 10)
			wr.QKey = c.wrQKey
			post(t, a, wr)
			s.settle(time.Second)
			if len(sent) != 1 || sent[0] != c.wireQKey {
				t.Errorf("Q_Keys on the wire %#x, want [%#x]", sent, c.wireQKey)
			}
			got, dropped := len(b.poll()), b.counter(verbs.BadQKey)
			if c.delivered && (got != 1 || dropped != 0) || !c.delivered && (got != 0 || dropped != 1) {
				t.Errorf("b has %d completions and bad_qkey %d; delivered should be %v", got, dropped, c.delivered)
			}
		})
	}
}

// TestUDLimits: what a UD QP refuses or drops.
func TestUDLimits(t *testing.T) {
	t.Run("larger-than-MTU-refused-at-post", func(t *testing.T) {
		// A UD message is one packet: ibv_post_send on rxe
		// refuses one larger than the path MTU with EINVAL.
		_, a, b := udPair(t, "10.0.0.1", "10.0.0.2")
		if err := a.qp.PostSend(udSend(a, b, 4097)); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("PostSend of 4097 bytes with MTU 4096 = %v, want ErrInvalid", err)
		}
		if err := a.qp.PostSend(udSend(a, b, 4096)); err != nil {
			t.Errorf("PostSend of 4096 bytes = %v", err)
		}
	})
	t.Run("no-receive-WR-dropped", func(t *testing.T) {
		// Class D: a datagram with nowhere to go is dropped silently.
		s, a, b := udPair(t, "10.0.0.1", "10.0.0.2")
		post(t, a, udSend(a, b, 10))
		s.settle(time.Second)
		if n := b.counter(verbs.UDDropped); n != 1 || len(b.poll()) != 0 || b.qp.State() != verbs.RTS {
			t.Errorf("ud_dropped %d, %d completions, b %s; want 1, none, RTS", n, len(b.wcs), b.qp.State())
		}
		postRecv(t, b, &verbs.RecvWR{ID: 3, SGL: sgl(b.sge(0, 100))})
		post(t, a, udSend(a, b, 10))
		if wc := s.waitWC(b, 1, time.Second)[0]; wc.ID != 3 || wc.Status != verbs.Success {
			t.Errorf("the next datagram completed %v, want WR 3 successfully", &wc)
		}
	})
	t.Run("receive-buffer-too-small", func(t *testing.T) {
		// The receive WR must hold the GRH and the payload; otherwise it
		// completes with LOC_LEN_ERR and nothing is written past it.
		s, a, b := udPair(t, "10.0.0.1", "10.0.0.2")
		fill(a.buf[:100], 6)
		postRecv(t, b, &verbs.RecvWR{ID: 4, SGL: sgl(b.sge(0, wire.GRHSize+99))})
		post(t, a, udSend(a, b, 100))
		wc := s.waitWC(b, 1, time.Second)[0]
		expectWC(t, wc, verbs.WC{ID: 4, Status: verbs.LocLenErr, Opcode: verbs.WCRecv, QPN: b.qp.Num(), Flags: verbs.WCGRH, SrcQPN: a.qp.Num(), Src: a.addr})
		if !bytes.Equal(b.buf[:256], make([]byte, 256)) {
			t.Error("a datagram too large for the receive WR was written")
		}
	})
}
