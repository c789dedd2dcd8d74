package qp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
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
			runLossy(t, seed, ops, qp.Faults{Drop: 0.10, Duplicate: 0.05, Reorder: 0.05, Corrupt: 0.01, Seed: seed})
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
	wr       qp.SendWR
	readWant []byte // READ: the bytes the model held when it was posted
	faddWant uint64 // FETCH_ADD: the value it must return
	sent     []byte // SEND: the payload b must receive
	off, n   uint64 // the remote range, as an offset in b's region
}

func runLossy(t *testing.T, seed uint64, total int, faults qp.Faults) {
	attr := defaultAttr()
	attr.Timeout = 8 // 1 ms
	s, a, b := pair(t, attr)
	s.tracing = true
	s.inj = qp.NewInjector(faults)
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
			p.wr = qp.SendWR{ID: uint64(slot), Flags: qp.Signaled, RKey: b.region.RKey(), RemoteAddr: b.va(dst)}
			p.off, p.n = dst, uint64(n)
			switch rng.IntN(10) {
			case 0, 1, 2, 3:
				if overlapsRead(inflight[:], dst, uint64(n)) {
					continue
				}
				p.wr.Opcode = qp.WRWrite
				if rng.IntN(4) == 0 {
					p.wr.Opcode = qp.WRWriteImm
					postRecv(t, b, &qp.RecvWR{ID: 1 << 32})
					recvs = append(recvs, nil)
				}
				rngFill(rng, a.buf[src:src+uint64(n)])
				copy(model[dst:], a.buf[src:src+uint64(n)])
				p.wr.SGL = sgl(a.sge(src, n))
			case 4, 5, 6:
				p.wr.Opcode = qp.WRRead
				p.wr.SGL = sgl(a.sge(src, n))
				p.readWant = bytes.Clone(model[dst : dst+uint64(n)])
			case 7, 8:
				add := rng.Uint64N(1000)
				p.wr.Opcode, p.wr.CompareAdd, p.wr.RemoteAddr = qp.WRFetchAdd, add, b.va(counterOff)
				p.wr.SGL = sgl(a.sge(src, 8))
				p.faddWant = counter
				counter += add
			default:
				p.wr.Opcode = qp.WRSend
				n = min(n, 4096)
				rngFill(rng, a.buf[src:src+uint64(n)])
				p.sent = bytes.Clone(a.buf[src : src+uint64(n)])
				p.wr.SGL = sgl(a.sge(src, n))
				postRecv(t, b, &qp.RecvWR{ID: 2 << 32, SGL: sgl(b.sge(recvArea+uint64(len(recvs)%64)*4096, 4096))})
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
			if wc.Status != qp.Success {
				t.Fatalf("op %d (%s) completed with %s\n%s", completed, p.wr.Opcode, wc.Status, tail(s.trace.String(), 60))
			}
			switch p.wr.Opcode {
			case qp.WRRead:
				src := p.wr.SGL[0]
				got := a.buf[src.Addr-a.region.Addr():][:src.Length]
				if !bytes.Equal(got, p.readWant) {
					t.Fatalf("op %d: READ returned data that differs from the model", completed)
				}
			case qp.WRFetchAdd:
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
			if wc.Status != qp.Success {
				t.Fatalf("receive %d completed with %s; b: bad_request %d remote_access_err %d\n%s", recvDone, wc.Status, b.counter(qp.BadRequest), b.counter(qp.RemoteAccessErr), tail(s.trace.String(), 30))
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
		if wc.Status != qp.Success {
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
		total, time.Duration(s.now), a.counter(qp.CompleterRetryErr), a.counter(qp.RetransmittedPkts),
		b.counter(qp.DuplicateRequest), b.counter(qp.OutOfSeqRequest), s.badICRC)
}

func rngFill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// overlapsRead reports whether [dst, dst+n) overlaps an outstanding READ.
func overlapsRead(inflight []*pending, dst, n uint64) bool {
	for _, p := range inflight {
		if p != nil && p.wr.Opcode == qp.WRRead && dst < p.off+p.n && p.off < dst+n {
			return true
		}
	}
	return false
}
