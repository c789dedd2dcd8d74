package qp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestLossyLinkRandomOps drives thousands of random operations through a
// link that drops, duplicates, reorders and corrupts packets, and checks
// that every operation completes successfully and exactly once: the
// target's memory equals a reference model byte for byte, every READ
// returns what the model held when it was posted, and the FETCH_ADDs add
// up.
func TestLossyLinkRandomOps(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			ops := 1500
			if testing.Short() {
				ops = 300
			}
			runLossy(t, seed, ops, netem.Faults{Drop: 0.10, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01, Seed: seed})
		})
	}
}

const (
	lossySlots    = 32
	lossySlotSize = regionSize / 2 / lossySlots
	counterOff    = regionSize - 8
	recvArea      = regionSize / 2
)

type pending struct {
	wr       verbs.SendWR
	readWant []byte // READ: the bytes the model held when it was posted
	faddWant uint64 // FETCH_ADD: the value it must return
	sent     []byte // SEND: the payload b must receive
	off, n   uint64 // the remote range, as an offset in b's region
}

func runLossy(t *testing.T, seed uint64, total int, faults netem.Faults) {
	attr := defaultAttr()
	attr.Timeout = 8 // 1 ms
	s, a, b := pair(t, attr)
	s.tracing = true
	s.inj = netem.NewInjector(faults)
	rng := rand.New(rand.NewPCG(seed, 99))
	model := make([]byte, regionSize)
	counter := uint64(0)
	var inflight [lossySlots]*pending
	var recvs [][]byte // payloads b must receive, in order
	posted, completed, recvDone := 0, 0, 0

	for completed < total {
		// Post into every free slot.
		for slot := range lossySlots {
			if inflight[slot] != nil || posted == total {
				continue
			}
			p := &pending{}
			src := uint64(slot * lossySlotSize)
			n := uint32(rng.IntN(lossySlotSize + 1))
			dst := uint64(rng.IntN(recvArea - int(n) - 8))
			// A READ that is retried is executed again and returns what
			// memory holds then (IBTA 9.4.4): a WRITE posted after it must
			// not touch its range while it is outstanding, or the model
			// could not say what it returns.
			for range 100 {
				if !overlapsRead(inflight[:], dst, uint64(n)) {
					break
				}
				dst = uint64(rng.IntN(recvArea - int(n) - 8))
			}
			p.wr = verbs.SendWR{ID: uint64(slot), Flags: verbs.Signaled, RKey: b.region.RKey(), RemoteAddr: b.va(dst)}
			p.off, p.n = dst, uint64(n)
			switch rng.IntN(10) {
			case 0, 1, 2, 3:
				if overlapsRead(inflight[:], dst, uint64(n)) {
					continue
				}
				p.wr.Opcode = verbs.WRWrite
				if rng.IntN(4) == 0 {
					p.wr.Opcode = verbs.WRWriteImm
					postRecv(t, b, &verbs.RecvWR{ID: 1 << 32})
					recvs = append(recvs, nil)
				}
				rngFill(rng, a.buf[src:src+uint64(n)])
				copy(model[dst:], a.buf[src:src+uint64(n)])
				p.wr.SGL = sgl(a.sge(src, n))
			case 4, 5, 6:
				p.wr.Opcode = verbs.WRRead
				p.wr.SGL = sgl(a.sge(src, n))
				p.readWant = bytes.Clone(model[dst : dst+uint64(n)])
			case 7, 8:
				add := rng.Uint64N(1000)
				p.wr.Opcode, p.wr.CompareAdd, p.wr.RemoteAddr = verbs.WRFetchAdd, add, b.va(counterOff)
				p.wr.SGL = sgl(a.sge(src, 8))
				p.faddWant = counter
				counter += add
			default:
				p.wr.Opcode = verbs.WRSend
				n = min(n, 4096)
				rngFill(rng, a.buf[src:src+uint64(n)])
				p.sent = bytes.Clone(a.buf[src : src+uint64(n)])
				p.wr.SGL = sgl(a.sge(src, n))
				postRecv(t, b, &verbs.RecvWR{ID: 2 << 32, SGL: sgl(b.sge(recvArea+uint64(len(recvs)%64)*4096, 4096))})
				recvs = append(recvs, p.sent)
			}
			post(t, a, &p.wr)
			inflight[slot] = p
			posted++
		}
		before := len(a.wcs)
		s.run(10*time.Second, func() bool { a.poll(); return len(a.wcs) > before })
		for _, wc := range a.wcs[before:] {
			p := inflight[wc.ID]
			if wc.Status != verbs.Success {
				t.Fatalf("op %d (%s) completed with %s\n%s", completed, p.wr.Opcode, wc.Status, tail(s.trace.String(), 60))
			}
			switch p.wr.Opcode {
			case verbs.WRRead:
				src := p.wr.SGL[0]
				got := a.buf[src.Addr-a.region.Addr():][:src.Length]
				if !bytes.Equal(got, p.readWant) {
					t.Fatalf("op %d: READ returned data that differs from the model", completed)
				}
			case verbs.WRFetchAdd:
				off := p.wr.SGL[0].Addr - a.region.Addr()
				if got := binary.NativeEndian.Uint64(a.buf[off:]); got != p.faddWant {
					t.Fatalf("op %d: FETCH_ADD returned %d, want %d", completed, got, p.faddWant)
				}
			}
			inflight[wc.ID] = nil
			completed++
		}
		// Check b's receives as they come.
		for _, wc := range b.poll() {
			if wc.Status != verbs.Success {
				t.Fatalf("receive %d completed with %s; b: bad_request %d remote_access_err %d\n%s", recvDone, wc.Status, b.counter(verbs.BadRequest), b.counter(verbs.RemoteAccessErr), tail(s.trace.String(), 30))
			}
			want := recvs[recvDone]
			if want != nil {
				off := recvArea + uint64(recvDone%64)*4096
				if !bytes.Equal(b.buf[off:off+uint64(len(want))], want) || wc.ByteLen != uint32(len(want)) {
					t.Fatalf("receive %d: data differs from what was sent", recvDone)
				}
			}
			recvDone++
		}
	}
	s.settle(10 * time.Second)
	for _, wc := range b.poll() {
		if wc.Status != verbs.Success {
			t.Fatalf("receive completed with %s", wc.Status)
		}
		recvDone++
	}
	if recvDone != len(recvs) {
		t.Errorf("%d receives completed, want %d", recvDone, len(recvs))
	}
	if !bytes.Equal(b.buf[:recvArea], model[:recvArea]) {
		t.Error("target memory differs from the reference model")
	}
	if got := binary.NativeEndian.Uint64(b.buf[counterOff:]); got != counter {
		t.Errorf("counter = %d, want %d: a FETCH_ADD executed twice or never", got, counter)
	}
	t.Logf("%d ops in %v simulated; a: retries %d, retransmitted %d; b: duplicates %d, out of sequence %d; bad ICRC %d",
		total, time.Duration(s.now), a.counter(verbs.CompleterRetryErr), a.counter(verbs.RetransmittedPkts),
		b.counter(verbs.DuplicateRequest), b.counter(verbs.OutOfSeqRequest), s.badICRC)
}

