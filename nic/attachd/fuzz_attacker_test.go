//go:build linux

package attachd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The attackers of FuzzAttachSessions: sessions of the attach protocol
// driven by the instructions of a program.

// fuzzSession is an attacker: a session driven by a program.
type fuzzSession struct {
	fz   *sessionFuzz
	c    *shm.Conn
	bell int
	page *shm.Mapping
	db   shm.Doorbell

	mu      sync.Mutex
	replies map[uint64]chan fuzzReply
	ended   chan struct{} // closed when the daemon has ended the session
	id      uint64

	handles []uint32
	qpns    []uint32
	slots   []uint32
	keys    []uint32 // of its regions and windows
	rings   []fuzzRing
	regions []fuzzRegion
	closed  bool
}

// fuzzReply is the daemon's answer to a request.
type fuzzReply struct {
	m   attachproto.Msg
	fds []int
}

// fuzzRing is a ring the daemon shared with the attacker.
type fuzzRing struct {
	m    *shm.Mapping
	r    shm.Ring
	send bool   // a send ring, which posts encode send work requests into
	prod uint32 // the producer index the attacker keeps
	ev   int    // a completion ring's wakeup (an epoll fd), else -1
}

// fuzzRegion is memory the attacker registered: its mapping, if it made a
// sealed memfd for it, and its address for the daemon.
type fuzzRegion struct {
	m    *shm.Mapping
	addr uint64
}

// read takes the daemon's messages until the session ends.
func (s *fuzzSession) read() {
	defer close(s.ended)
	for {
		line, err := s.c.ReadLine()
		if err != nil {
			s.c.DropFDs()
			return
		}
		var m attachproto.Msg
		if json.Unmarshal(line, &m) != nil {
			return
		}
		fds, err := s.c.TakeFDs(m.FDs)
		if err != nil {
			return
		}
		s.mu.Lock()
		ch := s.replies[m.ID]
		delete(s.replies, m.ID)
		s.mu.Unlock()
		if ch == nil || m.ID == 0 {
			shm.CloseFDs(fds)
			continue
		}
		ch <- fuzzReply{m, fds}
	}
}

func (s *fuzzSession) dead() bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

// call sends request op with args and the descriptor fd (-1: none), and
// waits for the answer unless the request waits for the network. A
// daemon that neither answers nor ends the session within 10 s fails.
func (s *fuzzSession) call(op string, args any, fd int, waits bool) (fuzzReply, bool, error) {
	s.mu.Lock()
	s.id++
	id := s.id
	ch := make(chan fuzzReply, 1)
	if !waits {
		s.replies[id] = ch
	}
	s.mu.Unlock()
	m := attachproto.Msg{ID: id, Op: op}
	m.Args, _ = json.Marshal(args)
	var fds []int
	if fd >= 0 {
		m.FDs, fds = 1, []int{fd}
	}
	line, _ := json.Marshal(&m)
	err := s.c.Send(line, fds)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil || waits {
		return fuzzReply{}, false, nil
	}
	select {
	case r := <-ch:
		return r, true, nil
	case <-s.ended:
		return fuzzReply{}, false, nil
	case <-time.After(10 * time.Second):
		return fuzzReply{}, false, fmt.Errorf("the daemon did not answer %s %s within 10 s", op, m.Args)
	}
}

// await waits up to d for completions in the session's completion rings,
// armed, and takes them.
func (s *fuzzSession) await(d time.Duration) {
	var evs []unix.PollFd
	for i := range s.rings {
		if r := &s.rings[i]; r.ev >= 0 {
			r.r.Armed().Store(1)
			if p := r.r.Producer().Load(); p != r.prod {
				r.prod = p
				r.r.Consumer().Store(p)
				return
			}
			evs = append(evs, unix.PollFd{Fd: int32(r.ev), Events: unix.POLLIN})
		}
	}
	if len(evs) > 0 {
		unix.Poll(evs, int(d.Milliseconds()))
	}
}

// close detaches and unmaps everything.
func (s *fuzzSession) close() {
	if s == nil || s.closed {
		return
	}
	s.closed = true
	s.c.Close()
	<-s.ended
	unix.Close(s.bell)
	s.page.Close()
	for _, r := range s.rings {
		r.m.Close()
		if r.ev >= 0 {
			unix.Close(r.ev)
		}
	}
	for _, r := range s.regions {
		if r.m != nil {
			r.m.Close()
		}
	}
}

