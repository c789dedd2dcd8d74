package embedded

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// batch is a set of packet buffers filled by QPs and sent with one
// WriteBatch: udp.MaxWriteMessages of them, so that a burst of 64 KiB
// operations goes in one system call (with 64, the burst that an ACK of 64
// PSNs lets go, four 64 KiB WRITEs, left in two: 63 packets, then the
// last one alone). Each goroutine that sends uses its own, empty (n 0)
// when it is not sending.
type batch struct {
	bufs [][]byte
	msgs []udp.Message
	// owners[i] is the QP that staged msgs[i], locked until it leaves.
	owners []*QP
	n      int   // messages staged in msgs, not sent yet
	rung   []*QP // scratch: the QPs whose doorbells ringDoorbells rings
}

func newBatch() *batch {
	b := &batch{bufs: make([][]byte, udp.MaxWriteMessages), msgs: make([]udp.Message, udp.MaxWriteMessages),
		owners: make([]*QP, udp.MaxWriteMessages)}
	mem := make([]byte, udp.MaxWriteMessages*qp.MaxPacketSize)
	for i := range b.bufs {
		b.bufs[i] = mem[i*qp.MaxPacketSize : (i+1)*qp.MaxPacketSize : (i+1)*qp.MaxPacketSize]
	}
	return b
}

// flushLocked sends everything q wants to send now, in batches, then
// (re)schedules q's timer. q.mu is held: a QP's packets leave in the order
// it built them, whichever goroutine drains it.
func (q *QP) flushLocked(b *batch, now qp.Time) {
	q.stageLocked(b, now)
	q.dev.sendBatch(b)
	q.finishLocked()
}

// drainAll sends what each of qps has to send now (the QPs that took
// packets, whose answers are due, or with rung the QPs whose doorbells
// rang), all their packets together, in as few system calls as b holds:
// the ACKs, READ responses and requests that one read of the socket lets
// go, or the WRITEs a program posted to several QPs between two polls,
// leave in one sendmmsg however many QPs they are for, and reach the peer
// in one read of its socket, whose answers come back the same way. Each
// QP stays locked from its first packet staged until the send that holds
// its last one, so that no packet of its that another goroutine builds
// meanwhile (a post, a timer) can overtake them; a QP that another
// goroutine holds is waited for only once what the others staged has
// left. No QP lock is held.
func (d *Device) drainAll(b *batch, qps []*QP, now qp.Time, rung bool) {
	first := 0 // qps[first:i] are locked
	for i, q := range qps {
		if !q.mu.TryLock() {
			d.release(b, qps[first:i])
			first = i
			q.mu.Lock()
		}
		if rung {
			q.rung = false
		}
		if !q.destroyed {
			q.stageLocked(b, now)
		}
	}
	d.release(b, qps[first:])
}

// release sends what b holds, all of it staged by qps, whose locks are
// held, and unlocks them; then it finishes each (finishLocked) holding its
// lock alone, since a QP's error hook may lock another QP (the connection
// manager's sends on QP1).
func (d *Device) release(b *batch, qps []*QP) {
	d.sendBatch(b)
	for _, q := range qps {
		q.mu.Unlock()
	}
	for _, q := range qps {
		q.mu.Lock()
		if !q.destroyed {
			q.finishLocked()
		}
		q.mu.Unlock()
	}
}

// stageLocked puts into b what q has to send now, sending b whenever it
// fills up. q.mu is held, and stays held until b has been sent
// (sendBatch): q's packets leave in order only while no other goroutine
// can send its next ones.
func (q *QP) stageLocked(b *batch, now qp.Time) {
	d := q.dev
	if q.queues != nil {
		q.queues.PullSendLocked()
	}
	for {
		if b.n >= len(b.msgs)-1 { // room for a duplicate
			d.sendBatch(b)
		}
		l, dst := q.qp.Transmit(b.bufs[b.n], now)
		if l == 0 {
			return
		}
		pkt := b.bufs[b.n][:l]
		env := wire.Envelope{Src: d.sourceFor(dst.Dst), Dst: dst.Dst}
		if d.classes {
			env.TrafficClass = dst.TrafficClass
		}
		env.Seal(pkt)
		if d.sendsToPeer(q, pkt, &env) {
			b.n = d.stage(b, q, pkt, &env)
		}
	}
}

// finishLocked (re)schedules q's timer and reports what its sending did
// to it. q.mu is held.
func (q *QP) finishLocked() {
	q.dev.schedule(q)
	q.reportErrorLocked()
	q.noteErrorLocked()
	if q.queues != nil {
		q.queues.PublishLocked()
	}
}

