package rings

import (
	"fmt"
	"log/slog"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// QPConfig shapes the rings of a QP: its queues' sizes, where its failed
// work requests complete, and its SRQ, whose ring stands for its receive
// ring.
type QPConfig struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	SendCQ, RecvCQ                                          *CQ
	SRQ                                                     *SRQ
}

// QP is the daemon's end of the send and receive rings of a device QP
// whose queues an attached process fills. Its fields are guarded by the
// QP's lock once the QP exists.
type QP struct {
	q        hooks.QP // the device's QP, set (Bind) before the QP is published
	scq, rcq *CQ      // where failed work requests complete
	srq      *SRQ
	cnt      *Counts
	log      *slog.Logger
	// missed is called, with the QP's lock held, when PublishLocked asks
	// for a doorbell again and finds a request posted meanwhile.
	missed func()

	sqMap, rqMap *shm.Mapping
	sq, rq       shm.Ring // rq is unused with an SRQ
	// sqFetched and rqFetched count the work requests taken from the
	// rings. A ring's consumer index, published for the process, counts
	// those the QP has finished with: the ring never holds more than the
	// QP's queue.
	sqFetched, rqFetched uint32
	lim                  shm.SendLimits
	maxRecvSGE           int

	// Scratch space for decoding, reused so that the data path does not
	// allocate.
	wr     verbs.SendWR
	sgl    []verbs.SGE
	inline []byte
	bind   mr.BindRequest
	rwr    verbs.RecvWR
	rsgl   []verbs.SGE

	failed bool // a bad work request or ring index failed the QP (counted and logged once)
	broken bool // a ring index went wrong: the rings are no longer read
	closed bool // the rings are unmapped
}

// NewQP makes the rings of a QP shaped by cfg, whose failures it counts
// in cnt and logs to log. missed is called, with the QP's lock held, when
// PublishLocked asks for a doorbell on a ring again and finds a request
// posted while it had asked for none: the daemon must take it.
func NewQP(cfg QPConfig, cnt *Counts, log *slog.Logger, missed func()) (*QP, error) {
	r := &QP{scq: cfg.SendCQ, rcq: cfg.RecvCQ, srq: cfg.SRQ, cnt: cnt, log: log, missed: missed,
		lim: shm.SendLimits{MaxSGE: cfg.MaxSendSGE, MaxInline: cfg.MaxInline}, maxRecvSGE: cfg.MaxRecvSGE}
	var err error
	if r.sqMap, r.sq, err = newRing("softnic-sq", cfg.MaxSendWR, shm.SendSlotSize(cfg.MaxSendSGE, cfg.MaxInline)); err != nil {
		return nil, err
	}
	r.sq.Doorbell().Store(1) // an idle QP
	if r.srq == nil {
		if r.rqMap, r.rq, err = newRing("softnic-rq", cfg.MaxRecvWR, shm.RecvSlotSize(cfg.MaxRecvSGE)); err != nil {
			r.sqMap.Close()
			return nil, err
		}
	}
	r.sgl = make([]verbs.SGE, 0, cfg.MaxSendSGE)
	r.inline = make([]byte, 0, cfg.MaxInline)
	r.rsgl = make([]verbs.SGE, 0, cfg.MaxRecvSGE)
	return r, nil
}

// Bind records the device's QP made over the rings.
func (r *QP) Bind(q hooks.QP) { r.q = q }

// SendRing and RecvRing are the QP's rings as the process maps them (no
// receive ring with an SRQ).
func (r *QP) SendRing() shm.Ring { return r.sq }
func (r *QP) RecvRing() shm.Ring { return r.rq }

// TakeFDs returns the descriptors of the QP's rings, for the process to
// map; the caller closes them once sent.
func (r *QP) TakeFDs() []int {
	fds := []int{r.sqMap.TakeFD()}
	if r.rqMap != nil {
		fds = append(fds, r.rqMap.TakeFD())
	}
	return fds
}