// memory returns everything the attacker has mapped.
func (s *fuzzSession) memory() [][]byte {
	mem := [][]byte{s.page.Bytes()}
	for _, r := range s.rings {
		mem = append(mem, r.m.Bytes())
	}
	for _, r := range s.regions {
		if r.m != nil {
			mem = append(mem, r.m.Bytes())
		}
	}
	return mem
}

// fuzzActions are the actions of a program, by their opcode.
var fuzzActions = [8]func(s *fuzzSession, in *fuzzInput) error{
	fzRequest:   (*fuzzSession).request,
	fzConnect:   (*fuzzSession).connect,
	fzWriteRing: (*fuzzSession).writeRing,
	fzPostSend:  (*fuzzSession).postSend,
	fzPostRecv:  (*fuzzSession).postRecv,
	fzSetIndex:  (*fuzzSession).setIndex,
	fzRing:      (*fuzzSession).doorbell,
	fzGarbage:   (*fuzzSession).garbage,
}

// fuzzOp is a request an attacker makes: its op, its arguments from the
// input, whether it carries a descriptor.
type fuzzOp struct {
	op   string
	args func(s *fuzzSession, in *fuzzInput) any
	fd   bool
}

func handleOf(s *fuzzSession, in *fuzzInput) any { return attachproto.HandleArgs{H: s.handle(in)} }

var fuzzOps = []fuzzOp{
	{op: attachproto.OpAllocPD},
	{op: attachproto.OpDeallocPD, args: handleOf},
	{op: attachproto.OpAllocMR, fd: true, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.AllocMRArgs{PD: s.handle(in), Size: fuzzSize(in), Access: mr.Access(in.byte())}
	}},
	{op: attachproto.OpRegMR, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.RegMRArgs{PD: s.handle(in), Buf: s.handle(in), Off: int(int8(in.byte())) * 64, Len: fuzzSize(in), Access: mr.Access(in.byte())}
	}},
	{op: attachproto.OpDeregMR, args: handleOf},
	{op: attachproto.OpCreateCQ, args: func(s *fuzzSession, in *fuzzInput) any { return attachproto.CreateCQArgs{Depth: fuzzDepth(in)} }},
	{op: attachproto.OpDestroyCQ, args: handleOf},
	{op: attachproto.OpCreateSRQ, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.CreateSRQArgs{PD: s.handle(in), Depth: fuzzDepth(in), MaxSGE: int(in.byte() % 5)}
	}},
	{op: attachproto.OpDestroySRQ, args: handleOf},
	{op: attachproto.OpCreateQP, args: func(s *fuzzSession, in *fuzzInput) any {
		c := attachproto.QPConfig{Type: verbs.Type(in.byte() % 4), SendCQ: s.handle(in), RecvCQ: s.handle(in)}
		if b := in.byte(); b&1 != 0 {
			c.SRQ = s.handle(in)
		}
		c.MaxSendWR, c.MaxRecvWR = fuzzDepth(in), fuzzDepth(in)
		c.MaxSendSGE, c.MaxRecvSGE, c.MaxInline = int(in.byte()%5), int(in.byte()%5), int(in.byte()%3)*64
		return attachproto.CreateQPArgs{PD: s.handle(in), Config: c}
	}},
	{op: attachproto.OpModifyQP, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ModifyQPArgs{H: s.handle(in), Attr: s.attr(verbs.State(in.byte()%8), in), Mask: verbs.AttrMask(in.u32())}
	}},
	{op: attachproto.OpQueryQP, args: handleOf},
	{op: attachproto.OpAttachMcast, args: mcastArgs},
	{op: attachproto.OpDetachMcast, args: mcastArgs},
	{op: attachproto.OpDestroyQP, args: handleOf},
	{op: attachproto.OpAllocMW, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.AllocMWArgs{PD: s.handle(in), Type: mr.WindowType(in.byte() % 4)}
	}},
	{op: attachproto.OpDeallocMW, args: handleOf},
	{op: attachproto.OpCounters},
	{op: attachproto.OpListen, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ListenArgs{Port: 7000 + uint16(in.byte()%4), PD: s.handle(in), QP: attachproto.QPConfig{SendCQ: s.handle(in)}, Backlog: int(in.byte()),
			Held: in.byte()%2 == 0}
	}},
	{op: attachproto.OpCloseListener, args: handleOf},
	{op: attachproto.OpAcceptRequest, args: handleOf},
	{op: attachproto.OpCancel, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.CancelArgs{Target: s.id - uint64(in.byte()%4)}
	}},
	{op: attachproto.OpReject, args: func(s *fuzzSession, in *fuzzInput) any { return attachproto.RejectArgs{Request: s.handle(in)} }},
	{op: attachproto.OpAccept, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.AcceptArgs{Request: s.handle(in), Timeout: in.byte() % 40}
	}},
	{op: attachproto.OpRegShared, fd: true, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.RegSharedArgs{PD: s.handle(in), Off: int64(int8(in.byte())) * 4096, Len: fuzzSize(in), IOVA: s.addr(in), Access: mr.Access(in.byte())}
	}},
	{op: attachproto.OpDisconnect, args: handleOf},
	{op: attachproto.OpResizeCQ, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ResizeCQArgs{H: s.handle(in), Depth: fuzzDepth(in)}
	}},
	{op: attachproto.OpModifySRQ, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ModifySRQArgs{H: s.handle(in), Attr: verbs.SRQAttr{MaxWR: fuzzDepth(in), Limit: int(int8(in.byte()))},
			Mask: verbs.SRQAttrMask(in.byte())}
	}},
	{op: attachproto.OpQuerySRQ, args: handleOf},
	{op: attachproto.OpListenUD, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ListenUDArgs{Port: 7000 + uint16(in.byte()%4), Backlog: int(in.byte()), Held: in.byte()%2 == 0}
	}},
	{op: attachproto.OpAcceptUD, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.AcceptUDArgs{Request: s.handle(in), QP: s.handle(in)}
	}},
	{op: attachproto.OpReregMR, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.ReregMRArgs{H: s.handle(in), Flags: mr.ReregFlags(in.byte() % 16), PD: s.handle(in), Access: mr.Access(in.byte())}
	}},
	{op: attachproto.OpPrefetchMR, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.PrefetchMRArgs{H: s.handle(in), Addr: s.addr(in), Len: uint64(fuzzSize(in))}
	}},
	{op: attachproto.OpOpenListener, args: func(s *fuzzSession, in *fuzzInput) any {
		return attachproto.OpenListenerArgs{H: s.handle(in), Backlog: int(int8(in.byte())) * 64}
	}},
}

