package mr

import "sync/atomic"

// Span is memory resolved by Table.Remote or Table.Local: length bytes of
// one region, window or arena, possibly over several iov buffers and ODP
// pages. It is a value and allocates nothing. It holds a reference that
// keeps the memory valid (pinned, or mapped for NIC-owned arenas) until
// Release, so a deregistration never pulls memory out from under a
// transfer. Release it exactly once; the zero Span is empty and its Release
// does nothing.
//
// A Span writes only if the access it was granted for writes (LocalWrite,
// RemoteWrite, RemoteAtomic). FetchAdd and CompareSwap act only on a span
// granted RemoteAtomic, Store only on a writable span that IsWord; otherwise
// they do nothing and return 0. Offsets past the end copy nothing. Touching
// pages of an ODP region faults them in.
type Span struct {
	mem   *memory
	off   uint64 // where the span starts in mem
	n     uint64
	odp   *pageSet
	flags spanFlags
}

type spanFlags uint8

const (
	spanWritable spanFlags = 1 << iota
	spanWord               // one naturally aligned 8-byte word in one buffer
	spanAtomic             // granted RemoteAtomic (always a word)
)

// Len returns the span's length in bytes.
func (s Span) Len() uint64 { return s.n }

// ReadAt copies span[off:off+len(p)] into p, as far as the span reaches, and
// returns the number of bytes copied.
func (s Span) ReadAt(p []byte, off uint64) int {
	n := s.clip(len(p), off)
	if n == 0 {
		return 0
	}
	s.fault(off, n)
	s.mem.copyOut(p[:n], s.off+off)
	return int(n)
}

// WriteAt copies p into span[off:], as far as the span reaches, and returns
// the number of bytes copied; 0 if the span was not granted write access.
func (s Span) WriteAt(p []byte, off uint64) int {
	if s.flags&spanWritable == 0 {
		return 0
	}
	n := s.clip(len(p), off)
	if n == 0 {
		return 0
	}
	s.fault(off, n)
	s.mem.copyIn(p[:n], s.off+off)
	return int(n)
}

// FetchAdd adds add to the span's 8-byte word (native byte order) and
// returns the old value: ATOMIC FETCH_AND_ADD.
func (s Span) FetchAdd(add uint64) (old uint64) {
	if w := s.word(spanAtomic); w != nil {
		return atomic.AddUint64(w, add) - add
	}
	return 0
}

// CompareSwap stores swap in the span's word if it equals compare, and
// returns the old value: ATOMIC CMP_AND_SWP.
func (s Span) CompareSwap(compare, swap uint64) (old uint64) {
	w := s.word(spanAtomic)
	if w == nil {
		return 0
	}
	for {
		old = atomic.LoadUint64(w)
		if old != compare || atomic.CompareAndSwapUint64(w, old, swap) {
			return old
		}
	}
}

// Store stores v in the span's word (native byte order): ATOMIC WRITE,
// which needs remote write access and an aligned word.
func (s Span) Store(v uint64) {
	if w := s.word(spanWord | spanWritable); w != nil {
		atomic.StoreUint64(w, v)
	}
}

// IsWord reports whether the span is one naturally aligned 8-byte word in
// one buffer: what the atomics act on. The responder of an ATOMIC WRITE
// (granted RemoteWrite) checks it before Store; an atomic that is not a
// word is refused by Remote itself (ReasonMisaligned).
func (s Span) IsWord() bool { return s.flags&spanWord != 0 }

// Release drops the span's reference to its memory.
func (s Span) Release() {
	if s.mem != nil {
		s.mem.unref()
	}
}

// clip returns how many of want bytes from off lie inside the span.
func (s Span) clip(want int, off uint64) uint64 {
	if off >= s.n {
		return 0
	}
	return min(uint64(want), s.n-off)
}

// fault makes the ODP pages under [off, off+n) resident.
func (s Span) fault(off, n uint64) {
	if s.odp != nil {
		s.odp.touch(s.mem.addrOf(s.off+off), n, false)
	}
}

// word returns the span's word if the span has all the flags need,
// faulting its page in.
func (s Span) word(need spanFlags) *uint64 {
	if s.flags&need != need {
		return nil
	}
	s.fault(0, 8)
	return s.mem.word(s.off)
}
