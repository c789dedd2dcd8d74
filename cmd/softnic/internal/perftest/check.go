package perftest

import (
	"encoding/binary"
	"fmt"

	"github.com/softnic/softnic/cmd/softnic/internal/tooldev"
	"github.com/softnic/softnic/wire"
)

// The checks of the data a test moved. perftest checks nothing; softnic
// checks what its side can know, so that a run against Linux rxe proves
// more than an exit status:
//
//   - a WRITE, READ or ATOMIC server: its responder completed exactly the
//     client's messages (its MSN), WRITEs landed in the slots perftest
//     addresses and nowhere else, READs changed nothing, each FETCH_ADD
//     added 1 to its slot and each CMP_AND_SWAP (compare 0, swap 0) left
//     its slot as it was;
//   - a SEND server: every message has the test's size, and messages from
//     the same source slot of the client arrived identical;
//   - a READ client: two READs of the same remote slot returned the same
//     bytes, into two places;
//   - an ATOMIC client: the original values of successive operations on
//     one slot went up by one (FETCH_ADD) or stayed (CMP_AND_SWAP).
//
// Data still marked unwritten counts as missing; for messages of fewer
// than four bytes that mark could be the data itself, so it is not looked
// for there.

// minMarkedSize is the smallest message the unwritten mark is looked for in.
const minMarkedSize = 4

// arrived reports whether b no longer holds only the unwritten mark.
func arrived(b []byte) bool {
	if len(b) < minMarkedSize {
		return true
	}
	for _, c := range b {
		if c != unwritten {
			return true
		}
	}
	return false
}

// checkTarget checks the target area of a WRITE, READ or ATOMIC server
// once the client has finished its n messages.
func (s *perfSession) checkTarget(n int) error {
	// Status takes the QP's lock, under which the device placed every
	// request: reading the buffer after it is race-free.
	st := s.qp.Status()
	l := s.layout
	if got, want := (st.MSN-s.msn0)&wire.PSNMask, uint32(n)&wire.PSNMask; got != want {
		return fmt.Errorf("%w: the responder completed %d request messages, the client sent %d", tooldev.ErrDataCheck, got, want)
	}
	target := s.buf.Bytes()[l.target():]
	used := min(n, l.slots) // slots the client addressed
	switch s.cfg.Test {
	case ReadBW:
		for i, b := range target {
			if b != sourceByte(i) {
				return fmt.Errorf("%w: byte %d of the READ target changed from %#02x to %#02x", tooldev.ErrDataCheck, i, sourceByte(i), b)
			}
		}
		return nil
	case AtomicBW:
		for k := range l.slots {
			want := atomicStart(k)
			if s.cfg.Atomic == FetchAndAdd {
				want += uint64(hits(n, l.slots, k))
			}
			if got := binary.NativeEndian.Uint64(target[l.slot(k):]); got != want {
				return fmt.Errorf("%w: slot %d holds %d after %d %vs, want %d", tooldev.ErrDataCheck, k, got, hits(n, l.slots, k), s.cfg.Atomic, want)
			}
		}
		return checkUntouched(target, l, l.slots, l.size)
	}
	for k := range used {
		if !arrived(target[l.slot(k) : l.slot(k)+l.size]) {
			return fmt.Errorf("%w: no WRITE arrived in slot %d", tooldev.ErrDataCheck, k)
		}
	}
	return checkUntouched(target, l, used, l.size)
}

// hits is how many of n messages address slot k of slots.
func hits(n, slots, k int) int {
	h := n / slots
	if k < n%slots {
		h++
	}
	return h
}

// checkUntouched checks that every byte of area outside the first size
// bytes of its first used slots still holds the unwritten mark.
func checkUntouched(area []byte, l perfLayout, used, size int) error {
	for i, b := range area {
		k, off := i/l.stride, i%l.stride
		if k < used && off < size {
			continue
		}
		if b != unwritten {
			return fmt.Errorf("%w: byte %d (slot %d, offset %d) was written, though no message addresses it", tooldev.ErrDataCheck, i, k, off)
		}
	}
	return nil
}

// checkTwice compares the two cycles of the local area: slot k and slot
// k+slots received copies of the same source, which must have arrived and
// be equal.
func (s *perfSession) checkTwice(what string) error {
	n, l := s.cfg.Iters, s.layout
	local := s.buf.Bytes()[:l.target()]
	for k := range min(n, 2*l.slots) {
		if !arrived(local[l.slot(k) : l.slot(k)+l.size]) {
			return fmt.Errorf("%w: no %s arrived in local slot %d", tooldev.ErrDataCheck, what, k)
		}
	}
	for k := 0; k < l.slots && k+l.slots < n; k++ {
		a := local[l.slot(k) : l.slot(k)+l.size]
		b := local[l.slot(k+l.slots) : l.slot(k+l.slots)+l.size]
		if i := tooldev.FirstDifference(a, b); i >= 0 {
			return fmt.Errorf("%w: two %ss from remote slot %d differ at byte %d: %#02x and %#02x", tooldev.ErrDataCheck, what, k, i, a[i], b[i])
		}
	}
	return checkUntouched(local, l, min(n, 2*l.slots), l.size)
}

// checkReceived checks the send_bw server's received messages.
func (s *perfSession) checkReceived() error {
	s.qp.Status() // orders the device's placement before the reads below
	return s.checkTwice("SEND")
}

// checkClient checks what a READ or ATOMIC client brought back; its
// completions order the device's writes before the reads.
func (s *perfSession) checkClient() error {
	switch s.cfg.Test {
	case ReadBW:
		return s.checkTwice("READ response")
	case AtomicBW:
		return checkAtomicResults(s.results.Bytes(), s.layout.slots, s.cfg.Atomic)
	}
	return nil
}

// checkAtomicResults checks the original values of successive atomics on
// each slot: one more each time for FETCH_ADD (which adds 1), the same
// for CMP_AND_SWAP (compare 0, swap 0 leaves any value as it is).
func checkAtomicResults(results []byte, slots int, op AtomicOp) error {
	step := uint64(0)
	if op == FetchAndAdd {
		step = 1
	}
	for i := slots; i < len(results)/AtomicSize; i++ {
		prev := binary.NativeEndian.Uint64(results[(i-slots)*AtomicSize:])
		got := binary.NativeEndian.Uint64(results[i*AtomicSize:])
		if got != prev+step {
			return fmt.Errorf("%w: %v %d found %d in remote slot %d, the one before it there %d", tooldev.ErrDataCheck, op, i, got, i%slots, prev)
		}
	}
	return nil
}
