package nic_test

import (
	"sync/atomic"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// TestStartingPSNs: the Starting PSN of a REQ is the PSN the passive side
// sends from, the one of a REP the PSN the active side sends from, as
// Linux's CM sets them (cm_req_handler takes the REQ's as the passive
// side's sq_psn; ib_send_cm_req the REQ's as the active side's rq_psn). In
// ../shared/golden/rping.pcap the client's first SEND carries the REP's
// Starting PSN and the server's first READ the REQ's; a dialer that sent
// from its own REQ's PSN was NAKed (PSN sequence error) by Linux rxe.
func TestStartingPSNs(t *testing.T) {
	var reqPSN, repPSN atomic.Uint32
	watch := func(pkt []byte) nic.SendAction {
		var p wire.Packet
		var m mad.MAD
		if p.Decode(pkt) != nil || p.BTH.DestQP() != wire.GSIQPN || m.Decode(p.Payload) != nil {
			return nic.SendPass
		}
		switch m.AttrID() {
		case mad.AttrConnectRequest:
			reqPSN.Store(uint32(m.REQ.StartingPSN()))
		case mad.AttrConnectReply:
			repPSN.Store(uint32(m.REP.StartingPSN()))
		}
		return nic.SendPass
	}
	a := openCMEnd(t, nic.Config{SendHook: watch})
	b := openCMEnd(t, nic.Config{SendHook: watch})
	l := b.listen(t, 1)
	c, s := connectCM(t, a, b, l, a.dialOptions(), nic.AcceptOptions{})
	tests := []struct {
		name          string
		conn          *nic.Conn
		send, receive uint32 // the Starting PSNs of the MADs it sends from and expects
	}{
		{"dialer", c, repPSN.Load(), reqPSN.Load()},
		{"acceptor", s, reqPSN.Load(), repPSN.Load()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.conn.QP().Status()
			if uint32(st.SendPSN) != tt.send || uint32(st.ExpectedPSN) != tt.receive {
				t.Errorf("sends from PSN %v and expects %v; want %v (REQ %#06x, REP %#06x)", st.SendPSN, st.ExpectedPSN,
					wire.PSN(tt.send), reqPSN.Load(), repPSN.Load())
			}
		})
	}
	if reqPSN.Load() == repPSN.Load() {
		t.Fatalf("REQ and REP drew the same PSN %#06x: the test cannot tell them apart", reqPSN.Load())
	}
	cmExchange(t, a, b, c, s)
}
