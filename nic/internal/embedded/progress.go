package embedded

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/internal/timers"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// How packets get processed. The device's reader goroutine reads the socket
// and processes what it reads (checks, hands to QPs, sends their answers),
// which is all an application that sleeps in CQ.Wait needs. An application
// that polls a CQ in a loop would compete with that goroutine for a CPU:
// on two cores its loop takes one, and every packet then waits for the
// reader to be woken and scheduled on the other, beside the peer's
// threads. So a poller drives the device itself, as libfabric's manual
// progress does: when CQ.Poll finds nothing, it reads what the socket holds
// (without waiting) and processes it on the calling goroutine, run to
// completion, and finds its completion on its next call, with no
// goroutine woken on the way.
//
// The two hand over through progress.role, a lock whoever reads and
// processes holds, from the read until the batch's answers are sent; a
// poller only tries it, and polls again later if it is taken. The kernel's
// socket queue is the one place packets wait: each read takes distinct
// datagrams from its head, and one holder at a time reads and processes,
// so each packet is processed once and in arrival order, by whoever read
// it. The reader never holds the role while it sleeps: it waits for the
// socket to become readable without it, then takes it and reads without
// waiting, like a poller (udp.Conn.ReadBatchTurn).
// While an application polls, the reader stays off the socket altogether,
// so that arriving packets do not wake it, nor any thread of the process,
// for nothing: each poll stamps progress.lastPoll, and the
// reader takes the socket out of the netpoller (udp.Conn.StopWaiting) and
// parks until no poll has for pollIdle, or a poller that goes to sleep in
// CQ.Wait wakes it. A poll that is still processing its batch counts as
// one that has just come, however long ago it began (a burst of READ
// responses to build and send can take longer than pollIdle): a reader
// that took the next batch then would leave the poller spinning beside
// it, on a CPU the peer needs.
// Whatever the socket holds when the reader returns is read then: nothing
// is lost when polling stops, only read by the other party.
//
//
// A CQ waiter first polls as a poller does, for a bounded spin
// (Config.WaitSpin, package nic/internal/spin), which finds a completion
// that comes within it with no thread woken. Past the spin, an
// application that sleeps in CQ.Wait would otherwise be woken by the
// reader: the reader reads the socket, processes, writes the CQ, and the
// runtime makes the waiter runnable, waking a second thread to run it
// (and to look for work, taking a CPU from the peer on two cores), while
// the reader goes back to the socket. So a waiter waits for the socket
// itself (attend), in the netpoller, and processes what arrives on its
// own goroutine, until its CQ is written: one thread wakes per packet, and
// it runs the application. One goroutine at a time waits for the socket
// (udp.Conn.WaitBatchTurn); a waiter that finds another there sleeps on
// its CQ, and the one there, when it leaves, hands the socket back to the
// reader if it sees sleepers (attended, sleepers: each of the two checks
// the other's count after changing its own, so that one of them sees the
// other). A completion that another goroutine writes to the CQ, the CQ's
// destruction, or the end of the waiter's context interrupts its wait
// (udp.Conn.Interrupt). The reader parks while waiters come back to the
// socket within pollIdle of each other, and returns to it when none came
// for pollIdle (each waiter that leaves sets the reader's timer to that):
// an application that stops waiting delays what arrives after by that
// much at most.
//
// An attached process's CQs are rings the daemon fills: its polls cannot
// read the daemon's socket. A daemon serving processes that poll
// busy-polls instead (Config.BusyPoll, softnic serve --busy-poll), which
// keeps its reader on the socket and the processes' rings while traffic
// flows.

// pollIdle is how long after an application's last empty poll the reader
// goroutine stays parked: longer than the gaps between the polls of an
// application that polls, short beside the transport's timers (an
// application that stops polling without going to CQ.Wait delays what
// arrives meanwhile by this much).
const pollIdle = 200 * time.Microsecond

// maxPark is the longest the parked reader sleeps before it looks whether
// polls still come, which is the longest an application that stops
// polling without going to CQ.Wait delays what arrives then: far below
// the shortest ACK timeout softnic's tools use (2^12 × 4.096 µs ≈ 17 ms),
// long enough that a long poll streak costs a few hundred wakeups a
// second.
const maxPark = 16 * pollIdle