func rngFill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// overlapsRead reports whether [dst, dst+n) overlaps an outstanding READ.
func overlapsRead(inflight []*pending, dst, n uint64) bool {
	for _, p := range inflight {
		if p != nil && p.wr.Opcode == verbs.WRRead && dst < p.off+p.n && p.off < dst+n {
			return true
		}
	}
	return false
}

// TestPacedReads runs 1 MiB transfers over links shaped as Linux's netem
// shapes them (path): a 5 ms path whose queue holds 1000 packets, and the
// figures of issue 14 (5% loss, 5 ms delay, 10% reorder). Every transfer
// completes with the right data. On the clean path the first READ's 1024
// responses overflow the queue; the loss it brings starts the responder's
// pacer (package readpace), and the second READ loses nothing. The durations are
// logged in simulated time.
func TestPacedReads(t *testing.T) {
	netem := func(loss, reorder float64) *path {
		return &path{Delay: 5 * time.Millisecond, Loss: loss, Reorder: reorder, Limit: 1000,
			rng: rand.New(rand.NewPCG(1, 2)), free: map[*host]qp.Time{}, queued: map[*host]int{}}
	}
	tests := []struct {
		name string
		path *path
		op   verbs.WROpcode
		n    int
		// lossFree: the transfers after the first lose nothing to the
		// queue.
		lossFree bool
	}{
		{"5 ms, queue of 1000: READ", netem(0, 0), verbs.WRRead, 2, true},
		{"5 ms, queue of 1000: WRITE", netem(0, 0), verbs.WRWrite, 2, true},
		{"5% loss, 5 ms, 10% reorder: READ", netem(0.05, 0.10), verbs.WRRead, 1, false},
		{"5% loss, 5 ms, 10% reorder: WRITE", netem(0.05, 0.10), verbs.WRWrite, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			attr := defaultAttr()
			attr.Timeout = 14 // 67 ms, as softnic's commands and rdma_cm use
			s, a, b := pair(t, attr)
			s.tracing, s.path = false, tc.path
			rng := rand.New(rand.NewPCG(3, 4))
			const size = 1 << 20
			src, dst := a.buf, b.buf
			if tc.op == verbs.WRRead {
				src, dst = b.buf, a.buf
			}
			full := 0
			for i := range tc.n {
				rngFill(rng, src[:size-8])
				start := s.now
				post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: tc.op, Flags: verbs.Signaled, SGL: sgl(a.sge(0, size-8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
				if wc := s.waitWC(a, i+1, time.Minute)[i]; wc.Status != verbs.Success {
					t.Fatalf("transfer %d: %s", i, wc.Status)
				}
				if !bytes.Equal(src[:size-8], dst[:size-8]) {
					t.Fatalf("transfer %d: the data differs", i)
				}
				took := time.Duration(s.now - start)
				t.Logf("%s %d: %v, %.2f MB/s; %d lost to the queue, %d to the link", tc.op, i, took, size/took.Seconds()/1e6, tc.path.full-full, tc.path.lost)
				if i > 0 && tc.lossFree && tc.path.full != full {
					t.Errorf("transfer %d lost %d packets to the queue, want none", i, tc.path.full-full)
				}
				full = tc.path.full
			}
		})
	}
}

// TestReadRequestsLeaveTogether: READ responses open the congestion window
// one PSN at a time, yet once the window is full the requester holds its
// READ requests until there is room for an ACK's worth of PSNs, then sends
// as many as fit at once, so that they leave in one send as a WRITE's
// packets do. Here the responses arrive one by one (a 1 Gbit/s link); a's
// window is 32 PSNs (ACKs every 16) and each READ takes 4, so the requests
// after the first window leave in groups of at least 4, not one by one.
func TestReadRequestsLeaveTogether(t *testing.T) {
	a := newHost(t, "a", "10.0.0.1", verbs.RC, 0x11, qp.Config{Window: 32})
	b := newHost(t, "b", "10.0.0.2", verbs.RC, 0x22, qp.Config{})
	connect(t, a, b, defaultAttr())
	s := newSim(t, a, b)
	s.tracing = false
	s.path = &path{Delay: 10 * time.Microsecond, Limit: 1 << 20, Rate: 125e6,
		rng: rand.New(rand.NewPCG(1, 2)), free: map[*host]qp.Time{}, queued: map[*host]int{}}
	var groups []int // READ requests a sent at one time, in order
	var last qp.Time
	s.drop = func(from *host, p *wire.Packet) bool {
		if from == a && p.OpCode() == wire.OpRCReadRequest {
			if len(groups) == 0 || s.now != last {
				groups = append(groups, 0)
			}
			groups[len(groups)-1]++
			last = s.now
		}
		return false
	}
	const reads, size = 64, 4 * testMTU
	for i := range reads {
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRead, Flags: verbs.Signaled,
			SGL: sgl(a.sge(uint64(i)*size, size)), RemoteAddr: b.va(uint64(i) * size), RKey: b.region.RKey()})
	}
	for i, wc := range s.waitWC(a, reads, time.Second) {
		if wc.Status != verbs.Success || wc.ID != uint64(i) {
			t.Fatalf("completion %d: wr_id %d %s", i, wc.ID, wc.Status)
		}
	}
	if got := a.counter(verbs.RetransmittedPkts); got != 0 {
		t.Fatalf("%d requests sent again on a lossless link", got)
	}
	t.Logf("READ requests sent together: %v", groups)
	if len(groups) < 2 {
		t.Fatalf("READ requests in %d group(s), want the window to fill up and open again", len(groups))
	}
	for i, n := range groups[:len(groups)-1] {
		if n < 4 {
			t.Fatalf("group %d of %v: %d READ requests left together, want at least 4", i, groups, n)
		}
	}
}

