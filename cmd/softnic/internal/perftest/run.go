package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// perfLayout places a test's messages in its buffer as perftest does.
// Messages no larger than half the cycle buffer go to successive slots of
// it, stride bytes apart (the size rounded up to the cache line), and
// start over once it is full; larger ones all use the buffer's start. Both
// sides agree on the cycle buffer and cache line during the exchange, so
// message i lands in slot i mod slots on both.
//
// The buffer (one region) holds a local area of two cycles, where SENDs
// and WRITEs come from and READ responses and received SENDs go, then the
// target area of one cycle whose address the key record gives the peer.
// The local area holds two cycles so that two messages of the same slot
// land in different places and can be compared.
type perfLayout struct {
	size   int
	stride int
	slots  int
	unit   int // one area: a cycle or one message, rounded up to the cache line
}

func newPerfLayout(size int, p oobParams) perfLayout {
	roundUp := func(n, to int) int { return (n + to - 1) / to * to }
	l := perfLayout{size: size, stride: max(roundUp(size, p.cacheLine), p.cacheLine), slots: 1}
	if size <= p.cycleBuffer/2 {
		l.slots = p.cycleBuffer / l.stride
	}
	l.unit = roundUp(max(size, p.cycleBuffer), p.cacheLine)
	return l
}

// bufferSize is the size of the region: the local area and the target.
func (l perfLayout) bufferSize() int { return 3 * l.unit }

// target is the offset of the target area.
func (l perfLayout) target() int { return 2 * l.unit }

// slot is the offset of slot k (of the two cycles of the local area, or
// the one of the target).
func (l perfLayout) slot(k int) int { return k * l.stride }

// perfSession is one side of one test.
type perfSession struct {
	ctx  context.Context
	cfg  *Config
	oob  *oobConn
	out  io.Writer
	wake chan struct{} // write_lat: a packet arrived

	dev     *tooldev.Device
	params  oobParams
	layout  perfLayout
	pd      *nic.PD
	cq      *nic.CQ
	qp      *nic.QP
	buf     *nic.MR
	results *nic.MR // atomic_bw's client: the original value of every operation

	local, remote keyRecord
	// msn0 is the responder's MSN once connected, before the peer may
	// send anything.
	msn0 uint32
}