// progress is the state of the device's packet processing.
type progress struct {
	// role is held by whoever reads the socket and processes what it read:
	// the reader goroutine or a poller. The fields up to lastPoll are its
	// holder's.
	role sync.Mutex
	msgs []udp.Message
	// drained is set when a poll's read found the socket empty: the next
	// poll reads one datagram (pollBatch).
	drained bool
	in      inbound
	out     *batch
	due     []timers.Entry[wakeup] // the QP timers a poller runs (tickDue)

	// lastPoll is the device time of the last poll; 0 when no
	// application polls. driving is set while a poller holds the role
	// (drive): the poll is still under way, however long ago it began.
	lastPoll atomic.Int64
	driving  atomic.Bool
	resume   chan struct{} // wakes the parked reader

	// park is the parked reader's timer. A waiter that leaves the socket
	// sets it to pollIdle: the reader, parked without a timer while the
	// waiter waited, looks then whether another came.
	park *time.Timer

	// The CQ waiters that wait for the socket themselves (attend):
	// lastAttend is the device time one last began or ended such a wait,
	// attended counts the goroutines waiting for the socket (such waiters
	// and the reader), sleepers the waiters that sleep on their CQ
	// instead.
	lastAttend atomic.Int64
	attended   atomic.Int32
	sleepers   atomic.Int32

	readErrors quota.Sometimes // a socket that keeps failing is logged once a minute

	// readerWaits is set while the reader goroutine waits for the socket
	// in the netpoller, where nothing but a packet reaches it: a post
	// left for the next poll then interrupts that wait, so that the
	// reader parks, and sends what was posted when the polls stop
	// (doorbellLocked). Whoever clears it interrupts.
	readerWaits atomic.Bool

	// doorbells are the QPs posted to while an application polled: the
	// next poll sends what they hold (ringDoorbells).
	doorbells struct {
		mu  sync.Mutex
		qps []*QP
	}
}

