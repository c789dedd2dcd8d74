package mr

import "github.com/softnic/softnic/mr/keyspace"

// Requester identifies who asks for a remote access: the responder QP's PD
// and number, and the P_Key of the request's BTH.
type Requester struct {
	PD   PDHandle
	QPN  uint32
	PKey uint16 // regions with an auth key accept only their partition
}

// Remote is the data-path check of every remote access: rkey, the remote
// address (a virtual address, or an offset for zero-based regions and
// windows), the length, the access needed (RemoteRead, RemoteWrite or
// RemoteAtomic) and who asks. It returns the memory to touch, or a Reason.
// It does not allocate and is safe concurrently with registration.
//
// A READ or WRITE of length 0 is granted without looking at the key: IBTA
// C9-88 does not require a zero-length RDMA operation to carry a valid R_Key
// or address, and rxe skips the check. An atomic must cover exactly one
// 8-byte word, naturally aligned in memory (ReasonMisaligned otherwise).
//
// A granted RemoteWrite or RemoteAtomic counts once on every counter bound
// to an fi_mr region with FI_REMOTE_WRITE: the responder calls Remote once
// per message.
func (t *Table) Remote(rkey uint32, addr, length uint64, need Access, who Requester) (Span, error) {
	if need != RemoteRead && need != RemoteWrite && need != RemoteAtomic {
		return Span{}, t.reject(ReasonAccess)
	}
	if length == 0 && need != RemoteAtomic {
		return Span{}, nil
	}
	var (
		s   Span
		r   *Region
		why Reason
	)
	if keyspace.IsWindow(rkey) {
		s, r, why = t.remoteWindow(rkey, addr, length, need, who)
	} else {
		s, r, why = t.remoteRegion(rkey, addr, length, need, who)
	}
	if why != 0 {
		return Span{}, t.reject(why)
	}
	if need != RemoteRead {
		r.countRemoteWrite()
	}
	return s, nil
}

// remoteRegion checks an access through a region's rkey.
func (t *Table) remoteRegion(rkey uint32, addr, length uint64, need Access, who Requester) (Span, *Region, Reason) {
	r, why := t.region(rkey)
	if why != 0 {
		return Span{}, nil, why
	}
	access, why := r.admit(who.PD, &who)
	if why != 0 {
		return Span{}, nil, why
	}
	if need&^access != 0 {
		return Span{}, nil, ReasonAccess
	}
	off, ok := r.offset(addr, length)
	if !ok {
		return Span{}, nil, ReasonRange
	}
	s, why := r.span(off, addr, length, need)
	return s, r, why
}

// remoteWindow checks an access through a memory window, as rxe_lookup_mw
// does, then against the window's range, then against the region.
func (t *Table) remoteWindow(rkey uint32, addr, length uint64, need Access, who Requester) (Span, *Region, Reason) {
	w, why := lookup(&t.windows, rkey)
	if why != 0 {
		return Span{}, nil, why
	}
	b := w.bind.Load()
	switch {
	case b == nil || b.key != rkey:
		return Span{}, nil, ReasonStaleKey
	case w.pd != who.PD:
		return Span{}, nil, ReasonWrongPD
	case w.typ == WindowType2 && b.qpn != who.QPN:
		return Span{}, nil, ReasonWindowQP
	case need&^b.access != 0:
		return Span{}, nil, ReasonAccess
	}
	if addr < b.base || length > b.length || addr-b.base > b.length-length {
		return Span{}, nil, ReasonRange
	}
	// The window's PD and rights decided above, as in rxe_lookup_mw; the
	// region's, which Rereg may have changed since the bind, do not.
	r := b.mr
	if why := r.usable(&who); why != 0 {
		return Span{}, nil, why
	}
	a := b.mrAddr + (addr - b.base)
	off, ok := r.offset(a, length)
	if !ok {
		return Span{}, nil, ReasonRange
	}
	s, why := r.span(off, a, length, need)
	return s, r, why
}