// PullSendLocked takes the new send work requests of the QP's ring into
// the QP, and reports whether there were any. The device calls it each
// time it runs the QP, so that a QP with requests
// outstanding takes new ones without a doorbell (see PublishLocked).
// The QP's lock is held.
func (r *QP) PullSendLocked() bool {
	q := r.q
	if r.closed || r.broken {
		return false
	}
	prod, err := posted(r.sq, "send", r.sqFetched, q.TransportLocked().Status().SendQueued)
	if err != nil {
		r.breakLocked(err)
		return true
	}
	if prod == r.sqFetched {
		return false
	}
	for ; r.sqFetched != prod; r.sqFetched++ {
		r.cnt.SendWQEs.Add(1)
		err := shm.DecodeSend(r.sq.Slot(r.sqFetched), r.lim, &r.wr, r.sgl, r.inline, &r.bind)
		if err == nil {
			err = q.TransportLocked().PostSend(&r.wr)
		}
		if err != nil {
			r.failLocked(r.wr.ID, verbs.WCSend, err)
		}
	}
	return true
}

// posted reads the producer index of a ring the process posts to, which
// it has fetched requests from up to fetched, queued of them not finished
// yet. An index more requests ahead of the finished ones than the ring has
// slots cannot be right (ErrCorrupt): the process wrote over requests the
// daemon had not read, or garbage.
func posted(ring shm.Ring, what string, fetched uint32, queued int) (uint32, error) {
	prod := ring.Producer().Load()
	retired := fetched - uint32(queued)
	if prod-fetched > ring.Len() || prod-retired > ring.Len() {
		return 0, fmt.Errorf("%s ring producer index %d: %d requests fetched, %d finished, %d slots: %w",
			what, prod, fetched, retired, ring.Len(), shm.ErrCorrupt)
	}
	return prod, nil
}

// CountPostedLocked adds to st the work requests the process posted that
// the QP has not taken from its rings yet (it takes receives as packets
// come), so that the daemon's view of the QP (softnic qp) counts them as
// the process's own does. An index beyond the ring counts nothing: it is
// corrupt, which the next pull reports. The QP's lock is held.
func (r *QP) CountPostedLocked(st *qp.Status) {
	if r.closed || r.broken {
		return
	}
	if n := r.sq.Producer().Load() - r.sqFetched; n <= r.sq.Len() {
		st.SendQueued += int(n)
	}
	if r.srq == nil {
		if n := r.rq.Producer().Load() - r.rqFetched; n <= r.rq.Len() {
			st.RecvQueued += int(n)
		}
	}
}

// PullRecvLocked takes the new receive work requests of the QP's ring (or
// its SRQ's) into the QP, and reports whether there were any. It runs
// before the QP takes a packet, as rxe's responder reads the receive
// queue, so that a receive posted before a SEND arrives is found without
// a doorbell. The QP's lock is held.
func (r *QP) PullRecvLocked() bool {
	if r.closed || r.broken {
		return false
	}
	if r.srq != nil {
		worked, err := r.srq.pull()
		if err != nil {
			r.breakLocked(err)
		}
		return worked
	}
	q := r.q
	prod, err := posted(r.rq, "receive", r.rqFetched, q.TransportLocked().Status().RecvQueued)
	if err != nil {
		r.breakLocked(err)
		return true
	}
	if prod == r.rqFetched {
		return false
	}
	for ; r.rqFetched != prod; r.rqFetched++ {
		r.cnt.RecvWQEs.Add(1)
		err := shm.DecodeRecv(r.rq.Slot(r.rqFetched), r.maxRecvSGE, &r.rwr, r.rsgl)
		if err == nil {
			err = q.TransportLocked().PostRecv(&r.rwr)
		}
		if err != nil {
			r.failLocked(r.rwr.ID, verbs.WCRecv, err)
		}
	}
	return true
}

// PublishLocked tells the process how many slots of each ring the QP is
// done with, and whether posting needs a doorbell; the device calls it
// whenever the QP has run. The QP's lock is held.
//
// While the QP has send requests outstanding, the device comes back to it
// (a response, an ACK, a timer) and takes new requests then: the process
// need not ring. Receive requests are taken as packets arrive; only a QP
// in the error state, which completes them at once, needs a doorbell for
// them.
func (r *QP) PublishLocked() {
	if r.closed || r.broken {
		return
	}
	st := r.q.TransportLocked().Status()
	r.sq.Consumer().Store(r.sqFetched - uint32(st.SendQueued))
	r.askDoorbell(r.sq, st.SendQueued == 0, r.sqFetched)
	if r.srq != nil {
		r.srq.publish()
	} else {
		r.rq.Consumer().Store(r.rqFetched - uint32(st.RecvQueued))
		r.askDoorbell(r.rq, st.State == verbs.Err, r.rqFetched)
	}
}

