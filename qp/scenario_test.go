package qp_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire"
)

// The scenarios of the transport: each posts work, loses or bends chosen
// packets, and checks completions, counters and memory. Their packet
// traces are golden transcripts in testdata/scenarios.

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

func TestScenarioRNRRetryThenSuccess(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	fill(a.buf[:100], 1)
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: sgl(a.sge(0, 100))})
	s.run(time.Second, func() bool { return b.counter(qp.SendRNRErr) >= 2 })
	postRecv(t, b, &qp.RecvWR{ID: 2, SGL: sgl(b.sge(0, 4096))})
	s.waitWC(a, 1, time.Second)
	s.waitWC(b, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCSend, ByteLen: 100, QPN: a.qp.Num()})
	expectWC(t, b.wcs[0], qp.WC{ID: 2, Status: qp.Success, Opcode: qp.WCRecv, ByteLen: 100, QPN: b.qp.Num()})
	if got := a.counter(qp.RcvdRNRErr); got != 2 {
		t.Errorf("rcvd_rnr_err = %d, want 2", got)
	}
	checkTranscript(t, s)
}

func TestScenarioRNRRetryExhausted(t *testing.T) {
	attr := defaultAttr()
	attr.RNRRetry = 2
	s, a, _ := pair(t, attr)
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRSend, SGL: sgl(a.sge(0, 10))})
	post(t, a, &qp.SendWR{ID: 2, Opcode: qp.WRSend, SGL: sgl(a.sge(0, 10))})
	s.waitWC(a, 2, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.RNRRetryExcErr, Opcode: qp.WCSend, ByteLen: 10, QPN: a.qp.Num()})
	expectWC(t, a.wcs[1], qp.WC{ID: 2, Status: qp.WRFlushErr, Opcode: qp.WCSend, ByteLen: 10, QPN: a.qp.Num()})
	if st := a.qp.Status(); st.State != qp.Err || st.Cause != qp.RNRRetryExcErr {
		t.Errorf("requester QP is %s (cause %s), want ERR (cause RNR_RETRY_EXC_ERR)", st.State, st.Cause)
	}
	if got := a.counter(qp.RetryRNRExceededErr); got != 1 {
		t.Errorf("retry_rnr_exceeded_err = %d, want 1", got)
	}
	checkTranscript(t, s)
}

func TestScenarioAckTimeoutThenSuccess(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	fill(a.buf[:64], 2)
	s.drop = dropOnce(b, opIs(wire.OpRCAck))
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCWrite, ByteLen: 64, QPN: a.qp.Num()})
	if s.now < qp.Time(4*time.Millisecond) {
		t.Errorf("completed at %v, before the 4.2 ms ACK timeout", time.Duration(s.now))
	}
	if got := b.counter(qp.DuplicateRequest); got != 1 {
		t.Errorf("duplicate_request = %d, want 1 (the resent WRITE is acknowledged, not executed)", got)
	}
	if got := a.counter(qp.CompleterRetryErr); got != 1 {
		t.Errorf("completer_retry_err = %d, want 1", got)
	}
	checkTranscript(t, s)
}

func TestScenarioRetryExhausted(t *testing.T) {
	attr := defaultAttr()
	attr.RetryCnt = 3
	s, a, b := pair(t, attr)
	s.drop = func(h *host, p *wire.Packet) bool { return h == a } // b is unreachable
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	post(t, a, &qp.SendWR{ID: 2, Opcode: qp.WRRead, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 2, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.RetryExcErr, Opcode: qp.WCWrite, ByteLen: 8, QPN: a.qp.Num()})
	expectWC(t, a.wcs[1], qp.WC{ID: 2, Status: qp.WRFlushErr, Opcode: qp.WCRead, ByteLen: 8, QPN: a.qp.Num()})
	if st := a.qp.Status(); st.State != qp.Err || st.Cause != qp.RetryExcErr {
		t.Errorf("requester QP is %s (cause %s), want ERR (cause RETRY_EXC_ERR)", st.State, st.Cause)
	}
	if got := a.counter(qp.CompleterRetryErr); got != 3 {
		t.Errorf("completer_retry_err = %d, want 3 (retry_cnt)", got)
	}
	if got := a.counter(qp.RetryExceededErr); got != 1 {
		t.Errorf("retry_exceeded_err = %d, want 1", got)
	}
	// 1 try + 3 retries, each waiting 4.2 ms.
	if want := qp.Time(4 * 4194304); s.now < want {
		t.Errorf("failed at %v, before four ACK timeouts", time.Duration(s.now))
	}
	checkTranscript(t, s)
}