// fuzzGroups are the groups of attach_mcast and detach_mcast: two of
// IPv4 (one as its mapped GID), a unicast GID, an IPv6 group, none.
var fuzzGroups = []netip.Addr{netip.MustParseAddr("239.9.9.1"), netip.MustParseAddr("::ffff:239.9.9.2"),
	netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("ff0e::1"), {}}

func mcastArgs(s *fuzzSession, in *fuzzInput) any {
	return attachproto.McastArgs{H: s.handle(in), Group: fuzzGroups[int(in.byte())%len(fuzzGroups)]}
}

// request makes one request of fuzzOps, and keeps what the answer gives.
func (s *fuzzSession) request(in *fuzzInput) error {
	o := fuzzOps[int(in.byte())%len(fuzzOps)]
	var args any
	if o.args != nil {
		args = o.args(s, in)
	}
	fd, region := -1, (*shm.Mapping)(nil)
	if o.fd {
		var err error
		if fd, region, err = fuzzFD(in, args); err != nil {
			return err
		}
	}
	// Answers that wait for the network are not waited for, nor that of a
	// cancel, which has none.
	waits := attachproto.WaitsForNetwork(o.op) || o.op == attachproto.OpCancel
	r, ok, err := s.call(o.op, args, fd, waits)
	if !ok || err != nil || r.m.Error != "" {
		shm.CloseFDs(r.fds)
		if region != nil {
			region.Close()
		}
		return err
	}
	var res struct {
		H, QPN, Slot, LKey, RKey uint32
		Addr                     uint64
		Depth, MaxSGE            int
		Config                   attachproto.QPConfig
	}
	if bytes.HasPrefix(r.m.Result, []byte("{")) && json.Unmarshal(r.m.Result, &res) != nil {
		shm.CloseFDs(r.fds)
		return fmt.Errorf("%s: result %s", o.op, r.m.Result)
	}
	if res.H != 0 {
		s.handles = append(s.handles, res.H)
	}
	switch o.op {
	case attachproto.OpAllocMR, attachproto.OpRegMR, attachproto.OpRegShared:
		s.regions = append(s.regions, fuzzRegion{m: region, addr: res.Addr})
		s.keys = append(s.keys, res.LKey, res.RKey)
	case attachproto.OpAllocMW:
		s.keys = append(s.keys, res.RKey)
	case attachproto.OpCreateCQ:
		if len(r.fds) != 2 {
			shm.CloseFDs(r.fds)
			return fmt.Errorf("create_cq: %d descriptors", len(r.fds))
		}
		m, ring, err := shm.MapRing(r.fds[0], res.Depth, shm.CQESize)
		if err != nil {
			shm.CloseFDs(r.fds[1:])
			return fmt.Errorf("create_cq: %v", err)
		}
		s.rings = append(s.rings, fuzzRing{m: m, r: ring, ev: r.fds[1]})
	case attachproto.OpCreateSRQ:
		if len(r.fds) != 1 {
			shm.CloseFDs(r.fds)
			return fmt.Errorf("create_srq: %d descriptors", len(r.fds))
		}
		m, ring, err := shm.MapRing(r.fds[0], res.Depth, shm.RecvSlotSize(res.MaxSGE))
		if err != nil {
			return fmt.Errorf("create_srq: %v", err)
		}
		s.rings = append(s.rings, fuzzRing{m: m, r: ring, ev: -1})
	case attachproto.OpCreateQP:
		if len(r.fds) > 2 {
			shm.CloseFDs(r.fds)
			return fmt.Errorf("create_qp: %d descriptors", len(r.fds))
		}
		s.qpns, s.slots = append(s.qpns, res.QPN), append(s.slots, res.Slot)
		c := res.Config
		sizes := []int{shm.SendSlotSize(c.MaxSendSGE, c.MaxInline), shm.RecvSlotSize(c.MaxRecvSGE)}
		depths := []int{c.MaxSendWR, c.MaxRecvWR}
		for i, fd := range r.fds {
			m, ring, err := shm.MapRing(fd, depths[i], sizes[i])
			if err != nil {
				shm.CloseFDs(r.fds[i+1:])
				return fmt.Errorf("create_qp: ring %d: %v", i, err)
			}
			s.rings = append(s.rings, fuzzRing{m: m, r: ring, send: i == 0, ev: -1})
		}
	default:
		shm.CloseFDs(r.fds)
	}
	return nil
}