// TestFastPathAllocs: moving a 64 KiB WRITE or READ from post to completion
// allocates nothing, READ responses paced (after a lost response) or not.
func TestFastPathAllocs(t *testing.T) {
	for _, op := range []verbs.WROpcode{verbs.WRWrite, verbs.WRRead} {
		t.Run(op.String(), func(t *testing.T) {
			_, a, b := pair(t, defaultAttr())
			m := newMover(t)
			now := qp.Time(0)
			dropOne := op == verbs.WRRead // lose one READ response, once: the pacer starts
			drop := func(_ int, p *wire.Packet) bool {
				if dropOne && p.OpCode() == wire.OpRCReadResponseMiddle {
					dropOne = false
					return true
				}
				return false
			}
			move := func(from, to *host) { m.move(from, to, now, drop) }
			wr := verbs.SendWR{Opcode: op, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64<<10)), RemoteAddr: b.va(0), RKey: b.region.RKey()}
			var wc [1]verbs.WC
			steps := 0 // of the last transfer
			transfer := func() {
				if err := a.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				for steps = 1; ; steps++ {
					move(a, b)
					move(b, a)
					if n, _ := a.cq.Poll(wc[:]); n == 1 {
						break
					}
					now = now.Add(10 * time.Microsecond)
					a.qp.Tick(now)
					b.qp.Tick(now)
				}
				if wc[0].Status != verbs.Success {
					t.Fatalf("%s completed with %s", op, wc[0].Status)
				}
			}
			transfer()
			if op == verbs.WRRead && b.counter(verbs.DuplicateRequest) == 0 {
				t.Fatal("the lost READ response was not asked for again")
			}
			// 64 READ responses, 17 a paced round.
			if transfer(); op == verbs.WRRead && steps < 4 {
				t.Errorf("a READ took %d steps, want at least 4: its responses were not paced", steps)
			}
			if n := testing.AllocsPerRun(20, transfer); n != 0 {
				t.Errorf("%v allocations a transfer", n)
			}
		})
	}
}