func TestScenarioSequenceErrorNak(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	fill(a.buf[:3*64], 4)
	s.drop = dropOnce(a, psnIs(psnA)) // the first of three WRITEs
	for i := range 3 {
		post(t, a, &qp.SendWR{ID: uint64(i), Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: sgl(a.sge(uint64(64*i), 64)), RemoteAddr: b.va(uint64(64 * i)), RKey: b.region.RKey()})
	}
	s.waitWC(a, 3, time.Second)
	for i, wc := range a.wcs {
		expectWC(t, wc, qp.WC{ID: uint64(i), Status: qp.Success, Opcode: qp.WCWrite, ByteLen: 64, QPN: a.qp.Num()})
	}
	if !bytes.Equal(b.buf[:3*64], a.buf[:3*64]) {
		t.Error("target memory differs")
	}
	if got := b.counter(qp.OutOfSeqRequest); got != 2 {
		t.Errorf("out_of_seq_request = %d, want 2 (both WRITEs after the gap)", got)
	}
	if got := a.counter(qp.RcvdSeqErr); got != 1 {
		t.Errorf("rcvd_seq_err = %d, want 1 (one NAK per gap)", got)
	}
	if s.now >= qp.Time(time.Millisecond) {
		t.Errorf("recovery took %v: the NAK must trigger the retry, not the timer", time.Duration(s.now))
	}
	checkTranscript(t, s)
}

func TestScenarioImpliedNak(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	fill(b.buf[:32], 6)
	s.drop = dropOnce(b, opIs(wire.OpRCReadResponseOnly))
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRRead, Flags: qp.Signaled, SGL: sgl(a.sge(0, 32)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	post(t, a, &qp.SendWR{ID: 2, Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: sgl(a.sge(100, 8)), RemoteAddr: b.va(100), RKey: b.region.RKey()})
	s.waitWC(a, 2, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCRead, ByteLen: 32, QPN: a.qp.Num()})
	expectWC(t, a.wcs[1], qp.WC{ID: 2, Status: qp.Success, Opcode: qp.WCWrite, ByteLen: 8, QPN: a.qp.Num()})
	if !bytes.Equal(a.buf[:32], b.buf[:32]) {
		t.Error("read data differs")
	}
	if s.now >= qp.Time(time.Millisecond) {
		t.Errorf("recovery took %v: the ACK past the READ must trigger the retry, not the timer", time.Duration(s.now))
	}
	checkTranscript(t, s)
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
	s.run(time.Millisecond, func() bool { return a.counter(qp.GhostAck) == 2 })
	fill(a.buf[:64], 8)
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCWrite, ByteLen: 64, QPN: a.qp.Num()})
	if st := a.qp.Status(); st.SendPSN != psnA.Add(1) || st.AckedPSN != psnA.Add(1) || st.State != qp.RTS {
		t.Errorf("after ghost ACKs the requester is %+v, want PSNs %v and RTS", st, psnA.Add(1))
	}
	checkTranscript(t, s)
}