// fuzzFD returns the descriptor an alloc_mr or reg_shared request sends:
// a sealed memfd as the request asks (kept mapped as the attacker's
// region), or one that is not: unsealed, too small, an eventfd, a pipe.
func fuzzFD(in *fuzzInput, args any) (int, *shm.Mapping, error) {
	size := 4096
	switch a := args.(type) {
	case attachproto.AllocMRArgs:
		size = a.Size
	case attachproto.RegSharedArgs:
		size = int(a.Off) + a.Len
	}
	size = min(max(size, 1), 1<<20)
	switch in.byte() % 5 {
	case 0:
		m, err := shm.Create("fuzz-mr", size)
		if err != nil {
			return -1, nil, err
		}
		return m.TakeFD(), m, nil
	case 1:
		fd, err := unix.MemfdCreate("fuzz-unsealed", unix.MFD_CLOEXEC)
		if err == nil {
			err = unix.Ftruncate(fd, int64(size))
		}
		return fd, nil, err
	case 2:
		m, err := shm.Create("fuzz-small", 1)
		if err != nil {
			return -1, nil, err
		}
		fd := m.TakeFD()
		m.Close()
		return fd, nil, nil
	case 3:
		fd, err := shm.NewEventFD()
		return fd, nil, err
	default:
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, nil, err
		}
		unix.Close(p[1])
		return p[0], nil, nil
	}
}

