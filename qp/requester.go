package qp

import (
	"encoding/binary"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/wire"
)

// requester is the sending half of a QP: it turns send WQEs into request
// packets, PSN by PSN, within a congestion window.
type requester struct {
	psn      wire.PSN   // PSN of the next request packet
	maxPSN   wire.PSN   // one past the newest PSN ever sent: responses beyond it are ghosts
	pkt      uint32     // next packet of the WQE at sq.next (on a resend, where it restarts)
	sinceAck int        // packets sent since the last one with AckReq
	rdAtomic int        // READ/ATOMIC WQEs started and not completed
	halted   bool       // a WQE failed locally: nothing more is sent
	cc       congestion // an RC requester's window
	rnrWait  bool       // waiting out an RNR NAK's timer
	rnrUntil Time
	rnrPSN   wire.PSN
}

// nextRequest encodes the next request packet into buf.
func (q *QP) nextRequest(buf []byte, now Time) (int, netip.AddrPort) {
	q.catchUp()
	for !q.req.halted && !q.req.rnrWait && q.sq.next != q.sq.tail {
		w := q.sq.at(q.sq.next)
		switch w.state {
		case wqeDone, wqeError, wqeFlushed:
			// Finished already: a local operation met again by go-back-N,
			// or a WQE whose response overtook the go-back-N.
			q.passOver(w)
			continue
		case wqePosted:
			if !q.startWQE(w) {
				return 0, netip.AddrPort{}
			}
			if w.state != wqePending {
				q.sq.next++
				q.completeInOrder()
				continue
			}
		}
		if q.cfg.Type == RC && !q.req.cc.maySend(q.req.psn.Sub(q.comp.psn)) {
			return 0, netip.AddrPort{}
		}
		return q.encodeRequest(w, buf, now)
	}
	return 0, netip.AddrPort{}
}

// startWQE begins a posted WQE: it checks the ordering rules, executes
// local operations, resolves the SGL and assigns PSNs. It reports false
// when the WQE has to wait.
func (q *QP) startWQE(w *sendWQE) bool {
	op := w.wr.Opcode
	switch {
	case q.attr.State == SQD:
		return false // draining: finish what was started, start nothing new
	case w.wr.Flags&Fence != 0 && q.req.rdAtomic > 0:
		return false
	case op.isLocal():
		q.executeLocal(w)
		return true
	case op.isReadOrAtomic() && q.req.rdAtomic >= int(q.attr.MaxRdAtomic):
		return false
	}
	if err := w.resolve(q.cfg.Memory, q.cfg.PD); err != nil {
		w.state, w.status = wqeError, LocProtErr
		q.req.halted = true
		return true
	}
	w.npkts = 1
	switch {
	case op.isAtomic() || op == WRAtomicWrite:
	case w.length > 0:
		w.npkts = (w.length + q.mtu - 1) / q.mtu
	}
	w.firstPSN = q.req.psn
	w.lastPSN = q.req.psn.Add(w.npkts - 1)
	w.state = wqePending
	q.req.pkt = 0
	if op.isReadOrAtomic() {
		q.req.rdAtomic++
	}
	return true
}

// executeLocal runs LOCAL_INV and BIND_MW, which need no packet: the WQE is
// done (or failed) at once and completes in order behind earlier WQEs.
func (q *QP) executeLocal(w *sendWQE) {
	var err error
	who := mr.Requester{PD: q.cfg.PD, QPN: q.num, PKey: q.attr.PKey}
	switch w.wr.Opcode {
	case WRLocalInv:
		err = q.cfg.Memory.Invalidate(w.wr.InvalidateRKey, who)
		w.status = LocQPOpErr // rxe's status for a failed local invalidate
	case WRBindMW:
		err = q.cfg.Memory.BindWindow(w.wr.Bind, who)
		w.status = MWBindErr
	}
	if err != nil {
		w.state = wqeError
		q.req.halted = true
		return
	}
	w.state, w.status = wqeDone, Success
}