// TestScenarioRemoteErrors: each bad request gets its NAK, the requester's
// WR its status, both QPs go to ERR and the WRs behind are flushed.
func TestScenarioRemoteErrors(t *testing.T) {
	cases := []struct {
		name   string
		wr     func(a, b *host) *qp.SendWR
		access mr.Access // the responder QP's access flags
		status qp.WCStatus
		nak    wire.NakCode
	}{
		{"bad-rkey", func(a, b *host) *qp.SendWR {
			return &qp.SendWR{Opcode: qp.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey() ^ 0x100}
		}, mr.RemoteWrite, qp.RemAccessErr, wire.NakRemoteAccessError},
		{"stale-rkey", func(a, b *host) *qp.SendWR {
			return &qp.SendWR{Opcode: qp.WRRead, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey() ^ 0x01}
		}, mr.RemoteRead, qp.RemAccessErr, wire.NakRemoteAccessError},
		{"out-of-range", func(a, b *host) *qp.SendWR {
			return &qp.SendWR{Opcode: qp.WRWrite, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(regionSize - 32), RKey: b.region.RKey()}
		}, mr.RemoteWrite, qp.RemAccessErr, wire.NakRemoteAccessError},
		{"qp-without-remote-read", func(a, b *host) *qp.SendWR {
			return &qp.SendWR{Opcode: qp.WRRead, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()}
		}, mr.RemoteWrite, qp.RemInvReqErr, wire.NakInvalidRequest},
		{"misaligned-atomic", func(a, b *host) *qp.SendWR {
			return &qp.SendWR{Opcode: qp.WRFetchAdd, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(4), RKey: b.region.RKey(), CompareAdd: 1}
		}, mr.RemoteAtomic, qp.RemInvReqErr, wire.NakInvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			if err := b.qp.Modify(&qp.Attr{AccessFlags: c.access}, qp.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			var naks []wire.Syndrome
			s.drop = func(h *host, p *wire.Packet) bool {
				if h == b && p.AETH != nil && p.AETH.Syndrome().Type() == wire.AckTypeNak {
					naks = append(naks, p.AETH.Syndrome())
				}
				return false
			}
			wr := c.wr(a, b)
			wr.ID = 1
			post(t, a, wr)
			post(t, a, &qp.SendWR{ID: 2, Opcode: qp.WRWrite, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
			s.waitWC(a, 2, time.Second)
			if a.wcs[0].Status != c.status || a.wcs[1].Status != qp.WRFlushErr {
				t.Fatalf("completions %v, %v; want %v then WR_FLUSH_ERR", a.wcs[0].Status, a.wcs[1].Status, c.status)
			}
			if len(naks) != 1 || naks[0] != wire.NakSyndrome(c.nak) {
				t.Errorf("responder sent NAKs %v, want one %v", naks, wire.NakSyndrome(c.nak))
			}
			if a.qp.State() != qp.Err || b.qp.State() != qp.Err {
				t.Errorf("QP states %s and %s, want ERR and ERR", a.qp.State(), b.qp.State())
			}
			if binary.NativeEndian.Uint64(b.buf) != 0 {
				t.Error("the failed request changed the target's memory")
			}
			checkTranscript(t, s)
		})
	}
}

func TestScenarioPartialRetransmitWrite(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	n := uint32(8 * testMTU)
	fill(a.buf[:n], 10)
	s.drop = dropOnce(a, psnIs(psnA.Add(4))) // the fifth of eight packets
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.Signaled, SGL: sgl(a.sge(0, n)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCWrite, ByteLen: n, QPN: a.qp.Num()})
	if !bytes.Equal(b.buf[:n], a.buf[:n]) {
		t.Error("target memory differs")
	}
	if got := a.counter(qp.RetransmittedPkts); got != 4 {
		t.Errorf("retransmitted %d packets, want 4 (from the lost fifth, not from the first)", got)
	}
	checkTranscript(t, s)
}

func TestScenarioPartialRetransmitRead(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	n := uint32(8 * testMTU)
	fill(b.buf[:n], 12)
	s.drop = dropOnce(b, psnIs(psnA.Add(5))) // the sixth of eight responses
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRRead, Flags: qp.Signaled, SGL: sgl(a.sge(0, n)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCRead, ByteLen: n, QPN: a.qp.Num()})
	if !bytes.Equal(a.buf[:n], b.buf[:n]) {
		t.Error("read data differs")
	}
	if got := b.counter(qp.DuplicateRequest); got != 1 {
		t.Errorf("duplicate_request = %d, want 1 (the READ asked again from its sixth PSN)", got)
	}
	checkTranscript(t, s)
}

func TestScenarioDuplicateAtomicReplayed(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	binary.NativeEndian.PutUint64(b.buf[8:], 40)
	s.drop = dropOnce(b, opIs(wire.OpRCAtomicAck))
	post(t, a, &qp.SendWR{ID: 1, Opcode: qp.WRFetchAdd, Flags: qp.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(8), RKey: b.region.RKey(), CompareAdd: 2})
	s.waitWC(a, 1, time.Second)
	expectWC(t, a.wcs[0], qp.WC{ID: 1, Status: qp.Success, Opcode: qp.WCFetchAdd, ByteLen: 8, QPN: a.qp.Num()})
	if got := binary.NativeEndian.Uint64(b.buf[8:]); got != 42 {
		t.Errorf("target holds %d, want 42: the resent FETCH_ADD must not execute twice", got)
	}
	if got := binary.NativeEndian.Uint64(a.buf[:8]); got != 40 {
		t.Errorf("FETCH_ADD returned %d, want the original 40", got)
	}
	if got := b.counter(qp.DuplicateRequest); got != 1 {
		t.Errorf("duplicate_request = %d, want 1", got)
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
	if naks != 0 || responses != 3 || b.qp.State() != qp.RTS {
		t.Errorf("b sent %d NAKs and %d READ responses and is %s; want no NAK, three READ responses, RTS", naks, responses, b.qp.State())
	}
}