// connect moves an RC QP of the attacker to RTS towards a QPN (perhaps
// the victim's) on the daemon's own address, as QP.Connect does.
func (s *fuzzSession) connect(in *fuzzInput) error {
	h, dest := s.handle(in), s.qpn(in)
	for _, st := range []struct {
		state verbs.State
		mask  verbs.AttrMask
	}{
		{verbs.Init, verbs.AttrState | verbs.AttrAccessFlags},
		{verbs.RTR, verbs.AttrState | verbs.AttrRemote | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.RTS, verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxRdAtomic},
	} {
		a := verbs.Attr{State: st.state, AccessFlags: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic, Remote: s.fz.dev.Addr(),
			PathMTU: 1024, DestQPN: dest, Timeout: 8, RetryCnt: 1, RNRRetry: 1, MinRNRTimer: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 4}
		r, _, err := s.call(attachproto.OpModifyQP, attachproto.ModifyQPArgs{H: h, Attr: a, Mask: st.mask}, -1, false)
		shm.CloseFDs(r.fds)
		if err != nil || r.m.Error != "" {
			return err
		}
	}
	return nil
}

// writeRing writes bytes from the input into a ring, header or slots.
func (s *fuzzSession) writeRing(in *fuzzInput) error {
	r := s.pickRing(in, false)
	off, n := int(in.u16()), int(in.byte())
	data := in.bytes(n)
	if r != nil {
		mem := r.m.Bytes()
		copy(mem[off%len(mem):], data)
	}
	return nil
}

// postSend encodes a send work request into a send ring, its addresses
// and keys aimed from the input.
func (s *fuzzSession) postSend(in *fuzzInput) error {
	r := s.pickRing(in, true)
	wr := verbs.SendWR{ID: uint64(in.byte()), Opcode: verbs.WROpcode(in.byte() % 12), Flags: verbs.SendFlags(in.byte())}
	wr.SGL = []verbs.SGE{{Addr: s.addr(in), LKey: s.key(in), Length: uint32(in.byte()) * 16}}
	wr.RemoteAddr, wr.RKey = s.addr(in), s.key(in)
	wr.DestQPN, wr.Dest = s.qpn(in), s.fz.dev.Addr()
	switch {
	case wr.Opcode == verbs.WRBindMW:
		sge := wr.SGL[0]
		wr.Bind = &mr.BindRequest{WindowKey: wr.RKey, NewKey: wr.RKey + 1, RegionKey: sge.LKey, Addr: sge.Addr,
			Length: uint64(sge.Length), Access: mr.Access(wr.Flags)}
		wr.SGL, wr.Flags = nil, wr.Flags&^verbs.Inline
	case wr.Flags&verbs.Inline != 0:
		wr.Inline = in.bytes(int(in.byte() % 64))
	}
	if r == nil || shm.EncodeSend(r.r.Slot(r.prod), &wr) != nil {
		return nil
	}
	r.prod++
	r.r.Producer().Store(r.prod)
	return nil
}

// postRecv encodes a receive work request into a receive or SRQ ring.
func (s *fuzzSession) postRecv(in *fuzzInput) error {
	r := s.pickRing(in, false)
	wr := verbs.RecvWR{ID: uint64(in.byte()), SGL: []verbs.SGE{{Addr: s.addr(in), LKey: s.key(in), Length: uint32(in.byte()) * 16}}}
	if r == nil || r.send || shm.EncodeRecv(r.r.Slot(r.prod), &wr) != nil {
		return nil
	}
	r.prod++
	r.r.Producer().Store(r.prod)
	return nil
}

// setIndex moves a ring's producer or consumer index by a signed delta.
func (s *fuzzSession) setIndex(in *fuzzInput) error {
	r := s.pickRing(in, false)
	which, delta := in.byte(), uint32(int32(int8(in.byte())))
	if r == nil {
		return nil
	}
	if which&1 == 0 {
		r.prod += delta
		r.r.Producer().Store(r.prod)
	} else {
		r.r.Consumer().Add(delta)
	}
	return nil
}

// doorbell marks a doorbell slot (one of its QPs', the victim's, or an
// edge value: slot 200 stands for every bit of the page) and signals the
// doorbell eventfd a few times.
func (s *fuzzSession) doorbell(in *fuzzInput) error {
	victim := append(slices.Clone(s.fz.victim.slots), shm.MaxSlots-1, 1<<31)
	slot := pick(in, s.slots, victim, fuzzEdges)
	signals := int(in.byte() % 16)
	if slot == 200 {
		page := s.page.Bytes()
		for i := 64; i < len(page); i++ {
			page[i] = 0xff
		}
	}
	s.db.Mark(slot)
	for range signals {
		shm.Signal(s.bell)
	}
	return nil
}