// TestReadRetryOfQueuedResponses: once a lost READ response has started
// the responder's pacer, a go-back-N of the requester (here after a
// timeout) asks again for READs whose responses the responder still holds
// queued, none of them sent: those requests are no sign of loss, and the
// pacer's window, grown by the new READs since, is not cut. Every READ
// completes with the right data.
func TestReadRetryOfQueuedResponses(t *testing.T) {
	_, a, b := pair(t, defaultAttr())
	rngFill(rand.New(rand.NewPCG(5, 6)), b.buf[:16*testMTU])
	m := newMover(t)
	now := qp.Time(0)
	// move hands what from sends now to to, but for the packet numbered
	// drop (-1: none).
	move := func(from, to *host, drop int) {
		m.move(from, to, now, func(i int, _ *wire.Packet) bool { return i == drop })
	}
	read := func(i int, size uint32) {
		off := uint64(i) * 4 * testMTU
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRead, Flags: verbs.Signaled,
			SGL: sgl(a.sge(off, size)), RemoteAddr: b.va(off), RKey: b.region.RKey()})
	}
	read(0, 4*testMTU)
	move(a, b, -1)
	move(b, a, 1) // the second response is lost; a asks again for the rest
	now = now.Add(50 * time.Microsecond)
	move(a, b, -1)
	paced := qp.PaceWindow(b.qp)
	if paced == 0 {
		t.Fatal("the lost response did not start the pacer")
	}
	const more = 8
	for i := 1; i <= more; i++ {
		read(i, testMTU)
	}
	move(a, b, -1)
	if got := qp.PaceWindow(b.qp); got != paced+more {
		t.Fatalf("after %d new READs the pacer's window is %d, want %d", more, got, paced+more)
	}
	// b sends nothing meanwhile (descheduled): a times out and asks again
	// for READ 0's rest and the READs after it, all still queued at b.
	now = now.Add(time.Second)
	a.qp.Tick(now)
	move(a, b, -1)
	if got := a.counter(verbs.RetransmittedPkts); got < 2 {
		t.Fatalf("%d requests sent again after the timeout, want the go-back-N to resend READ 0 and more", got)
	}
	if got := qp.PaceWindow(b.qp); got != paced+more {
		t.Errorf("requests for responses still queued cut the pacer's window to %d, want %d", got, paced+more)
	}
	var wcs []verbs.WC
	for step := 0; len(wcs) < more+1; step++ {
		if step == 10000 {
			t.Fatalf("%d of %d READs completed\n%s", len(wcs), more+1, qp.DumpSQ(a.qp))
		}
		move(a, b, -1)
		move(b, a, -1)
		wcs = append(wcs, a.poll()...)
		now = now.Add(10 * time.Microsecond)
		a.qp.Tick(now)
		b.qp.Tick(now)
	}
	for i, wc := range wcs {
		if wc.Status != verbs.Success || wc.ID != uint64(i) {
			t.Fatalf("completion %d: wr_id %d %s", i, wc.ID, wc.Status)
		}
	}
	for i := range more + 1 {
		off, size := i*4*testMTU, testMTU
		if i == 0 {
			size = 4 * testMTU
		}
		if !bytes.Equal(a.buf[off:off+size], b.buf[off:off+size]) {
			t.Fatalf("READ %d: the data differs", i)
		}
	}
}

// mover hands the packets one host sends straight to the other, with no
// simulated link between them.
type mover struct {
	t   testing.TB
	buf []byte
	pkt wire.Packet
}

