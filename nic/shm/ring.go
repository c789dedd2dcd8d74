package shm

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// A ring's memory: a header of words on five cache lines, so that the two
// sides do not write the same line, then the slots.
//
//	  0  producer   uint32  slots filled, ever (written by the producer only)
//	  4  written    uint32  completion rings: completions written, ever,
//	                        across resizes (by the producer only)
//	  8  solicited  uint32  completion rings: those of them that wake a CQ
//	                        armed for solicited ones (by the producer only)
//	 64  consumer   uint32  slots emptied, ever (written by the consumer only)
//	128  armed      uint32  completion rings: the reader asks for an event
//	192  overflow   uint32  completion rings: completions were lost
//	256  doorbell   uint32  work rings: the reader asks for doorbells
//	320  slot 0, slot 1, ... slot n-1
//
// Indexes run freely and wrap at 2^32; slot i lives at i mod n, and a ring
// holds producer - consumer slots, at most n.
const (
	offProducer  = 0
	offWritten   = 4
	offSolicited = 8
	offConsumer  = 64
	offArmed     = 128
	offOverflow  = 192
	offDoorbell  = 256
	// HeaderSize is the bytes before the first slot.
	HeaderSize = 320
)

// RingSize returns the bytes a ring of n slots of slotSize bytes takes,
// rounded up to whole pages.
func RingSize(n, slotSize int) int { return RoundUp(HeaderSize + n*slotSize) }

// Ring is a view of a ring in shared memory. It holds no state of its own:
// each side keeps its private copy of the index it owns and publishes it.
type Ring struct {
	mem      []byte
	n        uint32
	slotSize uint32
}

// NewRing returns the ring of n slots of slotSize bytes in mem.
func NewRing(mem []byte, n, slotSize int) (Ring, error) {
	if n <= 0 || slotSize <= 0 || slotSize%8 != 0 || n > 1<<24 || slotSize > 1<<16 || len(mem) < HeaderSize+n*slotSize {
		return Ring{}, fmt.Errorf("ring of %d slots of %d bytes in %d bytes: %w", n, slotSize, len(mem), ErrCorrupt)
	}
	return Ring{mem: mem, n: uint32(n), slotSize: uint32(slotSize)}, nil
}

// MapRing maps the ring of n slots of slotSize bytes in the memfd fd, which
// the other side sent. The mapping takes fd over (and closes it), whether
// it succeeds or not.
func MapRing(fd, n, slotSize int) (*Mapping, Ring, error) {
	m, err := Map(fd, RingSize(n, slotSize))
	if err != nil {
		return nil, Ring{}, err
	}
	m.CloseFD()
	r, err := NewRing(m.Bytes(), n, slotSize)
	if err != nil {
		m.Close()
		return nil, Ring{}, err
	}
	return m, r, nil
}

// Len returns the number of slots.
func (r Ring) Len() uint32 { return r.n }

// SlotSize returns the bytes of one slot.
func (r Ring) SlotSize() int { return int(r.slotSize) }