// garbage sends bytes from the input as a line, which may break the
// protocol (the daemon then ends the session) or be a request: not a dial.
func (s *fuzzSession) garbage(in *fuzzInput) error {
	line := bytes.ReplaceAll(in.bytes(int(in.byte())), []byte("\n"), []byte(" "))
	var m attachproto.Msg
	if json.Unmarshal(line, &m) == nil && m.Op == attachproto.OpDial {
		return nil
	}
	s.c.Send(line, nil)
	return nil
}

// pickRing returns a ring of the attacker chosen by the input (a send
// ring with send), or nil if it has none.
func (s *fuzzSession) pickRing(in *fuzzInput, send bool) *fuzzRing {
	b := int(in.byte())
	var rs []*fuzzRing
	for i := range s.rings {
		if !send || s.rings[i].send {
			rs = append(rs, &s.rings[i])
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return rs[b%len(rs)]
}

// pick returns, as the input's byte b says, one of own (b%3 == 0), one of
// aimed (1), or an edge value (2, or an empty set).
func pick[T uint32 | uint64](in *fuzzInput, own, aimed, edge []T) T {
	b := in.byte()
	set := edge
	if b%3 == 0 && len(own) > 0 {
		set = own
	} else if b%3 == 1 && len(aimed) > 0 {
		set = aimed
	}
	return set[int(b/3)%len(set)]
}

// fuzzEdges are the edge values of handles, QPNs, keys and slots.
var fuzzEdges = []uint32{0, 1, 2, 200, 1 << 24, 0xffffffff}

func (s *fuzzSession) handle(in *fuzzInput) uint32 {
	return pick(in, s.handles, s.fz.victim.handles, fuzzEdges)
}

func (s *fuzzSession) qpn(in *fuzzInput) uint32 {
	return pick(in, s.qpns, []uint32{s.fz.victim.a.Num(), s.fz.victim.b.Num(), 1}, fuzzEdges)
}

func (s *fuzzSession) key(in *fuzzInput) uint32 {
	v := s.fz.victim
	return pick(in, s.keys, []uint32{v.secretMR.LKey(), v.secretMR.RKey(), v.mr.LKey()}, fuzzEdges)
}

func (s *fuzzSession) addr(in *fuzzInput) uint64 {
	var own []uint64
	for _, r := range s.regions {
		own = append(own, r.addr)
	}
	v := s.fz.victim
	return pick(in, own, []uint64{v.secretMR.Addr(), v.secretMR.Addr() + 1<<16 - 8, v.mr.Addr()}, []uint64{0, 8, 1 << 47, 1<<64 - 8})
}

// attr returns attributes of state st aimed from the input.
func (s *fuzzSession) attr(st verbs.State, in *fuzzInput) verbs.Attr {
	return verbs.Attr{
		State: st, AccessFlags: mr.Access(in.byte()), Remote: s.fz.dev.Addr(), PathMTU: 256 << (in.byte() % 6),
		DestQPN: s.qpn(in), RQPSN: wire.PSN(in.u32()), SQPSN: wire.PSN(in.u32()), Timeout: in.byte() % 16,
		RetryCnt: in.byte() % 8, RNRRetry: in.byte() % 8, MaxRdAtomic: in.byte(), MaxDestRdAtomic: in.byte(), QKey: in.u32(),
	}
}

func fuzzSize(in *fuzzInput) int {
	return []int{0, 1, 64, 4096, 65536, 1 << 20, -1, 1 << 40}[in.byte()%8]
}

func fuzzDepth(in *fuzzInput) int {
	return []int{0, 1, 4, 16, 256, -1, 1 << 22, 1 << 30}[in.byte()%8]
}

// fuzzInput reads a program's operands; past the end, zeros.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) done() bool { return len(in.b) == 0 }

func (in *fuzzInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *fuzzInput) u16() uint16 { return uint16(in.byte())<<8 | uint16(in.byte()) }
func (in *fuzzInput) u32() uint32 { return uint32(in.u16())<<16 | uint32(in.u16()) }

func (in *fuzzInput) bytes(n int) []byte {
	n = min(n, len(in.b))
	b := in.b[:n]
	in.b = in.b[n:]
	return b
}
