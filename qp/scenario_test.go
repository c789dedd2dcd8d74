package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Scenarios of the transport that forge packets by hand, which a
// transcript cannot: they check completions, counters and state, and
// TestScenarioGhostAck's packet trace is a golden transcript in
// testdata/scenarios. The other stories (loss and go-back-N, timeouts,
// RNR, replays, READ, coalesced ACKs, remote errors, the fence, UC gaps)
// are whole transcripts, commands and outputs, in testdata/transcripts
// (TestTranscripts).

// dropOnce loses the first packet from `from` that match reports true for.
func dropOnce(from *host, match func(p *wire.Packet) bool) func(*host, *wire.Packet) bool {
	done := false
	return func(h *host, p *wire.Packet) bool {
		if done || h != from || !match(p) {
			return false
		}
		done = true
		return true
	}
}

func opIs(op wire.OpCode) func(p *wire.Packet) bool {
	return func(p *wire.Packet) bool { return p.OpCode() == op }
}

func psnIs(psn wire.PSN) func(p *wire.Packet) bool {
	return func(p *wire.Packet) bool { return p.BTH.PSN() == psn }
}

func TestScenarioGhostAck(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	// An ACK for a PSN a never sent, then a NAK for one, arrive first.
	for _, syn := range []wire.Syndrome{wire.ACKSyndrome(31), wire.NakSyndrome(wire.NakRemoteAccessError)} {
		ghost := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xFFFF, DestQP: a.qp.Num(), PSN: 0x5000}, AETH: wire.AETHFields{Syndrome: syn, MSN: 3}}
		raw := make([]byte, ghost.Len(0))
		if _, err := ghost.Encode(raw, nil); err != nil {
			t.Fatal(err)
		}
		env := wire.Envelope{Src: b.addr, Dst: a.addr}
		env.Seal(raw)
		s.send(a, raw, env, 0)
	}
	s.run(time.Millisecond, func() bool { return a.counter(verbs.GhostAck) == 2 })
	fill(a.buf[:64], 8)
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 64, QPN: a.qp.Num()})
	if st := a.qp.Status(); st.SendPSN != psnA.Add(1) || st.AckedPSN != psnA.Add(1) || st.State != verbs.RTS {
		t.Errorf("after ghost ACKs the requester is %+v, want PSNs %v and RTS", st, psnA.Add(1))
	}
	checkTranscript(t, s)
}

// TestResponderReplaysDoNotTakeResources: a responder that queues a replay
// of a duplicate READ must not count it against max_dest_rd_atomic, or a
// new READ behind it is refused (found by the end-to-end test: the
// responder NAKed "invalid request" and went to ERR).
func TestResponderReplaysDoNotTakeResources(t *testing.T) {
	attr := defaultAttr()
	attr.MaxRdAtomic, attr.MaxDestRdAtomic = 1, 1
	s, a, b := pair(t, attr)
	read := func(psn wire.PSN) {
		f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCReadRequest, PKey: 0xFFFF, DestQP: b.qp.Num(), PSN: psn, AckReq: true},
			RETH: wire.RETHFields{VA: b.va(0), RKey: b.region.RKey(), DMALen: 64}}
		raw := make([]byte, f.Len(0))
		if _, err := f.Encode(raw, nil); err != nil {
			t.Fatal(err)
		}
		env := wire.Envelope{Src: a.addr, Dst: b.addr}
		env.Seal(raw)
		var p wire.Packet
		if err := p.Decode(raw); err != nil {
			t.Fatal(err)
		}
		b.qp.Receive(&p, &env, s.now)
	}
	var naks, responses int
	buf := make([]byte, qp.MaxPacketSize)
	drain := func() {
		for {
			n, _ := b.qp.Transmit(buf, s.now)
			if n == 0 {
				break
			}
			var p wire.Packet
			if err := p.Decode(buf[:n]); err != nil {
				t.Fatal(err)
			}
			switch {
			case p.OpCode() == wire.OpRCAck && p.AETH.Syndrome().Type() == wire.AckTypeNak:
				naks++
			case p.OpCode().IsReadResponse():
				responses++
			}
		}
	}
	// A READ answered, its duplicate (the answer was lost) queued for
	// replay, and the next READ behind it.
	read(psnA)
	drain()
	read(psnA)
	read(psnA.Add(1))
	drain()
	if naks != 0 || responses != 3 || b.qp.State() != verbs.RTS {
		t.Errorf("b sent %d NAKs and %d READ responses and is %s; want no NAK, three READ responses, RTS", naks, responses, b.qp.State())
	}
}
