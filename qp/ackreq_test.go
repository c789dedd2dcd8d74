package qp_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestAckReqUnacknowledged: the packets of the transports nobody
// acknowledges carry AckReq as rxe's do. Captured between the rxe lab's
// guests (Linux 6.1), rxe's UC packets never set it (ibv_uc_pingpong, a
// message of three packets), nor do its UD ones (udaddy, and mckey to a
// multicast group), while its GSI QP's MADs do (rping.pcap): so a UC
// message of four packets carries none, a datagram of QP 0x11 none,
// unicast or to a group, and one of QP1 asks for an ACK.
func TestAckReqUnacknowledged(t *testing.T) {
	ud := func(qpn uint32, dest string, destQPN uint32) func(*testing.T) *host {
		return func(t *testing.T) *host {
			a := newHost(t, "a", "10.0.0.1", verbs.UD, qpn, qp.Config{})
			udReady(t, a, udQKey)
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSendImm, SGL: sgl(a.sge(0, 61)),
				Dest: netip.MustParseAddrPort(dest), DestQPN: destQPN, QKey: udQKey})
			return a
		}
	}
	cases := []struct {
		name string
		send func(*testing.T) *host
		want []bool // AckReq of each packet sent
	}{
		{"UC", func(t *testing.T) *host {
			_, a, _ := pairOf(t, verbs.UC, defaultAttr())
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 3*testMTU+5))})
			return a
		}, []bool{false, false, false, false}},
		{"UD", ud(0x11, "10.0.0.2:4791", 0x22), []bool{false}},
		{"UD multicast", ud(0x11, "239.1.2.3:4791", wire.MulticastQPN), []bool{false}},
		{"GSI", ud(wire.GSIQPN, "10.0.0.2:4791", wire.GSIQPN), []bool{true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := c.send(t)
			buf := make([]byte, qp.MaxPacketSize)
			var got []bool
			for {
				size, route := a.qp.Transmit(buf, 0)
				dst := route.Dst
				if size == 0 {
					break
				}
				env := wire.Envelope{Src: a.addr, Dst: dst}
				env.Seal(buf[:size])
				var pkt wire.Packet
				if err := pkt.Decode(buf[:size]); err != nil {
					t.Fatal(err)
				}
				got = append(got, pkt.BTH.AckReq())
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("AckReq of the packets sent: %v, want %v", got, c.want)
			}
		})
	}
}