func (r Ring) word(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

// Producer is the count of slots filled; the producer stores it after
// writing them, the consumer loads it before reading them.
func (r Ring) Producer() *atomic.Uint32 { return r.word(offProducer) }

// Written is a completion ring's count of completions written, ever: unlike
// Producer, a resize does not start it again. The producer stores it
// after Producer, so that a reader that sees a count finds its
// completions in the ring.
func (r Ring) Written() *atomic.Uint32 { return r.word(offWritten) }

// Solicited is a completion ring's count of the completions written, ever,
// that wake a CQ armed for solicited completions only
// (verbs.WC.WakesSolicited). The producer stores it after Producer.
func (r Ring) Solicited() *atomic.Uint32 { return r.word(offSolicited) }

// Consumer is the count of slots emptied; the consumer stores it once it
// no longer needs them, the producer loads it before reusing them.
func (r Ring) Consumer() *atomic.Uint32 { return r.word(offConsumer) }

// Armed is set by a completion ring's reader before it sleeps, to ArmedAny
// or ArmedSolicited, and swapped back to zero by the writer, which then
// signals the ring's eventfd: at the next completion it publishes, or for
// ArmedSolicited at the next that wakes a CQ armed for solicited
// completions only (Solicited moves).
func (r Ring) Armed() *atomic.Uint32 { return r.word(offArmed) }

// The values of a completion ring's Armed word.
const (
	ArmedAny       = 1 // signal the next completion
	ArmedSolicited = 2 // signal the next solicited completion, or one in error
)

// Overflow is set by a completion ring's writer when it found no room for
// a completion.
func (r Ring) Overflow() *atomic.Uint32 { return r.word(offOverflow) }

// Doorbell is set by a work ring's reader (the daemon) while it needs the
// writer to ring the doorbell after filling slots, and cleared while it is
// sure to look at the ring again anyway (event suppression, as virtio's
// VRING_USED_F_NO_NOTIFY): a writer that stores the producer index and
// then finds Doorbell clear may skip the doorbell; a reader that sets it
// must then load the producer index once more.
func (r Ring) Doorbell() *atomic.Uint32 { return r.word(offDoorbell) }

// Slot returns the memory of slot i mod Len.
func (r Ring) Slot(i uint32) []byte {
	off := HeaderSize + int(i%r.n)*int(r.slotSize)
	return r.mem[off : off+int(r.slotSize) : off+int(r.slotSize)]
}

// Doorbell is the page of an attached process that tells the daemon
// which of the process's QPs rang, and the process whether the daemon
// sleeps:
//
//	  0  needWake  uint32       the daemon sleeps, or is about to
//	 64  summary   [4]uint64    bit i: word i of rung may have bits set
//	128  rung      [256]uint64  bit j of word i: the QP of slot 64i+j rang
//
// Each QP of a process has a slot, 0 to MaxSlots-1, which the daemon hands
// out. A poster that finds a ring's Doorbell flag set stores the producer
// index, marks the QP's slot (Mark) and then, if it finds NeedWake set,
// swaps it back to zero and signals the doorbell eventfd. The daemon sets
// NeedWake before it sleeps and takes the marks (Take) once more; it
// looks only at the QPs marked, so that a wakeup costs the daemon what
// rang, not every QP of the process. Posts that find the daemon awake
// cost no system call.
//
// The daemon trusts none of it: a process can set any bit, clear any bit
// (its own QPs then wait) or signal the eventfd without posting. A mark
// names a slot, which the daemon looks up in its own table.
type Doorbell struct{ mem []byte }

// Offsets of the doorbell page's parts.
const (
	offNeedWake  = 0
	offSummary   = 64
	offRung      = 128
	summaryWords = MaxSlots / 64 / 64
)

// MaxSlots is the number of QPs of one process that a doorbell page tells
// apart: the device's QPs at most (qp's default MaxQPs).
const MaxSlots = 16384

// DoorbellSize is the bytes of a doorbell page.
const DoorbellSize = PageSize

// NewDoorbell returns the doorbell in mem.
func NewDoorbell(mem []byte) (Doorbell, error) {
	if len(mem) < DoorbellSize {
		return Doorbell{}, fmt.Errorf("doorbell page of %d bytes: %w", len(mem), ErrCorrupt)
	}
	return Doorbell{mem: mem}, nil
}

// NeedWake is non-zero while the daemon sleeps or is about to.
func (d Doorbell) NeedWake() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&d.mem[offNeedWake]))
}

func (d Doorbell) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&d.mem[off]))
}

// Mark records that the QP of slot rang; a slot beyond MaxSlots is
// ignored. A bit already set is not written again, so that posters to a
// QP the daemon has not looked at yet do not fight over the line.
func (d Doorbell) Mark(slot uint32) {
	if slot >= MaxSlots {
		return
	}
	word, bit := d.word(offRung+int(slot/64)*8), uint64(1)<<(slot%64)
	if word.Load()&bit == 0 {
		word.Or(bit)
	}
	sum, sbit := d.word(offSummary+int(slot/64/64)*8), uint64(1)<<(slot/64%64)
	if sum.Load()&sbit == 0 {
		sum.Or(sbit)
	}
}

// Pending reports whether a QP is marked: whether Take would yield a
// slot now.
func (d Doorbell) Pending() bool {
	for i := range summaryWords {
		if d.word(offSummary+i*8).Load() != 0 {
			return true
		}
	}
	return false
}

// Take clears the marks and yields the slot of each, once (use it as
// "for slot := range d.Take"). A mark made while Take runs is yielded by
// this Take or by the next; the marks a loop stopped early did not reach
// are left for the next.
func (d Doorbell) Take(yield func(slot uint32) bool) {
	for i := range summaryWords {
		sum := d.word(offSummary + i*8)
		if sum.Load() == 0 {
			continue
		}
		for s := sum.Swap(0); s != 0; s &= s - 1 {
			w := i*64 + bits.TrailingZeros64(s)
			rung := d.word(offRung + w*8)
			for r := rung.Swap(0); r != 0; r &= r - 1 {
				if !yield(uint32(w*64 + bits.TrailingZeros64(r))) {
					rung.Or(r & (r - 1))
					sum.Or(s)
					return
				}
			}
		}
	}
}