// readBuffers returns a batch of messages to read a socket into, each
// buffer as large as a packet, or as a coalesced run of them with GRO.
func readBuffers(gro bool) []udp.Message {
	size := qp.MaxPacketSize + 64
	if gro {
		size = 64 << 10
	}
	msgs := make([]udp.Message, udp.MaxBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// inbound is the scratch state of one batch of received packets.
type inbound struct {
	pkt   wire.Packet
	dirty []*QP // QPs that took packets in this batch and may have answers
}

func (p *progress) init(gro bool) {
	p.msgs = readBuffers(gro)
	p.out = newBatch()
	p.due = make([]timers.Entry[wakeup], 0, 64)
	p.resume = make(chan struct{}, 1)
	p.park = time.NewTimer(time.Hour)
	p.park.Stop()
}

// polled reports whether an application polls the device at now.
func (d *Device) polled(now qp.Time) bool {
	last := d.prog.lastPoll.Load()
	return last != 0 && now.Sub(qp.Time(last)) < pollIdle
}

// doorbellLocked sends what q has to send, or, while an application polls
// the device, leaves it for that application's next poll, which sends what
// every QP was given since, all of it in one system call as far as a batch
// holds (drainAll): a program that posts a few operations between two
// polls, to one QP or several, sends them together. A program may stop polling without going to CQ.Wait (it
// dials, say): the parked reader sends what is left when no poll came for
// pollIdle, and a reader that still waits for the socket is interrupted
// to park. q.mu is held.
func (q *QP) doorbellLocked() {
	d := q.dev
	now := d.now() // one reading for both looks: a stop in between clears lastPoll
	if d.polled(now) && !q.rung {
		q.rung = true
		p := &d.prog
		p.doorbells.mu.Lock()
		p.doorbells.qps = append(p.doorbells.qps, q)
		p.doorbells.mu.Unlock()
		if p.readerWaits.CompareAndSwap(true, false) {
			d.conn.Interrupt() // does nothing on the portable socket (see the README)
		}
	}
	if !q.rung || !d.polled(now) {
		// Nobody polls, or the poller stopped before it took the QP
		// (stopPolling and the reader ring what was there when it
		// stopped): send now.
		q.flushNowLocked()
	}
}

// doorbellsHeld reports whether QPs posted to while an application polled
// wait for their doorbells to be rung.
func (d *Device) doorbellsHeld() bool {
	p := &d.prog
	p.doorbells.mu.Lock()
	defer p.doorbells.mu.Unlock()
	return len(p.doorbells.qps) > 0
}

// ringDoorbells sends what the QPs posted to while an application polled
// hold, through b, the packets of all of them together (drainAll): a
// program that posts to several QPs between two polls sends them in one
// system call. No QP lock is held.
func (d *Device) ringDoorbells(b *batch) {
	p := &d.prog
	for {
		p.doorbells.mu.Lock()
		b.rung = append(b.rung[:0], p.doorbells.qps...)
		clear(p.doorbells.qps)
		p.doorbells.qps = p.doorbells.qps[:0]
		p.doorbells.mu.Unlock()
		if len(b.rung) == 0 {
			return
		}
		d.drainAll(b, b.rung, d.now(), true)
		clear(b.rung)
	}
}

// pollBatch is what a poll reads into: one message after a read that
// found the socket empty, else every one. A recvmmsg that returned a
// datagram looks for the next before it returns, and on a socket that
// holds one, as it does while an application waits for each round trip,
// that look cost as much as the read (a second ___sys_recvmsg, its
// headers copied in, to find nothing): a busy-polled round trip has two
// such reads, one on each side. The first read of a burst takes one
// datagram and the next the rest, one system call more per burst.
func (p *progress) pollBatch() []udp.Message {
	if p.drained {
		return p.msgs[:1]
	}
	return p.msgs
}

// drive is a poller's turn: it stamps lastPoll, which keeps the reader off
// the socket, and unless another holds the role it sends what was posted
// since the last poll, reads what the socket holds, without waiting, and
// processes it, and runs the QPs' timers that are due (tickDue). It
// reports whether it processed a packet.
func (d *Device) drive() bool {
	p := &d.prog
	now := d.now()
	p.lastPoll.Store(int64(now))
	if !p.role.TryLock() {
		return false
	}
	defer p.role.Unlock()
	p.driving.Store(true)
	defer p.driving.Store(false)
	d.ringDoorbells(p.out)
	n, err := d.conn.TryReadBatch(p.pollBatch())
	p.drained = n == 0
	processed := err == nil && n > 0
	if processed {
		d.process(p.msgs[:n])
		// The poll lasted until now: a batch whose answers took longer
		// than pollIdle to build and send does not make the reader think
		// that polling stopped.
		now = d.now()
		p.lastPoll.Store(int64(now))
	}
	if d.timers.Next() <= now {
		d.tickDue(now)
	}
	return processed
}

// Drive is a daemon's turn after it sent packets from an attached
// process's QP to a QP of this device (hooks.Device): over loopback they
// are in the socket when the send returns, and processing them on the
// sending goroutine, with the packets they make in turn (the ACK of a
// WRITE), spares each its handover to the reader through the netpoller
// (a wakeup, an epoll_pwait, an empty read). Unless another holds the
// role, it reads and processes what the socket holds, and reads again
// while what it processed sent packets (processQueued). The reader keeps
// waiting for the socket meanwhile, and comes for what Drive leaves.
func (d *Device) Drive() {
	p := &d.prog
	if !p.role.TryLock() {
		return
	}
	defer p.role.Unlock()
	d.processQueued(true)
}

// Poll is the turn of a daemon that spins for an attached process's next
// post (hooks.Device): a poller's (drive), on the caller's goroutine. It
// keeps the reader off the socket while the daemon spins, so that what
// arrives meanwhile, the answers to what the daemon sent for the process,
// is read by the spinner alone: the reader, left waiting in the
// netpoller, had a thread of the daemon woken for each, to find the
// socket already read or the role taken. A daemon that stops spinning
// calls StopPolling before it sleeps.
func (d *Device) Poll() { d.drive() }

// StopPolling hands the socket back to the reader when a daemon that
// polled the device (Poll) is about to sleep (hooks.Device).
func (d *Device) StopPolling() { d.stopPolling() }

// stopPolling tells a parked reader that the application no longer polls:
// it is about to sleep.
func (d *Device) stopPolling() {
	p := &d.prog
	if p.lastPoll.Swap(0) != 0 {
		b := d.getBatch()
		d.ringDoorbells(b)
		d.putBatch(b)
		select {
		case p.resume <- struct{}{}:
		default:
		}
	}
}

// catchUpBatches bounds what catchUp reads: a socket that never empties
// (a flood) delays the timers by this many batches at most.
const catchUpBatches = 4

// catchUp processes what the socket holds before the QPs' timers that are
// due run, taking the role, and waiting for it if another holds it (the
// holder is processing, and what it processes counts too). An ACK timeout
// is a loss only if its acknowledgement has not arrived: when the
// goroutine that processes packets was descheduled while they queued in
// the socket (a loaded machine takes a thread's CPU for tens of
// milliseconds), the timer goroutine, woken on another CPU, would
// otherwise declare a timeout that is not one, and send a whole window
// again from the smallest congestion window.
func (d *Device) catchUp() {
	p := &d.prog
	p.role.Lock()
	defer p.role.Unlock()
	d.processQueued(false)
}

// processQueued reads what the socket holds, without waiting, and
// processes it, catchUpBatches batches at most. A batch that did not fill
// p.msgs emptied the socket, unless again is set and the device sent
// packets meanwhile, which may be for itself (the ACK of a WRITE it
// processed): then it reads once more. p.role is held.
func (d *Device) processQueued(again bool) {
	p := &d.prog
	for range catchUpBatches {
		sent := d.qpc.Get(verbs.SentPkts)
		n, err := d.conn.TryReadBatch(p.msgs)
		if err != nil || n == 0 {
			return
		}
		d.process(p.msgs[:n])
		if n < len(p.msgs) && (!again || d.qpc.Get(verbs.SentPkts) == sent) {
			return
		}
	}
}

// attend is a CQ waiter's wait for the socket (see the top of the file): it
// waits in the netpoller, unless another goroutine waits there already
// (waited false), and processes the packets it reads, until it read some,
// c was written to, ctx ended or the device closed.
func (d *Device) attend(c *CQ, ctx context.Context, ready func() bool) (waited bool, err error) {
	p := &d.prog
	armed := d.conn.Rearm()
	c.attending.Add(1)
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, d.conn.Interrupt)
		defer stop()
	}
	p.attended.Add(1)
	n, waited := 0, true
	switch {
	case ready() || c.st.Users.Gone():
	case ctx.Err() != nil:
		err = ctx.Err()
	case d.closed():
		err = cm.ErrClosed
	default:
		n, waited, err = d.conn.WaitBatchTurn(p.msgs, &p.role, armed) // the role is held when n > 0
	}
	c.attending.Add(-1)
	if n > 0 {
		d.process(p.msgs[:n])
		p.role.Unlock()
	}
	p.lastAttend.Store(int64(d.now()))
	if p.attended.Add(-1) == 0 {
		if p.sleepers.Load() > 0 {
			d.resumeReader()
		} else {
			p.park.Reset(pollIdle)
		}
	}
	if err != nil && !errors.Is(err, cm.ErrClosed) && ctx.Err() == nil {
		if errors.Is(err, net.ErrClosed) || d.closed() {
			return true, cm.ErrClosed
		}
		p.readErrors.Log(d.log, "softnic: read", slog.Any("error", err))
		err = nil
	}
	return waited, err
}

