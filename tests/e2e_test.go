package tests

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// TestRandomOpsThroughFaults runs 10,000 random operations (every opcode,
// sizes from 0 B to 1 MiB) on several QPs between two devices on loopback
// UDP, through the fault injector at 10% drop, 5% duplicate, 5% reorder
// and 1% corrupt in both directions. Every operation must complete
// successfully; the target memory must equal a reference model byte for
// byte; every READ must return what the model held when it was posted; and
// the FETCH_ADDs on the shared counter must add up exactly (each executed
// once). It runs with each pairing of embedded and attached devices.
func TestRandomOpsThroughFaults(t *testing.T) { forEachMode(t, randomOpsThroughFaults) }

func randomOpsThroughFaults(t *testing.T, m mode) {
	nictest.CheckLeaks(t)
	total := 10000
	if testing.Short() {
		total = 1000
	}
	const nQPs = 4
	faults := func(seed uint64) *netem.Faults {
		return &netem.Faults{Drop: 0.10, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01, Seed: seed}
	}
	da := m.a(t, nic.Config{Faults: faults(1)})
	db := m.b(t, nic.Config{Faults: faults(2)})
	pa, _ := da.AllocPD()
	pb, _ := db.AllocPD()
	// Each QP owns an area of b's memory (operations on different QPs are
	// not ordered with each other) and depth 1 MiB buffers of a's; the last
	// 8 bytes of b's region are the counter every QP adds to.
	ma, err := pa.AllocMR(nQPs*depth*maxOp, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := pb.AllocMR(nQPs*bArea+8, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	opts := nic.ConnectOptions{Timeout: 8, MTU: 4096} // 1 ms ACK timeout
	var wg sync.WaitGroup
	errs := make([]error, nQPs)
	sums := make([]uint64, nQPs)
	start := time.Now()
	for i := range nQPs {
		l := connectPair(t, da, db, pa, pb, opts, 2*nRecv)
		w := &worker{l: l, ma: ma, mb: mb, aOff: i * depth * maxOp, bOff: i * bArea, counterOff: nQPs * bArea,
			rng: rand.New(rand.NewPCG(uint64(i), 7)), model: make([]byte, dataLen)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.run(total / nQPs)
			sums[i] = w.added
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("QP pair %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	mem := mb.Bytes()
	var want uint64
	for _, s := range sums {
		want += s
	}
	if got := binary.NativeEndian.Uint64(mem[nQPs*bArea:]); got != want {
		t.Errorf("counter = %d, want %d: a FETCH_ADD executed twice or never", got, want)
	}
	var stats []string
	for _, name := range []string{"sent_pkts", "retransmitted_pkts", "completer_retry_err", "duplicate_request", "out_of_seq_request", "bad_icrc", "fault_dropped"} {
		va, _ := da.Counter(name)
		vb, _ := db.Counter(name)
		stats = append(stats, fmt.Sprintf("%s %d/%d", name, va, vb))
	}
	t.Logf("%d ops in %v; a/b: %v", total, elapsed, stats)
}

// The layout of a QP's area of b: WRITE/READ/ATOMIC WRITE targets, then
// the word its COMPARE_SWAPs step, then receive buffers for its SENDs.
const (
	maxOp    = 1 << 20 // the largest operation
	depth    = 8       // operations in flight per QP
	dataLen  = 2 << 20
	casOff   = dataLen
	recvOff  = dataLen + 64
	recvSize = 64 << 10
	nRecv    = 16
	bArea    = recvOff + nRecv*recvSize
)

// worker drives one QP pair: it keeps up to depth operations in flight and
// checks each completion against its model of b's memory.
type worker struct {
	l          link
	ma, mb     *nic.MR
	aOff, bOff int
	counterOff int
	rng        *rand.Rand
	model      []byte // b's data range as it must be
	added      uint64 // sum of this worker's FETCH_ADDs
	inflight   [depth]*op
}

type op struct {
	wr       verbs.SendWR
	off, n   int    // the remote range, relative to the QP's area of b
	readWant []byte // READ: the model at posting time
	casWant  uint64 // COMPARE_SWAP: the original value it must return
}

// size draws an operation size from 0 B to 1 MiB, mostly small: each
// power of two up to 2^20 is as likely as the next.
func (w *worker) size() int {
	e := w.rng.IntN(21)
	return w.rng.IntN(1<<e + 1)
}

// post builds and posts one random operation into in-flight slot i.
func (w *worker) post(i int, seq int, recvs *[][]byte, cas *uint64) (*op, error) {
	aMem := w.ma.Bytes()
	src := w.aOff + i*maxOp
	o := &op{}
	n := w.size()
	off := w.rng.IntN(dataLen - n + 1)
	o.off, o.n = off, n
	o.wr = verbs.SendWR{ID: uint64(i), Flags: verbs.Signaled, RemoteAddr: w.mb.Addr() + uint64(w.bOff+off), RKey: w.mb.RKey()}
	k := w.rng.IntN(20)
	if k < 7 && w.overlapsRead(off, n) {
		k = 8 // a retried READ is executed again (IBTA 9.4.4): never WRITE under one
	}
	switch {
	case k < 7: // WRITE, sometimes with immediate
		o.wr.Opcode = verbs.WRWrite
		fillRandom(w.rng, aMem[src:src+n])
		copy(w.model[off:], aMem[src:src+n])
		o.wr.SGL = []verbs.SGE{w.ma.SGE(src, n)}
		if k == 0 {
			o.wr.Opcode, o.wr.Imm = verbs.WRWriteImm, uint32(seq)
			if err := w.l.B.PostRecv(&verbs.RecvWR{ID: uint64(seq)}); err != nil {
				return nil, err
			}
			*recvs = append(*recvs, nil)
		}
	case k < 12: // READ
		o.wr.Opcode = verbs.WRRead
		o.wr.SGL = []verbs.SGE{w.ma.SGE(src, n)}
		o.readWant = bytes.Clone(w.model[off : off+n])
	case k < 15: // FETCH_ADD on the counter all QPs share
		add := w.rng.Uint64N(1 << 20)
		o.wr.Opcode, o.wr.CompareAdd = verbs.WRFetchAdd, add
		o.wr.RemoteAddr = w.mb.Addr() + uint64(w.counterOff)
		o.wr.SGL = []verbs.SGE{w.ma.SGE(src, 8)}
		o.off, o.n = 0, 0
		w.added += add
	case k < 17: // COMPARE_SWAP stepping this QP's word: always matches
		o.wr.Opcode = verbs.WRCompareSwap
		o.wr.RemoteAddr = w.mb.Addr() + uint64(w.bOff+casOff)
		o.wr.CompareAdd, o.wr.Swap = *cas, *cas+1
		o.wr.SGL = []verbs.SGE{w.ma.SGE(src, 8)}
		o.casWant = *cas
		o.off, o.n = 0, 0
		*cas++
	case k < 18: // ATOMIC WRITE of an aligned word
		off &^= 7
		if w.overlapsRead(off, 8) {
			off = dataLen - 8
			if w.overlapsRead(off, 8) {
				return w.post(i, seq, recvs, cas)
			}
		}
		o.off, o.n = off, 8
		o.wr.Opcode, o.wr.Swap = verbs.WRAtomicWrite, w.rng.Uint64()
		o.wr.RemoteAddr = w.mb.Addr() + uint64(w.bOff+off)
		binary.NativeEndian.PutUint64(w.model[off:], o.wr.Swap)
	default: // SEND, sometimes with immediate
		o.wr.Opcode = verbs.WRSend
		if k == 19 {
			o.wr.Opcode, o.wr.Imm = verbs.WRSendImm, 42
		}
		n = min(n, recvSize)
		o.off, o.n = 0, 0
		fillRandom(w.rng, aMem[src:src+n])
		o.wr.SGL = []verbs.SGE{w.ma.SGE(src, n)}
		buf := w.bOff + recvOff + len(*recvs)%nRecv*recvSize
		if err := w.l.B.PostRecv(&verbs.RecvWR{ID: uint64(seq), SGL: []verbs.SGE{w.mb.SGE(buf, recvSize)}}); err != nil {
			return nil, err
		}
		*recvs = append(*recvs, bytes.Clone(aMem[src:src+n]))
	}
	if err := w.l.A.PostSend(&o.wr); err != nil {
		return nil, fmt.Errorf("post %s: %w", o.wr.Opcode, err)
	}
	return o, nil
}

func (w *worker) overlapsRead(off, n int) bool {
	for _, o := range w.inflight {
		if o != nil && o.wr.Opcode == verbs.WRRead && off < o.off+o.n && o.off < off+n {
			return true
		}
	}
	return false
}

func (w *worker) run(total int) error {
	aMem, bMem := w.ma.Bytes(), w.mb.Bytes()
	var recvs [][]byte // what each receive WR of b must get (nil: WRITE with immediate)
	posted, done, received := 0, 0, 0
	cas := uint64(0)
	for done < total {
		for i := range w.inflight {
			if w.inflight[i] != nil || posted == total {
				continue
			}
			o, err := w.post(i, posted, &recvs, &cas)
			if err != nil {
				return err
			}
			w.inflight[i] = o
			posted++
		}
		wc, err := waitWC2(w.l.ACQ)
		if err != nil {
			return fmt.Errorf("after %d ops: %w\nrequester %+v\nresponder %+v", done, err, w.l.A.Status(), w.l.B.Status())
		}
		o := w.inflight[wc.ID]
		if wc.Status != verbs.Success {
			return fmt.Errorf("op %d (%s of %d bytes) completed with %s", done, o.wr.Opcode, o.n, wc.Status)
		}
		result := aMem[w.aOff+int(wc.ID)*maxOp:]
		switch o.wr.Opcode {
		case verbs.WRRead:
			if !bytes.Equal(result[:o.n], o.readWant) {
				return fmt.Errorf("op %d: READ of %d bytes returned data that differs from the model", done, o.n)
			}
		case verbs.WRCompareSwap:
			if got := binary.NativeEndian.Uint64(result); got != o.casWant {
				return fmt.Errorf("op %d: COMPARE_SWAP returned %d, want %d", done, got, o.casWant)
			}
		}
		w.inflight[wc.ID] = nil
		done++
		// b completes a receive before it acknowledges the request, so
		// every receive of a completed SEND is in b's CQ by now.
		for {
			var rwc [1]verbs.WC
			n, err := w.l.BCQ.Poll(rwc[:])
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if rwc[0].Status != verbs.Success {
				return fmt.Errorf("receive %d completed with %s", received, rwc[0].Status)
			}
			if want := recvs[received]; want != nil {
				buf := bMem[w.bOff+recvOff+received%nRecv*recvSize:][:len(want)]
				if rwc[0].ByteLen != uint32(len(want)) || !bytes.Equal(buf, want) {
					return fmt.Errorf("receive %d: %d bytes that differ from the %d sent", received, rwc[0].ByteLen, len(want))
				}
			}
			received++
		}
	}
	if received != len(recvs) {
		return fmt.Errorf("%d receives completed, want %d", received, len(recvs))
	}
	w.l.B.Status() // orders the check below after b's writes (see syncMemory in package nic's tests)
	if !bytes.Equal(bMem[w.bOff:w.bOff+dataLen], w.model) {
		return fmt.Errorf("b's memory differs from the model")
	}
	return nil
}

func waitWC2(cq *nic.CQ) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	_, err := cq.Wait(ctx, wc[:])
	return wc[0], err
}

func fillRandom(r *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.NativeEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}
