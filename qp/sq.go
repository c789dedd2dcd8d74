package qp

import (
	"fmt"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// wqeState tracks a send WQE from posting to completion.
type wqeState uint8

const (
	wqePosted  wqeState = iota // not started: no PSN yet
	wqePending                 // started: PSNs assigned, waiting for its response
	wqeDone                    // finished without needing a response (UC, UD, local ops)
	wqeError                   // failed locally; completes with status and moves the QP to ERR
	wqeFlushed                 // completes with WR_FLUSH_ERR
)

// sendWQE is a posted send WR with everything the requester and completer
// keep about it. Slots are reused; their backing arrays are allocated once.
type sendWQE struct {
	wr       verbs.SendWR
	sglBuf   []verbs.SGE
	inline   []byte
	spans    []mr.Span // the SGL resolved against the region table, once started
	length   uint32    // bytes of the message
	state    wqeState
	firstPSN wire.PSN
	lastPSN  wire.PSN
	npkts    uint32
	status   verbs.WCStatus
	// bind is a BIND_MW's description, copied at post time like the
	// rest of the WR.
	bind mr.BindRequest
}

// sendQueue is the ring of send WQEs. Indexes only grow: head is the oldest
// WQE not completed, next the WQE the requester sends (or resends) next,
// tail one past the newest posted.
type sendQueue struct {
	slots            []sendWQE
	head, next, tail uint32
}

func newSendQueue(depth, maxSGE, maxInline int) sendQueue {
	q := sendQueue{slots: make([]sendWQE, depth)}
	sgl := make([]verbs.SGE, depth*maxSGE)
	spans := make([]mr.Span, depth*maxSGE)
	for i := range q.slots {
		s := &q.slots[i]
		s.sglBuf = sgl[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		s.spans = spans[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		s.inline = make([]byte, 0, maxInline)
	}
	return q
}

func (q *sendQueue) at(i uint32) *sendWQE { return &q.slots[i%uint32(len(q.slots))] }

func (q *sendQueue) reset() { q.head, q.next, q.tail = 0, 0, 0 }

func (q *sendQueue) post(wr *verbs.SendWR) (*sendWQE, error) {
	if int(q.tail-q.head) == len(q.slots) {
		return nil, fmt.Errorf("send queue full (%d WRs): %w", len(q.slots), ErrNoMem)
	}
	w := q.at(q.tail)
	sgl, inline, spans := w.sglBuf, w.inline, w.spans
	*w = sendWQE{wr: *wr, sglBuf: sgl, inline: inline[:0], spans: spans[:0]}
	if wr.Bind != nil {
		w.bind = *wr.Bind
		w.wr.Bind = &w.bind
	}
	if wr.Flags&verbs.Inline != 0 {
		w.inline = append(w.inline, wr.Inline...)
		w.wr.Inline = w.inline
		w.wr.SGL = nil
		w.length = uint32(len(w.inline))
	} else {
		w.wr.SGL = append(sgl[:0], wr.SGL...)
		w.wr.Inline = nil
		for i := range wr.SGL {
			w.length += wr.SGL[i].Length
		}
	}
	q.tail++
	return w, nil
}

// releaseAll drops the references of every WQE's resolved memory.
func (q *sendQueue) releaseAll() {
	for i := q.head; i != q.tail; i++ {
		q.at(i).release()
	}
}

func (w *sendWQE) release() {
	for i := range w.spans {
		w.spans[i].Release()
	}
	w.spans = w.spans[:0]
}

// resolve checks the WQE's SGL against the region table; READ and ATOMIC
// results are written into it, so those need local write access.
func (w *sendWQE) resolve(t *mr.Table, pd mr.PDHandle) error {
	if len(w.spans) != 0 || w.wr.Flags&verbs.Inline != 0 {
		return nil
	}
	need := mr.Access(0)
	if w.wr.Opcode.IsReadOrAtomic() {
		need = mr.LocalWrite
	}
	for i := range w.wr.SGL {
		sge := &w.wr.SGL[i]
		s, err := t.Local(sge.LKey, sge.Addr, uint64(sge.Length), need, pd)
		if err != nil {
			w.release()
			return err
		}
		w.spans = append(w.spans, s)
	}
	return nil
}

// gather copies the message bytes at offset off into dst.
func (w *sendWQE) gather(dst []byte, off uint64) {
	if w.wr.Flags&verbs.Inline != 0 {
		copy(dst, w.inline[off:])
		return
	}
	copySpans(w.spans, off, dst, false)
}

// scatter copies src into the message buffer at offset off (READ responses
// and ATOMIC original values).
func (w *sendWQE) scatter(src []byte, off uint64) {
	copySpans(w.spans, off, src, true)
}

// copySpans copies between buf and the concatenation of spans starting at
// byte offset off: into the spans when toSpans, out of them otherwise.
func copySpans(spans []mr.Span, off uint64, buf []byte, toSpans bool) {
	for i := 0; i < len(spans) && len(buf) > 0; i++ {
		n := spans[i].Len()
		if off >= n {
			off -= n
			continue
		}
		chunk := min(uint64(len(buf)), n-off)
		if toSpans {
			spans[i].WriteAt(buf[:chunk], off)
		} else {
			spans[i].ReadAt(buf[:chunk], off)
		}
		buf = buf[chunk:]
		off = 0
	}
}

// startedEnd returns one past the newest WQE the requester has started:
// the WQE at sq.next counts once its first packet is out.
func (s *sendQueue) startedEnd() uint32 {
	if s.next != s.tail && s.at(s.next).state == wqePending {
		return s.next + 1
	}
	return s.next
}

// oldestPending returns the oldest WQE still waiting for its response.
func (s *sendQueue) oldestPending() *sendWQE {
	for i, end := s.head, s.startedEnd(); i != end; i++ {
		if w := s.at(i); w.state == wqePending {
			return w
		}
	}
	return nil
}

// pendingAt returns the started WQE whose PSN range holds psn.
func (s *sendQueue) pendingAt(psn wire.PSN) *sendWQE {
	for i, end := s.head, s.startedEnd(); i != end; i++ {
		w := s.at(i)
		if w.state == wqePending && !psn.Before(w.firstPSN) && !psn.After(w.lastPSN) {
			return w
		}
	}
	return nil
}