func (d *Device) resumeReader() {
	select {
	case d.prog.resume <- struct{}{}:
	default:
	}
}

// readLoop is the reader goroutine.
func (d *Device) readLoop() {
	defer d.wg.Done()
	p := &d.prog
	defer p.park.Stop()
	var busy busyPoll
	for {
		if !d.parkWhileYielded() {
			return
		}
		var n int
		var err error
		if d.cfg.BusyPoll > 0 {
			p.role.Lock()
			if n, err = d.conn.TryReadBatch(p.msgs); n == 0 {
				p.role.Unlock()
			}
		}
		if n == 0 && err == nil && !d.spin(&busy) {
			p.readerWaits.Store(true)
			if d.doorbellsHeld() {
				// Posted for a poll since parkWhileYielded looked: park
				// (doorbellLocked interrupts a wait that began before).
				p.readerWaits.Store(false)
				continue
			}
			p.attended.Add(1)
			n, err = d.conn.ReadBatchTurn(p.msgs, &p.role) // the role is held when n > 0
			p.attended.Add(-1)
			p.readerWaits.Store(false)
		}
		if n > 0 {
			d.process(p.msgs[:n])
			p.role.Unlock()
			busy.idleSince = time.Time{}
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || d.closed() {
				return
			}
			p.readErrors.Log(d.log, "softnic: read", slog.Any("error", err))
		}
	}
}

