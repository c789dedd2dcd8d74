package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestTraffic: each QP counts the packets and bytes it built and took, and
// the messages it completed; the device counters count rxe's rdma_sends
// and rdma_recvs.
func TestTraffic(t *testing.T) {
	const (
		ack  = wire.BTHSize + wire.AETHSize + wire.ICRCSize // an ACK, 20 bytes
		reth = wire.BTHSize + wire.RETHSize + wire.ICRCSize // a request's headers with a RETH
	)
	tests := []struct {
		name  string
		post  func(t *testing.T, a, b *host)
		wcs   int           // completions to wait for on a, then on b
		bwcs  int           //
		a, b  verbs.Traffic // what each QP counted
		sends uint64        // rdma_sends of a
		recvs uint64        // rdma_recvs of b
	}{{
		name: "write 64",
		post: func(t *testing.T, a, b *host) {
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		},
		wcs: 1,
		a:   verbs.Traffic{SentPkts: 1, SentBytes: reth + 64, RcvdPkts: 1, RcvdBytes: ack, SentMsgs: 1},
		b:   verbs.Traffic{SentPkts: 1, SentBytes: ack, RcvdPkts: 1, RcvdBytes: reth + 64, RcvdMsgs: 1},
	}, {
		name: "send 64",
		post: func(t *testing.T, a, b *host) {
			postRecv(t, b, &verbs.RecvWR{ID: 2, SGL: sgl(b.sge(0, 4096))})
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64))})
		},
		wcs: 1, bwcs: 1,
		a:     verbs.Traffic{SentPkts: 1, SentBytes: wire.BTHSize + 64 + wire.ICRCSize, RcvdPkts: 1, RcvdBytes: ack, SentMsgs: 1},
		b:     verbs.Traffic{SentPkts: 1, SentBytes: ack, RcvdPkts: 1, RcvdBytes: wire.BTHSize + 64 + wire.ICRCSize, RcvdMsgs: 1},
		sends: 1, recvs: 1,
	}, {
		name: "read two packets, unsignaled",
		post: func(t *testing.T, a, b *host) {
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRRead, SGL: sgl(a.sge(0, 2*testMTU)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
			post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
		},
		wcs: 1,
		// READ First and Last responses carry an AETH; the WRITE's ACK.
		a: verbs.Traffic{SentPkts: 2, SentBytes: reth + reth + 8, RcvdPkts: 3, RcvdBytes: 2*(ack+testMTU) + ack, SentMsgs: 2},
		b: verbs.Traffic{SentPkts: 3, SentBytes: 2*(ack+testMTU) + ack, RcvdPkts: 2, RcvdBytes: reth + reth + 8, RcvdMsgs: 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			tt.post(t, a, b)
			s.waitWC(a, tt.wcs, time.Second)
			s.waitWC(b, tt.bwcs, time.Second)
			s.settle(time.Second)
			if got := a.qp.Traffic(); got != tt.a {
				t.Errorf("requester counted %+v, want %+v", got, tt.a)
			}
			if got := b.qp.Traffic(); got != tt.b {
				t.Errorf("responder counted %+v, want %+v", got, tt.b)
			}
			if got := a.counter(verbs.RdmaSends); got != tt.sends {
				t.Errorf("rdma_sends %d, want %d", got, tt.sends)
			}
			if got := b.counter(verbs.RdmaRecvs); got != tt.recvs {
				t.Errorf("rdma_recvs %d, want %d", got, tt.recvs)
			}
		})
	}
}

// TestTrafficRetransmission: a lost request is counted once more when it is
// sent again, and its message once.
func TestTrafficRetransmission(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	lost := false
	s.drop = func(from *host, p *wire.Packet) bool {
		if from == a && !lost {
			lost = true
			return true
		}
		return false
	}
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	s.settle(time.Second)
	ta, tb := a.qp.Traffic(), b.qp.Traffic()
	if ta.SentPkts != 2 || ta.SentMsgs != 1 || tb.RcvdPkts != 1 || tb.RcvdMsgs != 1 {
		t.Errorf("requester %+v, responder %+v: want 2 packets sent for 1 received, 1 message each", ta, tb)
	}
}