// sendBatch sends what b holds. A datagram larger than its route carries
// (EMSGSIZE) lowers the path MTU toward its destination for the QP that
// staged it, whose lock is held, and ends that QP; those after it in b are
// not sent (each QP's retry sends them again).
func (d *Device) sendBatch(b *batch) {
	if b.n == 0 {
		return
	}
	if sent, err := d.send(b.msgs[:b.n]); isMsgSize(err) {
		d.pathTooBig(b.owners[sent], b.msgs[sent].Addr)
	}
	clear(b.owners[:b.n])
	b.n = 0
}

// stage puts a sealed packet of q's into b, through the fault injector and
// the trace, and returns the next free index.
func (d *Device) stage(b *batch, q *QP, pkt []byte, env *wire.Envelope) int {
	n := b.n
	note := ""
	copies := 1
	if d.faults.on.Load() || d.cfg.SendHook != nil {
		fate := d.fate(pkt)
		switch {
		case fate.Drop:
			d.devc.Inc(FaultDropped)
			d.trace(Sent, env, pkt, NoteFaultDropped)
			return n
		case fate.CorruptBit >= 0:
			pkt[fate.CorruptBit/8] ^= 1 << (fate.CorruptBit % 8)
			d.devc.Inc(FaultCorrupted)
			note = "corrupted by the fault injector"
		}
		if fate.Duplicate {
			d.devc.Inc(FaultDuplicated)
			copies = 2
			note = NoteFaultDuplicated
		}
		if fate.Delay > 0 {
			d.devc.Inc(FaultDelayed)
			d.trace(Sent, env, pkt, NoteFaultDelayed)
			for range copies {
				d.timers.Add(d.now().Add(fate.Delay), wakeup{pkt: slices.Clone(pkt), env: *env})
			}
			return n
		}
	}
	d.trace(Sent, env, pkt, note)
	for range copies {
		b.msgs[n], b.owners[n] = udp.Message{Buf: pkt, Addr: env.Dst, TrafficClass: env.TrafficClass}, q
		n++
	}
	return n
}

func (d *Device) SetFaults(in FaultInjector) { d.faults.set(in) }

// faultState is a device's fault injector and the lock its Decide runs
// under; on spares the data path that lock while there is none.
type faultState struct {
	on atomic.Bool
	mu sync.Mutex
	in FaultInjector
}

func (f *faultState) set(in FaultInjector) {
	f.mu.Lock()
	f.in = in
	f.on.Store(in != nil)
	f.mu.Unlock()
}

// decide asks the injector, if any, for pkt's fate.
func (f *faultState) decide(pkt []byte) netem.Fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.in == nil {
		return netem.Fate{CorruptBit: -1}
	}
	return f.in.Decide(pkt)
}

// fate decides what the fault injector and Config.SendHook do to pkt.
func (d *Device) fate(pkt []byte) netem.Fate {
	fate := d.faults.decide(pkt)
	if d.cfg.SendHook != nil {
		switch d.cfg.SendHook(pkt) {
		case SendDrop:
			fate.Drop = true
		case SendDuplicate:
			fate.Duplicate = true
		}
	}
	return fate
}

// send writes msgs to the socket and counts the outcome; on an error,
// msgs[sent] is the message that failed, and those after it were not sent.
func (d *Device) send(msgs []udp.Message) (sent int, err error) {
	d.devc.Inc(SendBatches)
	sent, err = d.conn.WriteBatch(msgs)
	d.qpc.Add(verbs.SentPkts, uint64(sent))
	bytes := 0
	for i := range msgs[:sent] {
		bytes += len(msgs[i].Buf)
	}
	d.qpc.Add(verbs.SentBytes, uint64(bytes))
	if err != nil {
		d.qpc.Add(verbs.SendErr, uint64(len(msgs)-sent))
		if !d.closed() {
			d.log.Debug("softnic: send", slog.Int("unsent", len(msgs)-sent), slog.Any("error", err))
		}
	}
	return sent, err
}

// sendOne sends a single packet outside any QP (delayed by the fault
// injector) in env.
func (d *Device) sendOne(pkt []byte, env *wire.Envelope) {
	d.send([]udp.Message{{Buf: pkt, Addr: env.Dst, TrafficClass: env.TrafficClass}})
}

func (d *Device) trace(dir Direction, env *wire.Envelope, pkt []byte, note string) {
	if d.cfg.Trace != nil {
		d.cfg.Trace(&TracePacket{Time: time.Now(), Dir: dir, Env: *env, Data: pkt, Note: note})
	}
}

func (d *Device) getBatch() *batch  { return d.batches.Get().(*batch) }
func (d *Device) putBatch(b *batch) { d.batches.Put(b) }
