package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// latencyResult holds write_lat's post times.
type latencyResult struct {
	posted []time.Duration
}

// runLatency runs write_lat's ping-pong: each side writes the iteration
// number into the last byte of the peer's target and waits until the
// peer's WRITE of the same number has arrived in its own; the server
// writes first.
func (s *perfSession) runLatency() (latencyResult, error) {
	n := s.cfg.Iters
	r := latencyResult{posted: make([]time.Duration, n)}
	l := s.layout
	src := s.buf.Bytes()[:l.size]
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, RemoteAddr: s.remote.VAddr, RKey: s.remote.RKey,
		SGL: []verbs.SGE{s.buf.SGE(0, l.size)}}
	w := s.turns()
	var wc [1]verbs.WC
	start := time.Now()
	for sent, seen := 0, 0; sent < n || seen < n; {
		if seen < n && !(sent == 0 && s.cfg.server()) {
			seen++
			if err := w.awaitWrite(seen); err != nil {
				return r, err
			}
		}
		if sent < n {
			sent++
			src[l.size-1] = byte(sent)
			r.posted[sent-1] = time.Since(start)
			wr.ID = uint64(sent)
			if err := s.qp.PostSend(&wr); err != nil {
				return r, fmt.Errorf("posting WRITE %d: %w", sent, err)
			}
			if err := w.awaitCompletion(wc[:]); err != nil {
				return r, fmt.Errorf("waiting for the completion of WRITE %d: %w", sent, err)
			}
			if wc[0].Status != verbs.Success {
				return r, fmt.Errorf("WRITE %d of %d completed with %v (%s)", sent, n, wc[0].Status, wc[0].Status.Text())
			}
		}
	}
	return r, nil
}

// turns is how one side of write_lat waits for its turns: for the peer's
// WRITE to land in its target, and for its own WRITE's completion.
type turns interface {
	// awaitWrite waits until the peer's WRITE number k has landed, whose
	// last byte carries k.
	awaitWrite(k int) error
	// awaitCompletion waits for the completion of this side's WRITE and
	// takes it into wcs[0].
	awaitCompletion(wcs []verbs.WC) error
}

// turns returns the way the device lets this side wait: a watcher where a
// loop of loads sees the peer's WRITE land (nic.MR.Word: a region an
// attached device's daemon writes), else a sleeper.
func (s *perfSession) turns() turns {
	last := s.layout.target() + s.layout.size - 1
	if word := s.buf.Word(last &^ 3); word != nil {
		return &watcher{ctx: s.ctx, done: s.dev.Done(), cq: s.cq, word: word, at: last & 3}
	}
	return &sleeper{s}
}

// watcher waits as perftest's ib_write_lat does: it spins on the last
// byte of its target, loading the aligned word that holds it atomically
// (the daemon writes it from its own process; an atomic load is what Go's
// memory model needs to see such a write), and spins on the CQ for its
// WRITE's completion, an attached CQ's Poll giving up the CPU when it
// finds nothing. Every spinPeek spins it looks whether ctx ended or the
// device closed, so that neither wait outlives them, and lets the
// process's other goroutines run (runtime.Gosched), which may be the
// daemon's when it runs in the same process, as in tests. Not at every
// spin: a Gosched puts the goroutine on the global run queue and wakes
// an idle processor's thread to look for work, a thread woken per spin.
type watcher struct {
	ctx  context.Context
	done <-chan struct{}
	cq   *nic.CQ
	word *atomic.Uint32
	at   int // the last byte's index in the word
}

const spinPeek = 256

func (w *watcher) awaitWrite(k int) error {
	var b [4]byte
	for i := 1; ; i++ {
		binary.NativeEndian.PutUint32(b[:], w.word.Load())
		if b[w.at] == byte(k) {
			return nil
		}
		if i%spinPeek == 0 {
			runtime.Gosched()
			if err := w.ended(); err != nil {
				return fmt.Errorf("waiting for the peer's WRITE %d: %w", k, err)
			}
		}
	}
}

func (w *watcher) awaitCompletion(wcs []verbs.WC) error {
	for i := 1; ; i++ {
		if n, err := w.cq.Poll(wcs[:1]); n > 0 || err != nil {
			return err
		}
		if i%spinPeek == 0 {
			runtime.Gosched()
			if err := w.ended(); err != nil {
				return err
			}
		}
	}
}

// ended returns ctx's error once it has ended, nic.ErrClosed once the
// device has closed (its session with the daemon ended).
func (w *watcher) ended() error {
	select {
	case <-w.ctx.Done():
		return w.ctx.Err()
	case <-w.done:
		return nic.ErrClosed
	default:
		return nil
	}
}

// sleeper waits on an embedded device, whose reader goroutine places a
// WRITE in memory under the QP's lock; nothing signals its arrival (a
// WRITE without immediate completes nothing at the responder). So instead
// of reading the byte while the device may be writing it, the sleeper asks
// the QP, under that lock, how many request messages its responder has
// completed (its MSN), which orders the WRITE's placement before the read
// that follows (a real happens-before edge, race-free). It waits between
// looks for the device to report a received packet (tooldev's OnReceive)
// rather than spinning, so that a single CPU is not taken from the device
// that has to deliver the WRITE, and waits for its completion in CQ.Wait.
type sleeper struct{ s *perfSession }

func (w *sleeper) awaitWrite(k int) error {
	s := w.s
	for (s.qp.Status().MSN-s.msn0)&wire.PSNMask < uint32(k)&wire.PSNMask {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return fmt.Errorf("waiting for the peer's WRITE %d: %w", k, s.ctx.Err())
		}
	}
	l := s.layout
	if got := s.buf.Bytes()[l.target()+l.size-1]; got != byte(k) {
		return fmt.Errorf("%w: the peer's WRITE %d carries %d in its last byte", tooldev.ErrDataCheck, k, got)
	}
	return nil
}

func (w *sleeper) awaitCompletion(wcs []verbs.WC) error {
	_, err := w.s.cq.Wait(w.s.ctx, wcs[:1])
	return err
}