// parkWhileYielded keeps the reader off the socket while an application
// polls, and while CQ waiters wait for it themselves or came within
// pollIdle and leave no sleeper without one. It reports false when the
// device closes.
func (d *Device) parkWhileYielded() bool {
	p := &d.prog
	for parked := 0; ; parked++ {
		now := d.now()
		idle := time.Duration(0) // until the reader looks again
		if last := p.lastPoll.Load(); last != 0 {
			idle = qp.Time(last).Add(pollIdle).Sub(now) // until no poll has come for pollIdle
			if idle <= 0 && p.driving.Load() {
				idle = pollIdle // a poll under way: look again when it may have ended
			}
			if idle <= 0 && p.lastPoll.CompareAndSwap(last, 0) {
				b := d.getBatch() // the reader's own batch is the role holder's
				d.ringDoorbells(b)
				d.putBatch(b)
			}
		}
		polled := idle > 0
		switch {
		case polled:
			if parked > 0 {
				// Polled for a while: a streak, not polls between waits.
				// Registering the socket again costs system calls and
				// allocations, so it is not done for every poll.
				d.conn.StopWaiting()
			}
			// While polls keep coming, each look is a wakeup for
			// nothing: the reader looks less often, up to maxPark.
			p.park.Reset(max(idle, min(pollIdle<<min(parked, 4), maxPark)))
		case p.attended.Load() > 0:
			// A waiter waits for the socket: it resumes the reader if it
			// leaves a sleeper, and sets the timer otherwise.
			p.park.Stop()
			if p.attended.Load() == 0 {
				continue // it left meanwhile, and may have set the timer before the Stop
			}
		case p.sleepers.Load() > 0:
			return true
		default:
			if idle = qp.Time(p.lastAttend.Load()).Add(pollIdle).Sub(now); idle <= 0 {
				return true
			}
			p.park.Reset(idle)
		}
		select {
		case <-d.closing:
			return false
		case <-p.resume:
		case <-p.park.C:
		}
	}
}

// answerEvery is how many datagrams process takes before it sends the
// answers they made (ACKs, READ responses, the requests that the ACKs and
// responses let go). One read with GRO holds up to udp.MaxBatch runs of up
// to 64 KiB, which may be a peer's whole window of WRITEs (or of READ
// responses): answered only once all of it is placed, the peer's window
// stays shut while this side works, and the two sides take turns instead
// of working at once. 64 datagrams are one ACK's worth of a full window
// (qp's ackEvery), and the ACK costs one small send.
const answerEvery = 64

// process hands the datagrams of msgs (read from the device's socket or a
// group's) to their QPs and sends the QPs' answers, every answerEvery
// datagrams and at the end. p.role is held.
func (d *Device) process(msgs []udp.Message) {
	p := &d.prog
	now := d.now()
	taken := 0
	for i := range msgs {
		m := &msgs[i]
		local := m.Local
		if !local.IsValid() {
			local = d.local.Addr()
		}
		dst := netip.AddrPortFrom(local, d.local.Port())
		for dg := range udp.Segments(m) {
			d.receive(dg, m.Addr, dst, m.TrafficClass, now, &p.in)
			taken++
		}
		if taken >= answerEvery && i < len(msgs)-1 {
			d.answer(now)
			now, taken = d.now(), 0
		}
	}
	d.answer(now)
	d.ringDoorbells(p.out)
	d.cm.Poll()
}

// answer sends what the QPs that took packets since the last answer have
// to send now. p.role is held.
func (d *Device) answer(now qp.Time) {
	p := &d.prog
	for _, q := range p.in.dirty {
		q.dirty = false
	}
	d.drainAll(p.out, p.in.dirty, now, false)
	clear(p.in.dirty)
	p.in.dirty = p.in.dirty[:0]
}

// busyPoll is the state of a busy-polling reader.
type busyPoll struct {
	rings     hooks.BusyPoller // whose queues are polled, with doorbells off
	idleSince time.Time        // since when nothing came; zero while work comes
}

// spin reports whether a reader that found the socket empty polls again
// instead of sleeping: when the device busy-polls (Config.BusyPoll), it
// polls the socket and the attached processes' queues until nothing has
// come for Config.BusyPoll.
func (d *Device) spin(b *busyPoll) bool {
	if d.cfg.BusyPoll <= 0 {
		return false
	}
	if b.rings == nil {
		if h := d.poller.Load(); h != nil {
			b.rings = h.p
			b.rings.BusyPolling(true)
		}
	}
	if b.rings != nil && b.rings.PollRings() {
		b.idleSince = time.Time{}
		return true
	}
	now := time.Now()
	if b.idleSince.IsZero() {
		b.idleSince = now
		return true
	}
	if now.Sub(b.idleSince) < d.cfg.BusyPoll {
		return true
	}
	if b.rings != nil {
		b.rings.BusyPolling(false)
		b.rings = nil
	}
	b.idleSince = time.Time{}
	return false
}