// segmentOpcode picks the opcode of packet i of n of a SEND or WRITE and
// says whether it is the message's last.
func segmentOpcode(t Type, op WROpcode, i, n uint32) (wire.OpCode, bool) {
	if t == UD {
		if op == WRSendImm {
			return wire.OpUDSendOnlyImm, true
		}
		return wire.OpUDSendOnly, true
	}
	base := wire.OpRCSendFirst
	if t == UC {
		base = wire.OpUCSendFirst
	}
	// Offsets within the RC and UC opcode blocks (IBTA table 38).
	const (
		sendFirst, sendMiddle, sendLast, sendLastImm, sendOnly, sendOnlyImm       = 0, 1, 2, 3, 4, 5
		writeFirst, writeMiddle, writeLast, writeLastImm, writeOnly, writeOnlyImm = 6, 7, 8, 9, 10, 11
	)
	only, last := n == 1, i == n-1
	switch {
	case op.isWrite() && only && op == WRWriteImm:
		return base + writeOnlyImm, true
	case op.isWrite() && only:
		return base + writeOnly, true
	case op.isWrite() && i == 0:
		return base + writeFirst, false
	case op.isWrite() && last && op == WRWriteImm:
		return base + writeLastImm, true
	case op.isWrite() && last:
		return base + writeLast, true
	case op.isWrite():
		return base + writeMiddle, false
	case op == WRSendInv && only:
		return wire.OpRCSendOnlyInv, true
	case op == WRSendInv && last:
		return wire.OpRCSendLastInv, true
	case only && op == WRSendImm:
		return base + sendOnlyImm, true
	case only:
		return base + sendOnly, true
	case i == 0:
		return base + sendFirst, false
	case last && op == WRSendImm:
		return base + sendLastImm, true
	case last:
		return base + sendLast, true
	}
	return base + sendMiddle, false
}

// encodeRequest builds packet q.req.pkt of WQE w into buf and advances the
// requester.
func (q *QP) encodeRequest(w *sendWQE, buf []byte, now Time) (int, netip.AddrPort) {
	op := w.wr.Opcode
	i := q.req.pkt
	psn := w.firstPSN.Add(i)
	off := uint64(i) * uint64(q.mtu)
	f := &q.fields
	*f = wire.Fields{}
	f.BTH.PKey, f.BTH.DestQP, f.BTH.PSN = q.attr.PKey, q.attr.DestQPN, psn
	dst := q.attr.Remote
	payload := 0
	psns := uint32(1)
	last := true
	switch {
	case op == WRRead:
		// A READ request asks for the rest of the message from packet i on
		// and reserves one PSN per response packet.
		f.BTH.OpCode = wire.OpRCReadRequest
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, DMALen: w.length - uint32(off)}
		psns = w.npkts - i
	case op == WRCompareSwap:
		f.BTH.OpCode = wire.OpRCCompareSwap
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
	case op == WRFetchAdd:
		f.BTH.OpCode = wire.OpRCFetchAdd
		f.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	case op == WRAtomicWrite:
		f.BTH.OpCode = wire.OpRCAtomicWrite
		f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: 8}
		payload = 8
	default:
		payload = int(min(q.mtu, w.length-uint32(off)))
		f.BTH.OpCode, last = segmentOpcode(q.cfg.Type, op, i, w.npkts)
		if op.isWrite() && i == 0 {
			f.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
		}
		if last {
			f.ImmDT = w.wr.Imm
			f.IETH = w.wr.InvalidateRKey
			f.BTH.SE = w.wr.Flags&Solicited != 0
		}
		if q.cfg.Type == UD {
			qkey := w.wr.QKey
			if qkey&0x80000000 != 0 {
				qkey = q.attr.QKey
			}
			f.DETH = wire.DETHFields{QKey: qkey, SrcQP: q.num}
			f.BTH.DestQP = w.wr.DestQPN
			dst = w.wr.Dest
		}
	}
	switch q.cfg.Type {
	case RC:
		f.BTH.AckReq = last || q.req.sinceAck+1 >= q.req.cc.ackEvery()
	case UC:
		// Nothing acknowledges UC, but rxe sets AckReq as on RC (the last
		// packet and every 64th): the same bits on the wire.
		f.BTH.AckReq = last || q.req.sinceAck+1 >= 64
	case UD:
		// Nothing acknowledges a datagram, but rxe sets AckReq on the last
		// packet of every message, UD included (the MADs of rping.pcap).
		f.BTH.AckReq = true
	}
	hdr, err := f.EncodeHeaders(buf, payload)
	if err != nil {
		// Only a QP bug can get here; fail the WR rather than send garbage.
		q.cnt.inc(SendErr)
		w.state, w.status = wqeError, LocQPOpErr
		q.req.halted = true
		return 0, netip.AddrPort{}
	}
	if op == WRAtomicWrite {
		binary.NativeEndian.PutUint64(buf[hdr:], w.wr.Swap)
	} else if payload > 0 {
		w.gather(buf[hdr:hdr+payload], off)
	}

	if psn.Before(q.req.maxPSN) {
		q.cnt.inc(RetransmittedPkts)
	}
	q.req.psn = psn.Add(psns)
	if q.req.psn.After(q.req.maxPSN) {
		q.req.maxPSN = q.req.psn
	}
	if f.BTH.AckReq {
		q.req.sinceAck = 0
	} else {
		q.req.sinceAck++
	}
	if last {
		q.req.pkt = 0
		q.sq.next++
		if q.cfg.Type != RC {
			w.state = wqeDone // UC and UD complete once sent
			q.completeInOrder()
		}
	} else {
		q.req.pkt++
	}
	if q.cfg.Type == RC && !q.comp.armed {
		q.armTimer(now)
	}
	return f.Len(payload), dst
}