// run runs the test from the opening of the exchange to its close.
func (s *perfSession) run() (err error) {
	s.oob.conn.SetDeadline(time.Now().Add(oobTimeout))
	local := addrOf(s.oob.conn.LocalAddr())
	mtu, err := tooldev.MTU(local, s.cfg.MTU)
	if err != nil {
		return err
	}
	dc := tooldev.Config{Addr: netip.AddrPortFrom(local, s.cfg.Port), MTU: mtu, Pcap: s.cfg.Pcap}
	if s.cfg.Test == WriteLat {
		s.wake = make(chan struct{}, 1)
		dc.OnReceive = func() {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	if s.dev, err = tooldev.Open(dc); err != nil {
		return err
	}
	defer func() {
		// Counters once the device is closed, so that they count every
		// packet it sent; after a failure too, since they help explain it.
		err = errors.Join(err, s.dev.Close())
		if s.cfg.Counters {
			err = errors.Join(err, tooldev.PrintCounters(s.out, s.dev.Device))
		}
	}()
	code, _ := wire.MTUFromBytes(mtu)
	if s.params, err = s.oob.open(code); err != nil {
		return fmt.Errorf("perftest exchange: %w", err)
	}
	s.layout = newPerfLayout(s.cfg.Size, s.params)
	if err := s.setup(); err != nil {
		return err
	}
	if s.remote, err = s.oob.exchangeKeys(&s.local); err != nil {
		return fmt.Errorf("perftest exchange: key records: %w", err)
	}
	if err := s.connect(); err != nil {
		return err
	}
	for i := range s.cfg.Test.barriersBefore() {
		if i == s.cfg.Test.barriersBefore()-1 && s.cfg.Test == SendBW && s.cfg.server() {
			if err := s.postReceives(); err != nil {
				return err
			}
		}
		if err := s.oob.barrier(&s.local); err != nil {
			return fmt.Errorf("perftest exchange: barrier: %w", err)
		}
	}
	s.oob.conn.SetDeadline(time.Time{}) // the peer's traffic takes as long as it takes
	if err := s.printHeader(); err != nil {
		return err
	}
	return s.traffic()
}

// traffic runs the test's traffic, its closing exchange and its checks,
// and prints the result table.
func (s *perfSession) traffic() error {
	switch {
	case s.cfg.Test == WriteLat:
		r, err := s.runLatency()
		if err != nil {
			return err
		}
		// The last WRITE seen may still have its ACK queued: send it before
		// the device goes (destroying the QP drops queued responses).
		s.qp.RingDoorbell()
		return errors.Join(s.printLatency(&r), s.oob.conn.Close())
	case !s.cfg.server():
		rep, err := s.runBWClient()
		if err != nil {
			return err
		}
		if err := s.printBW(&rep); err != nil {
			return err
		}
		if s.cfg.Test.reportsResults() {
			if err := s.oob.barrier(&s.local); err != nil {
				return fmt.Errorf("perftest exchange: barrier: %w", err)
			}
			if _, err := s.oob.exchangeReports(&rep); err != nil {
				return fmt.Errorf("perftest exchange: results: %w", err)
			}
		}
		return s.closeOOB()
	case s.cfg.Test == SendBW:
		rep, err := s.serveSends()
		if err != nil {
			return err
		}
		return errors.Join(s.printBW(&rep), s.closeOOB(), s.checkReceived())
	}
	// The WRITE, READ and ATOMIC servers wait for the client to finish,
	// then print its results.
	if err := s.oob.barrier(&s.local); err != nil {
		return fmt.Errorf("perftest exchange: barrier: %w", err)
	}
	rep, err := s.oob.exchangeReports(&bwReport{})
	if err != nil {
		return fmt.Errorf("perftest exchange: results: %w", err)
	}
	return errors.Join(s.printBW(&rep), s.closeOOB(), s.checkTarget(int(min(rep.Iters, MaxIters))))
}

// closeOOB runs perftest's closing: a last barrier, then "done".
func (s *perfSession) closeOOB() error {
	if err := s.oob.barrier(&s.local); err != nil {
		return fmt.Errorf("perftest exchange: closing barrier: %w", err)
	}
	if err := s.oob.close(); err != nil {
		return fmt.Errorf("perftest exchange: done: %w", err)
	}
	return nil
}

// setup creates the PD, CQ, QP and buffer, fills the buffer and prepares
// the local key record.
func (s *perfSession) setup() error {
	cfg, l := s.cfg, s.layout
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	sendWRs, recvWRs := min(defaultTxDepth, cfg.Iters), 1
	if cfg.Test == WriteLat {
		sendWRs = 1
	}
	if cfg.Test == SendBW && cfg.server() {
		recvWRs = min(defaultRxDepth, cfg.Iters)
	}
	if s.cq, err = s.dev.CreateCQ(sendWRs + recvWRs); err != nil {
		return err
	}
	if s.qp, err = s.pd.CreateQP(nic.QPConfig{SendCQ: s.cq, MaxSendWR: sendWRs, MaxRecvWR: recvWRs, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return err
	}
	// The region grants the peer what the test needs, no more (as
	// perftest registers its buffer).
	access := mr.LocalWrite
	switch cfg.Test {
	case WriteBW, WriteLat:
		access |= mr.RemoteWrite
	case ReadBW:
		access |= mr.RemoteRead
	case AtomicBW:
		access |= mr.RemoteAtomic
	}
	if s.buf, err = s.pd.AllocMR(l.bufferSize(), access); err != nil {
		return fmt.Errorf("a buffer of %d bytes: %w", l.bufferSize(), err)
	}
	if cfg.Test == AtomicBW && !cfg.server() {
		if s.results, err = s.pd.AllocMR(AtomicSize*cfg.Iters, mr.LocalWrite); err != nil {
			return fmt.Errorf("atomic results of %d bytes: %w", AtomicSize*cfg.Iters, err)
		}
	}
	s.fill()
	s.local = keyRecord{
		OutReads: 1,
		QPN:      s.qp.Num(),
		PSN:      wire.PSN(rand.Uint32()) & wire.PSNMask, // random, as perftest draws it
		RKey:     s.buf.RKey(),
		VAddr:    s.buf.Addr() + uint64(l.target()),
		GID:      wire.GIDFromAddr(s.dev.Addr().Addr()),
	}
	if cfg.Test == ReadBW || cfg.Test == AtomicBW {
		s.local.OutReads = qp.MaxRdAtomicLimit
	}
	return nil
}

// The bytes a buffer starts with: unwritten marks where nothing has
// arrived yet, the source pattern what this side sends or serves.
const unwritten = 0xA5

// sourceByte is byte i of the source pattern: never the unwritten mark
// over a whole word, since 131 is odd and 0xA5 appears once in 256.
func sourceByte(i int) byte { return byte(i*131 + 7) }

// atomicStart is the value the server's slot k holds before atomic_bw.
func atomicStart(k int) uint64 { return uint64(k)*1_000_000 + 1 }

// fill writes the buffer's starting contents: the source pattern where
// this side's data comes from, the unwritten mark where data arrives, the
// atomic_bw server's starting values. write_lat's buffer stays zero, as
// perftest's does.
func (s *perfSession) fill() {
	if s.cfg.Test == WriteLat {
		return
	}
	b, l := s.buf.Bytes(), s.layout
	local, target := b[:l.target()], b[l.target():]
	switch {
	case s.cfg.Test == ReadBW && !s.cfg.server(), s.cfg.Test == SendBW && s.cfg.server():
		fillByte(local, unwritten)
	default:
		for i := range local {
			local[i] = sourceByte(i)
		}
	}
	switch s.cfg.Test {
	case ReadBW:
		for i := range target {
			target[i] = sourceByte(i)
		}
	case AtomicBW:
		fillByte(target, unwritten)
		for k := range l.slots {
			binary.NativeEndian.PutUint64(target[l.slot(k):], atomicStart(k))
		}
	default:
		fillByte(target, unwritten)
	}
}

func fillByte(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// connect moves the QP to RTS, connected to the peer of the key record,
// with perftest's attributes: the timeout of -u (14 by default), seven
// retries, the peer's outstanding reads as this side's limit and this
// side's as the peer's.
func (s *perfSession) connect() error {
	dst, err := peerAddr(s.remote.GID, s.cfg.Port)
	if err != nil {
		return err
	}
	mtu := s.params.mtu.Bytes()
	err = s.qp.Connect(dst, s.remote.QPN, nic.ConnectOptions{
		LocalPSN: s.local.PSN, RemotePSN: s.remote.PSN, MTU: mtu,
		Access:       mr.RemoteRead | mr.RemoteWrite | mr.RemoteAtomic,
		Timeout:      s.cfg.Timeout,
		TrafficClass: s.cfg.TrafficClass,
		RetryCnt:     7,
		RNRRetry:     7,
		MinRNRTimer:  12,
		MaxRdAtomic:  uint8(min(max(int(s.remote.OutReads), 1), qp.MaxRdAtomicLimit)),
		// OutReads is at most MaxRdAtomicLimit, which fits.
		MaxDestRdAtomic: uint8(s.local.OutReads),
	})
	if err != nil {
		return fmt.Errorf("connecting QP %#x to %v QP %#x: %w", s.qp.Num(), dst, s.remote.QPN, err)
	}
	s.msn0 = s.qp.Status().MSN
	return nil
}

// remoteSlot is the peer's address of message i.
func (s *perfSession) remoteSlot(i int) uint64 {
	return s.remote.VAddr + uint64(s.layout.slot(i%s.layout.slots))
}

// bwWR fills wr with message i of a bandwidth test's client, asking for
// a completion if signaled.
func (s *perfSession) bwWR(wr *verbs.SendWR, sge *[1]verbs.SGE, i int, signaled bool) {
	l := s.layout
	*wr = verbs.SendWR{ID: uint64(i), SGL: sge[:]}
	if signaled {
		wr.Flags = verbs.Signaled
	}
	switch s.cfg.Test {
	case WriteBW:
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRWrite, s.remoteSlot(i), s.remote.RKey
		sge[0] = s.buf.SGE(l.slot(i%l.slots), l.size)
	case SendBW:
		wr.Opcode = verbs.WRSend
		sge[0] = s.buf.SGE(l.slot(i%l.slots), l.size)
	case ReadBW:
		// Two cycles of destinations: message i and i+slots read the same
		// remote slot into different places (checkReads compares them).
		wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.WRRead, s.remoteSlot(i), s.remote.RKey
		sge[0] = s.buf.SGE(l.slot(i%(2*l.slots)), l.size)
	case AtomicBW:
		wr.RemoteAddr, wr.RKey = s.remoteSlot(i), s.remote.RKey
		sge[0] = s.results.SGE(i*AtomicSize, AtomicSize)
		// perftest's operands: add 1; compare 0, swap 0.
		wr.Opcode, wr.CompareAdd = verbs.WRFetchAdd, 1
		if s.cfg.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRCompareSwap, 0, 0
		}
	}
}

// runBWClient posts the test's messages, at most the TX depth outstanding,
// asking for every cqModeration-th completion and the last, and returns
// the figures.
func (s *perfSession) runBWClient() (bwReport, error) {
	n := s.cfg.Iters
	depth := min(defaultTxDepth, n)
	cqModeration := s.cfg.cqModeration(depth)
	posted := make([]time.Duration, n)
	completed := make([]time.Duration, n) // of the signaled messages
	var (
		wr   verbs.SendWR
		sge  [1]verbs.SGE
		wcs  [16]verbs.WC
		sent int
		done int
	)
	start := time.Now()
	for done < n {
		queued := 0
		for sent < n && sent-done < depth {
			s.bwWR(&wr, &sge, sent, (sent+1)%cqModeration == 0 || sent == n-1)
			posted[sent] = time.Since(start)
			if err := s.qp.PostSendDeferred(&wr); err != nil {
				return bwReport{}, fmt.Errorf("posting message %d: %w", sent, err)
			}
			sent++
			queued++
		}
		if queued > 0 {
			s.qp.RingDoorbell()
		}
		k, err := s.waitCQ(wcs[:])
		if err != nil {
			return bwReport{}, fmt.Errorf("waiting for completions (%d of %d done): %w", done, n, err)
		}
		now := time.Since(start)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.Success {
				return bwReport{}, fmt.Errorf("message %d of %d completed with %v (%s)", wc.ID, n, wc.Status, wc.Status.Text())
			}
			completed[wc.ID] = now
			done = int(wc.ID) + 1
		}
	}
	if err := s.checkClient(); err != nil {
		return bwReport{}, err
	}
	return bwFigures(s.cfg.Size, posted, completed, cqModeration), nil
}

// waitCQ waits for completions of the client's messages: it sleeps in
// CQ.Wait, or with cfg.Poll polls in a loop until it finds some.
func (s *perfSession) waitCQ(wcs []verbs.WC) (int, error) {
	if !s.cfg.Poll {
		return s.cq.Wait(s.ctx, wcs)
	}
	for {
		if k, err := s.cq.Poll(wcs); k > 0 || err != nil {
			return k, err
		}
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
	}
}

// postReceives posts the send_bw server's receive buffers: as many as
// perftest's RX depth, in two cycles of slots of the local area.
func (s *perfSession) postReceives() error {
	for r := range min(defaultRxDepth, s.cfg.Iters) {
		if err := s.postReceive(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *perfSession) postReceive(r int) error {
	l := s.layout
	wr := verbs.RecvWR{ID: uint64(r), SGL: []verbs.SGE{s.buf.SGE(l.slot(r%(2*l.slots)), l.size)}}
	if err := s.qp.PostRecv(&wr); err != nil {
		return fmt.Errorf("posting receive %d: %w", r, err)
	}
	return nil
}

// serveSends takes the send_bw client's messages, posting a receive for
// each one taken until all are posted, and returns the figures of the
// receiving side as perftest's server measures them: from the first
// arrival to the last, with no peak.
func (s *perfSession) serveSends() (bwReport, error) {
	n := s.cfg.Iters
	posted := min(defaultRxDepth, n)
	var (
		wcs         [16]verbs.WC
		first, last time.Time
	)
	for received := 0; received < n; {
		k, err := s.cq.Wait(s.ctx, wcs[:])
		if err != nil {
			return bwReport{}, fmt.Errorf("waiting for SENDs (%d of %d received): %w", received, n, err)
		}
		last = time.Now()
		if received == 0 {
			first = last
		}
		for _, wc := range wcs[:k] {
			switch {
			case wc.Status != verbs.Success:
				return bwReport{}, fmt.Errorf("receive %d of %d completed with %v (%s)", wc.ID, n, wc.Status, wc.Status.Text())
			case wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != s.cfg.Size:
				return bwReport{}, fmt.Errorf("%w: receive %d is a %v of %d bytes, want a RECV of %d", tooldev.ErrDataCheck, wc.ID, wc.Opcode, wc.ByteLen, s.cfg.Size)
			}
			received++
			if posted < n {
				if err := s.postReceive(posted); err != nil {
					return bwReport{}, err
				}
				posted++
			}
		}
	}
	return receiverFigures(s.cfg.Size, n, last.Sub(first)), nil
}