func newMover(t testing.TB) *mover { return &mover{t: t, buf: make([]byte, qp.MaxPacketSize)} }

// move hands what from sends at now to to, but for the packets (numbered
// from 0 in this call) that drop reports lost.
func (m *mover) move(from, to *host, now qp.Time, drop func(i int, p *wire.Packet) bool) {
	for i := 0; ; i++ {
		n, route := from.qp.Transmit(m.buf, now)
		dst := route.Dst
		if n == 0 {
			return
		}
		env := wire.Envelope{Src: from.addr, Dst: dst}
		env.Seal(m.buf[:n])
		if err := m.pkt.Decode(m.buf[:n]); err != nil {
			m.t.Fatal(err)
		}
		if !drop(i, &m.pkt) {
			to.qp.Receive(&m.pkt, &env, now)
		}
	}
}

// TestSpuriousTimeoutUndone: a requester whose ACK comes back past its ACK
// timeout (its peer descheduled, on a loaded machine) sends again from the
// oldest packet with the smallest window; the late ACK then acknowledges
// packets the go-back-N has not sent again, and the requester takes back
// the window it had: the stall costs no slow start, however many timeouts
// in a row it lasted.
func TestSpuriousTimeoutUndone(t *testing.T) {
	for _, timeouts := range []int{1, 3} {
		t.Run(fmt.Sprintf("timeouts=%d", timeouts), func(t *testing.T) {
			_, a, b := pair(t, defaultAttr())
			m := newMover(t)
			now := qp.Time(0)
			keep := func(int, *wire.Packet) bool { return false }
			post(t, a, &verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 16*testMTU)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
			m.move(a, b, now, keep) // every packet reaches b, whose ACK waits
			before := a.qp.Status().Window
			for range timeouts {
				now = now.Add(time.Second)
				a.qp.Tick(now)
				if w := a.qp.Status().Window; w >= before {
					t.Fatalf("window %d after the timeout, want less than %d", w, before)
				}
				m.move(a, b, now, func(int, *wire.Packet) bool { return true }) // the go-back-N's packets, lost
			}
			if got := a.counter(verbs.CompleterRetryErr); got != uint64(timeouts) {
				t.Fatalf("%d retries, want %d", got, timeouts)
			}
			m.move(b, a, now, keep) // the late ACK of them all
			if wcs := a.poll(); len(wcs) != 1 || wcs[0].Status != verbs.Success {
				t.Fatalf("completions %v, want the WRITE's", wcs)
			}
			if w := a.qp.Status().Window; w != before {
				t.Errorf("window %d after the late ACK, want %d back", w, before)
			}
		})
	}
}

// The driver may hold an ACK timeout that has run out (HoldAckTimeout):
// the timer starts again from then, and the Tick that would have sent
// again from the oldest packet sends nothing, the window and the retry
// budget untouched; once the held timer runs out too, Tick retries.
func TestHoldAckTimeout(t *testing.T) {
	attr := defaultAttr()
	attr.RetryCnt = 3
	_, a, b := pair(t, attr)
	m := newMover(t)
	timeout := time.Duration(4096<<attr.Timeout) * time.Nanosecond
	post(t, a, &verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 4*testMTU)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	now := qp.Time(0)
	m.move(a, b, now, func(int, *wire.Packet) bool { return true }) // lost
	window, left := a.qp.Status().Window, a.qp.Status().RetriesLeft
	for _, step := range []struct {
		at          time.Duration
		hold        bool
		timedOut    bool
		wantRetries uint64
	}{
		{timeout - 1, false, false, 0},
		{timeout, true, true, 0}, // held: runs again from here
		{2*timeout - 1, false, false, 0},
		{2 * timeout, false, true, 1},
	} {
		now := now.Add(step.at)
		if got := a.qp.AckTimedOut(now); got != step.timedOut {
			t.Fatalf("at %v: AckTimedOut %v, want %v", step.at, got, step.timedOut)
		}
		if step.hold {
			a.qp.HoldAckTimeout(now)
			if a.qp.AckTimedOut(now) {
				t.Fatalf("at %v: timed out after HoldAckTimeout", step.at)
			}
		}
		a.qp.Tick(now)
		if got := a.counter(verbs.CompleterRetryErr); got != step.wantRetries {
			t.Fatalf("at %v: %d retries, want %d", step.at, got, step.wantRetries)
		}
		if step.wantRetries == 0 {
			if s := a.qp.Status(); s.Window != window || s.RetriesLeft != left {
				t.Fatalf("at %v: window %d, retries left %d; want %d and %d as before", step.at, s.Window, s.RetriesLeft, window, left)
			}
		}
	}
}
