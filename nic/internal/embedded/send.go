package embedded

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

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
// last one alone). Each goroutine that sends uses its own.
type batch struct {
	bufs [][]byte
	msgs []udp.Message
	n    int // messages staged in msgs, not sent yet
}

func newBatch() *batch {
	b := &batch{bufs: make([][]byte, udp.MaxWriteMessages), msgs: make([]udp.Message, udp.MaxWriteMessages)}
	mem := make([]byte, udp.MaxWriteMessages*qp.MaxPacketSize)
	for i := range b.bufs {
		b.bufs[i] = mem[i*qp.MaxPacketSize : (i+1)*qp.MaxPacketSize : (i+1)*qp.MaxPacketSize]
	}
	return b
}

// flushLocked sends everything q wants to send now, in batches, then
// (re)schedules q's timer. q.mu is held: a QP's packets leave in the order
// it built them, whichever goroutine drains it.
func (q *QP) flushLocked(b *batch, now qp.Time) { q.drainLocked(b, now, false) }

// drainLocked is flushLocked for a batch that may hold other QPs'
// acknowledgements already; with keep, a QP that has nothing but
// acknowledgements to send leaves them in b too (b.n counts them), for the
// caller to send with those of other QPs in one system call. An
// acknowledgement (an ACK, a NAK, an ATOMIC ACKNOWLEDGE) has no payload
// and no order with the packets of other goroutines: only the goroutine
// that processes received packets makes them. Every other packet leaves
// before q.mu is released.
func (q *QP) drainLocked(b *batch, now qp.Time, keep bool) {
	d := q.dev
	if q.queues != nil {
		q.queues.PullSendLocked()
	}
	others, acks := b.n, true // others: staged by other QPs
	for {
		dry := false
		for b.n < len(b.msgs)-1 { // room for a duplicate
			l, dst := q.qp.Transmit(b.bufs[b.n], now)
			if l == 0 {
				dry = true
				break
			}
			pkt := b.bufs[b.n][:l]
			if op := wire.BTH(pkt).OpCode(); op != wire.OpRCAck && op != wire.OpRCAtomicAck {
				acks = false
			}
			env := wire.Envelope{Src: d.sourceFor(dst), Dst: dst}
			env.Seal(pkt)
			if d.sendsToPeer(q, pkt, &env) {
				b.n = d.stage(b, b.n, pkt, &env)
			}
		}
		if dry && keep && acks {
			break
		}
		if b.n > 0 {
			if sent, err := d.send(b.msgs[:b.n]); isMsgSize(err) && sent >= others {
				d.pathTooBig(q, b.msgs[sent].Addr)
			}
			b.n, others = 0, 0
		}
		if dry {
			break
		}
	}
	d.schedule(q)
	q.reportErrorLocked()
	q.noteErrorLocked()
	if q.queues != nil {
		q.queues.PublishLocked()
	}
}

// sendStaged sends what b holds.
func (d *Device) sendStaged(b *batch) {
	if b.n > 0 {
		d.send(b.msgs[:b.n])
		b.n = 0
	}
}

// stage puts a sealed packet into the batch at index n, through the fault
// injector and the trace, and returns the next free index.
func (d *Device) stage(b *batch, n int, pkt []byte, env *wire.Envelope) int {
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
		b.msgs[n] = udp.Message{Buf: pkt, Addr: env.Dst}
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
// injector).
func (d *Device) sendOne(pkt []byte, dst netip.AddrPort) {
	d.send([]udp.Message{{Buf: pkt, Addr: dst}})
}

func (d *Device) trace(dir Direction, env *wire.Envelope, pkt []byte, note string) {
	if d.cfg.Trace != nil {
		d.cfg.Trace(&TracePacket{Time: time.Now(), Dir: dir, Env: *env, Data: pkt, Note: note})
	}
}

func (d *Device) getBatch() *batch  { return d.batches.Get().(*batch) }
func (d *Device) putBatch(b *batch) { d.batches.Put(b) }