// askDoorbell sets whether posting to ring needs a doorbell. Asking for
// one again, it looks at the ring once more: a request posted while the
// flag was clear (a process that polled the completion of the QP's last
// send and posted again before this) is the daemon's to take (missed).
func (r *QP) askDoorbell(ring shm.Ring, need bool, fetched uint32) {
	flag := ring.Doorbell()
	switch {
	case !need:
		flag.Store(0)
	case flag.Load() == 0:
		flag.Store(1)
		if ring.Producer().Load() != fetched {
			r.missed()
		}
	}
}

// retire publishes, before wc reaches the process, that the work request
// wc completes no longer holds a slot of the QP's ring: a process that
// polls a completion and posts again at once must find the room the
// embedded QP would give it. The QP pushes a send completion just before
// it retires the WQE (qp's completeInOrder), so the WQE still counts as
// queued here; a receive WQE left the queue when its message began.
func (r *QP) retire(wc *verbs.WC) {
	if r.closed || r.broken {
		return
	}
	st := r.q.TransportLocked().Status()
	switch wc.Opcode {
	case verbs.WCRecv, verbs.WCRecvWriteImm:
		if r.srq != nil {
			r.srq.publish()
		} else {
			r.rq.Consumer().Store(r.rqFetched - uint32(st.RecvQueued))
		}
	default:
		r.sq.Consumer().Store(r.sqFetched - uint32(st.SendQueued) + 1)
	}
}

// failLocked fails the QP for a work request it cannot carry out (id,
// found corrupt or refused by the QP): the QP moves to the error state,
// which flushes the work requests before it, then the request completes
// with LOC_QP_OP_ERR, and those after it are flushed as they come. Only
// the first refusal is logged: a process that keeps filling its ring with
// garbage must not flood the daemon's log. The QP's lock is held.
func (r *QP) failLocked(id uint64, op verbs.WCOpcode, why error) {
	q := r.q
	if r.firstFailure() {
		r.log.Warn("attached QP failed: bad work request", slog.String("qpn", fmt.Sprintf("%#x", q.Num())),
			slog.Uint64("wr_id", id), slog.Any("error", why))
	}
	q.TransportLocked().Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	cq := r.scq
	if op == verbs.WCRecv {
		cq = r.rcq
	}
	cq.push(&verbs.WC{ID: id, Status: verbs.LocQPOpErr, Opcode: op, QPN: q.Num()})
}

// breakLocked fails the QP for a ring whose index cannot be right: its
// rings are not read any more. The QP's lock is held.
func (r *QP) breakLocked(why error) {
	if r.firstFailure() {
		r.log.Warn("attached QP failed: corrupt ring", slog.String("qpn", fmt.Sprintf("%#x", r.q.Num())), slog.Any("error", why))
	}
	r.broken = true
	r.q.TransportLocked().Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState)
	r.scq.push(&verbs.WC{Status: verbs.LocQPOpErr, Opcode: verbs.WCSend, QPN: r.q.Num()})
}

// firstFailure reports whether the QP fails for the first time, and
// counts it if so. The QP's lock is held.
func (r *QP) firstFailure() bool {
	if r.failed {
		return false
	}
	r.failed = true
	r.cnt.BadQueues.Add(1)
	return true
}

// UnmapLocked unmaps the QP's rings, which it no longer reads or writes,
// and reports whether they were mapped until now. The QP's lock is held,
// if the QP was made.
func (r *QP) UnmapLocked() bool {
	if r.closed {
		return false
	}
	r.closed = true
	for _, m := range []*shm.Mapping{r.sqMap, r.rqMap} {
		if m != nil {
			m.Close()
		}
	}
	return true
}