// Local checks an lkey for a local buffer (an SGE of a work request): need
// is 0 for local read, which every region allows, or LocalWrite. The
// address is in the region's address space. A zero-length SGE needs no
// check, as in rxe. It does not allocate.
func (t *Table) Local(lkey uint32, addr, length uint64, need Access, pd PDHandle) (Span, error) {
	if need&^LocalWrite != 0 {
		return Span{}, t.reject(ReasonAccess)
	}
	if length == 0 {
		return Span{}, nil
	}
	r, why := t.region(lkey)
	var access Access
	if why == 0 {
		access, why = r.admit(pd, nil)
	}
	if why == 0 && need&^access != 0 {
		why = ReasonAccess
	}
	var s Span
	if why == 0 {
		if off, ok := r.offset(addr, length); !ok {
			why = ReasonRange
		} else {
			s, why = r.span(off, addr, length, need)
		}
	}
	if why != 0 {
		return Span{}, t.reject(why)
	}
	return s, nil
}

func (t *Table) reject(why Reason) Reason {
	t.stats.rejects[why].Add(1)
	return why
}

// admit checks the region's state and owner for a request from pd, and
// returns the region's access; who is nil for local access, which
// partitions and endpoints do not restrict. PD and access are read
// together, as Rereg changes them together.
func (r *Region) admit(pd PDHandle, who *Requester) (Access, Reason) {
	pa := r.pdAcc.Load()
	if PDHandle(pa>>32) != pd {
		return 0, ReasonWrongPD
	}
	if why := r.usable(who); why != 0 {
		return 0, why
	}
	return Access(uint32(pa)), 0
}

// usable checks the region's state and, for a remote requester who, its
// partition and endpoint: admit without the owner and the rights, which a
// window access takes from the window.
func (r *Region) usable(who *Requester) Reason {
	switch f := r.flags.Load(); {
	case f&regionDead != 0:
		return ReasonStaleKey
	case f&regionDisabled != 0:
		return ReasonDisabled
	case f&regionRefreshing != 0:
		return ReasonRefreshing
	}
	if who != nil {
		if r.pkey != 0 && !pkeyMatch(r.pkey, who.PKey) {
			return ReasonPartition
		}
		if b := r.bound.Load(); b != nil && b.Endpoint && b.EndpointQPN != who.QPN {
			return ReasonEndpoint
		}
	}
	return 0
}

// pkeyMatch applies the IBTA partition key rule: the low 15 bits (the
// partition) must be equal and at least one of the two keys must be a full
// member (bit 15 set).
func pkeyMatch(a, b uint16) bool {
	return a&0x7fff == b&0x7fff && (a|b)&0x8000 != 0
}

// span builds the Span for [off, off+length) of r (addr is the same range in
// r's address space, used by implicit ODP) and takes its reference.
func (r *Region) span(off, addr, length uint64, need Access) (Span, Reason) {
	m := &r.mem
	owner := r
	if r.implicit {
		e := r.t.addrView().memory(addr, length, r.pd())
		if e == nil {
			return Span{}, ReasonNotMapped
		}
		m, owner, off = e.memory(), e.region, e.offsetOf(addr)
	}
	s := Span{mem: m, off: off, n: length, odp: r.odp}
	if need&(LocalWrite|RemoteWrite|RemoteAtomic) != 0 {
		s.flags |= spanWritable
	}
	if length == 8 && m.word(off) != nil {
		// One aligned word: sync/atomic can act on it. ATOMIC WRITE needs
		// only remote write access (Store); FETCH_ADD and CMP_SWAP need
		// remote atomic access.
		s.flags |= spanWord
		if need == RemoteAtomic {
			s.flags |= spanAtomic
		}
	} else if need == RemoteAtomic {
		return Span{}, ReasonMisaligned
	}
	gone := ReasonStaleKey
	if r.implicit {
		gone = ReasonNotMapped
	}
	if !m.tryRef() {
		return Span{}, gone
	}
	// A deregistration that raced with this check has removed the key (or
	// the memory); the access is refused rather than served from memory on
	// its way out.
	if !r.live() || (owner != nil && !owner.live()) {
		m.unref()
		return Span{}, gone
	}
	return s, 0
}

// memory returns the memory an extent belongs to.
func (e *extent) memory() *memory {
	if e.arena != nil {
		return &e.arena.mem
	}
	return &e.region.mem
}

// offsetOf returns the offset of machine address addr, inside e, in e's
// memory.
func (e *extent) offsetOf(addr uint64) uint64 {
	if e.arena != nil {
		return addr - e.start
	}
	m := &e.region.mem
	return m.segStart(e.seg) + addr - e.start
}

// countRemoteWrite counts a granted modifying access on the counters bound
// with FI_REMOTE_WRITE.
func (r *Region) countRemoteWrite() {
	if b := r.bound.Load(); b != nil {
		for _, c := range b.Counters {
			c.Add(1)
		}
	}
}
