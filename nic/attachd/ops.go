package attachd

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/wire/mad"
)

// The operations of the attach protocol, as the daemon carries them out
// for a process (see sessionOps). Each returns its result, the
// descriptors to send with it (closed once sent) and an error.

func (s *session) allocPD(_ context.Context, _ json.RawMessage, _ []int) (any, []int, error) {
	pd, err := s.dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	h, err := s.add(pd)
	if err != nil {
		pd.Dealloc()
		return nil, nil, err
	}
	return attachproto.PDResult{H: h, PD: pd.Handle()}, nil, nil
}

func (s *session) deallocPD(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	return destroyObject(s, raw, (*nic.PD).Dealloc)
}

// allocMR maps the memfd the process sent as an arena of the device's
// table and registers it.
func (s *session) allocMR(_ context.Context, raw json.RawMessage, fds []int) (any, []int, error) {
	a, err := args[attachproto.AllocMRArgs](raw)
	if err != nil {
		shm.CloseFDs(fds)
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		shm.CloseFDs(fds)
		return nil, nil, err
	}
	if a.Size <= 0 || a.Size > 1<<46 {
		shm.CloseFDs(fds)
		return nil, nil, fmt.Errorf("memory region of %d bytes: %w", a.Size, nic.ErrInvalid)
	}
	bill := mappingBill(shm.RoundUp(a.Size))
	if err := s.acct.Charge(bill); err != nil {
		shm.CloseFDs(fds)
		return nil, nil, err
	}
	m, err := shm.Map(fds[0], a.Size)
	if err != nil {
		s.acct.Release(bill)
		return nil, nil, fmt.Errorf("memory region: %v: %w", err, nic.ErrFault)
	}
	return s.adopt(pd, m, bill, a.Size, 0, a.Size, a.Access, nil)
}

// adopt makes m, a process's memory mapped and charged with bill, an
// arena of the device's table, and registers n bytes at off of it (size
// bytes the process asked for) in pd at *iova (see register).
func (s *session) adopt(pd *nic.PD, m *shm.Mapping, bill quota.Bill, size, off, n int, access mr.Access, iova *uint64) (any, []int, error) {
	arena, err := s.dev.Memory().AdoptArena(pd.Handle(), m.Bytes())
	if err != nil {
		m.Close()
		s.acct.Release(bill)
		return nil, nil, err
	}
	m.Release()
	buf := &hostedBuf{arena: arena, size: size, bill: bill}
	res, err := s.register(pd, buf, off, n, access, iova)
	if err != nil {
		s.dev.Memory().FreeArena(arena)
		s.acct.Release(bill)
	}
	return res, nil, err
}

// regMR registers more memory of a region the process allocated.
func (s *session) regMR(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.RegMRArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	owner, err := lookup[*hostedMR](s, a.Buf)
	if err != nil {
		return nil, nil, err
	}
	if a.Off < 0 || a.Len <= 0 || a.Off > owner.buf.size || a.Len > owner.buf.size-a.Off {
		return nil, nil, fmt.Errorf("%d bytes at offset %d of a %d-byte buffer: %w", a.Len, a.Off, owner.buf.size, nic.ErrFault)
	}
	res, err := s.register(pd, owner.buf, a.Off, a.Len, a.Access, nil)
	return res, nil, err
}

// regShared maps the pages of the memfd the process sent that hold the
// region, and registers the region at the address the process maps it at.
func (s *session) regShared(_ context.Context, raw json.RawMessage, fds []int) (any, []int, error) {
	a, err := args[attachproto.RegSharedArgs](raw)
	if err != nil {
		shm.CloseFDs(fds)
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		shm.CloseFDs(fds)
		return nil, nil, err
	}
	m, skip, err := hooks.MapShared(fds[0], a.Off, a.Len)
	if err != nil {
		return nil, nil, err
	}
	bill := mappingBill(len(m.Bytes()))
	if err := s.acct.Charge(bill); err != nil {
		m.Close()
		return nil, nil, err
	}
	return s.adopt(pd, m, bill, len(m.Bytes()), skip, a.Len, a.Access, &a.IOVA)
}

// register registers n bytes at offset off of buf in pd, at address
// *iova, or at the memory's own address if iova is nil.
func (s *session) register(pd *nic.PD, buf *hostedBuf, off, n int, access mr.Access, iova *uint64) (any, error) {
	mem := buf.arena.Bytes()[off : off+n]
	var r *mr.Region
	var err error
	if iova != nil {
		r, err = s.dev.Memory().RegisterIOVA(pd.Handle(), mem, *iova, access)
	} else {
		r, err = s.dev.Memory().Register(pd.Handle(), mem, access)
	}
	if err != nil {
		return nil, err
	}
	hm := &hostedMR{r: r, buf: buf}
	h, err := s.add(hm)
	if err != nil {
		// buf stays the caller's to free: a first region's alloc_mr frees
		// it, and charged it, alone.
		s.dev.Memory().Deregister(r)
		return nil, err
	}
	s.mu.Lock()
	buf.refs++
	s.mu.Unlock()
	return attachproto.MRResult{H: h, LKey: r.LKey(), RKey: r.RKey(), Addr: r.Addr()}, nil
}

func (s *session) deregMR(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	return destroyObject(s, raw, s.deregister)
}

// createCQ answers with the CQ's ring and the epoll fd that waits for its
// wakeups.
func (s *session) createCQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.CreateCQArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.newHostedCQ(a.Depth)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.add(c)
	if err != nil {
		c.close()
		return nil, nil, err
	}
	return attachproto.CQResult{H: h, Depth: a.Depth}, []int{c.TakeFD(), c.TakeWaitFD()}, nil
}

func (s *session) createSRQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.CreateSRQArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.newHostedSRQ(pd, a.Depth, a.MaxSGE)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.add(r)
	if err != nil {
		r.close()
		return nil, nil, err
	}
	return attachproto.SRQResult{H: h, Depth: a.Depth, MaxSGE: a.MaxSGE}, []int{r.TakeFD()}, nil
}

// createQP answers with the QP's rings.
func (s *session) createQP(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.CreateQPArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	h, cfg, err := s.newHostedQP(pd, a.Config)
	if err != nil {
		return nil, nil, err
	}
	if h.pub, err = pd.CreateQP(cfg); err != nil {
		h.close()
		return nil, nil, err
	}
	handle, err := s.add(h)
	if err != nil {
		h.pub.Destroy()
		h.close()
		return nil, nil, err
	}
	return h.result(handle), h.TakeFDs(), nil
}

func (s *session) modifyQP(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ModifyQPArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	h, err := lookup[*hostedQP](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	if err := h.pub.Modify(&a.Attr, a.Mask); err != nil {
		return nil, nil, err
	}
	return attachproto.QueryQPResult{Attr: h.pub.Attr(), Status: h.pub.Status()}, nil, nil
}

// attachMcast attaches a UD QP of the process to a multicast group
// (attach_mcast); the device checks the group and the QP, and detaches
// the QP when it is destroyed.
func (s *session) attachMcast(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	q, group, err := s.mcastArgs(raw)
	if err != nil {
		return nil, nil, err
	}
	return nil, nil, q.AttachMulticast(group)
}

// detachMcast detaches a QP of the process from a group (detach_mcast).
func (s *session) detachMcast(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	q, group, err := s.mcastArgs(raw)
	if err != nil {
		return nil, nil, err
	}
	return nil, nil, q.DetachMulticast(group)
}

// mcastArgs reads the arguments of attach_mcast and detach_mcast.
func (s *session) mcastArgs(raw json.RawMessage) (*nic.QP, netip.Addr, error) {
	a, err := args[attachproto.McastArgs](raw)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	h, err := lookup[*hostedQP](s, a.H)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return h.pub, a.Group, nil
}

func (s *session) queryQP(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	h, _, err := byHandle[*hostedQP](s, raw)
	if err != nil {
		return nil, nil, err
	}
	return attachproto.QueryQPResult{Attr: h.pub.Attr(), Status: h.pub.Status()}, nil, nil
}

// destroyQP destroys a QP of the process. Its handle goes first: the
// completions it flushes into its CQs no longer retire slots of its own
// rings, which close after it.
func (s *session) destroyQP(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	h, hnd, err := byHandle[*hostedQP](s, raw)
	if err != nil {
		return nil, nil, err
	}
	s.remove(hnd)
	h.takePosted()
	h.pub.Destroy()
	h.close()
	return nil, nil, nil
}

// takePosted takes the work requests still in the QP's rings into the QP,
// so that they complete with WR_FLUSH_ERR when it is destroyed, as an
// embedded QP's do: a receive waits in its ring until a packet comes (or
// the doorbell goroutine passes), and a send until the doorbell is served.
func (h *hostedQP) takePosted() {
	h.q.Lock()
	defer h.q.Unlock()
	if !h.q.DestroyedLocked() {
		h.PullRecvLocked()
		h.PullSendLocked()
	}
}

// allocMW allocates a memory window in a PD of the process.
func (s *session) allocMW(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.AllocMWArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	w, err := pd.AllocMW(a.Type)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.add(w)
	if err != nil {
		w.Dealloc()
		return nil, nil, err
	}
	return attachproto.MWResult{H: h, RKey: w.RKey()}, nil, nil
}

func (s *session) deallocMW(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	return destroyObject(s, raw, (*nic.MW).Dealloc)
}

// destroyCQ destroys a CQ of the process, unless one of its QPs uses it.
func (s *session) destroyCQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	return destroyObject(s, raw, func(c *hostedCQ) error {
		if err := c.cq.Destroy(); err != nil {
			return err
		}
		c.close()
		return nil
	})
}

// resizeCQ resizes a CQ of the process, and answers with its new ring.
func (s *session) resizeCQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ResizeCQArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	c, err := lookup[*hostedCQ](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	if err := c.resize(a.Depth); err != nil {
		return nil, nil, err
	}
	return nil, []int{c.TakeFD()}, nil
}

// modifySRQ changes attributes of an SRQ of the process, and answers with
// its new ring if it was resized.
func (s *session) modifySRQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ModifySRQArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := lookup[*hostedSRQ](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	resized, prod, err := r.modify(&a.Attr, a.Mask)
	if err != nil || !resized {
		return attachproto.ModifySRQResult{}, nil, err
	}
	return attachproto.ModifySRQResult{Resized: true, Prod: prod}, []int{r.TakeFD()}, nil
}

func (s *session) querySRQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	r, _, err := byHandle[*hostedSRQ](s, raw)
	if err != nil {
		return nil, nil, err
	}
	return r.qsrq.Attr(), nil, nil
}

// destroySRQ destroys an SRQ of the process, unless one of its QPs uses
// it.
func (s *session) destroySRQ(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	return destroyObject(s, raw, func(r *hostedSRQ) error {
		if err := r.srq.Destroy(); err != nil {
			return err
		}
		r.close()
		return nil
	})
}

// destroyObject destroys the object of type T that a request names, and
// forgets its handle unless destroy fails.
func destroyObject[T any](s *session, raw json.RawMessage, destroy func(T) error) (any, []int, error) {
	obj, hnd, err := byHandle[T](s, raw)
	if err != nil {
		return nil, nil, err
	}
	if err := destroy(obj); err != nil {
		return nil, nil, err
	}
	s.remove(hnd)
	return nil, nil, nil
}

func (s *session) counters(context.Context, json.RawMessage, []int) (any, []int, error) {
	return s.dev.Counters(), nil, nil
}

// qpConfig resolves the CQs and SRQ of a listener's QP configuration.
func (s *session) qpConfig(a attachproto.QPConfig) (nic.QPConfig, error) {
	a = a.WithDefaults()
	scq, err := lookup[*hostedCQ](s, a.SendCQ)
	if err != nil {
		return nic.QPConfig{}, fmt.Errorf("send CQ: %w", err)
	}
	rcq, err := lookup[*hostedCQ](s, a.RecvCQ)
	if err != nil {
		return nic.QPConfig{}, fmt.Errorf("receive CQ: %w", err)
	}
	cfg := nic.QPConfig{Type: a.Type, SendCQ: scq.cq, RecvCQ: rcq.cq, MaxSendWR: a.MaxSendWR, MaxRecvWR: a.MaxRecvWR,
		MaxSendSGE: a.MaxSendSGE, MaxRecvSGE: a.MaxRecvSGE, MaxInline: a.MaxInline, SignalAll: a.SignalAll}
	if a.SRQ != 0 {
		srq, err := lookup[*hostedSRQ](s, a.SRQ)
		if err != nil {
			return nic.QPConfig{}, fmt.Errorf("SRQ: %w", err)
		}
		cfg.SRQ = srq.srq
	}
	return cfg, nil
}

func (s *session) listen(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.ListenArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := s.qpConfig(a.QP)
	if err != nil {
		return nil, nil, err
	}
	return s.hostListener(a.Backlog, &hostedListener{pd: pd, cfg: a.QP, held: a.Held}, func(backlog int) (*nic.Listener, error) {
		return s.dev.Listen(a.Port, nic.ListenOptions{PD: pd, QP: cfg, Backlog: backlog, PortSpace: mad.PortSpace(a.PortSpace), Held: a.Held})
	})
}

// hostListener makes hl's listener with listen, its backlog charged, and
// hands it to the process.
func (s *session) hostListener(backlog int, hl *hostedListener, listen func(backlog int) (*nic.Listener, error)) (any, []int, error) {
	backlog, hl.bill = attachBacklog(backlog)
	if err := s.acct.Charge(hl.bill); err != nil {
		return nil, nil, err
	}
	l, err := listen(backlog)
	if err != nil {
		s.acct.Release(hl.bill)
		return nil, nil, err
	}
	hl.l = l
	h, err := s.add(hl)
	if err != nil {
		hl.close(s)
		return nil, nil, err
	}
	if hl.held {
		s.log.Debug("process holds an rdma_cm port, not listening yet", slog.Int("port", int(l.Port())), slog.Bool("udp", hl.ud))
	} else {
		hl.logListening(s)
	}
	return attachproto.ListenResult{H: h, Port: l.Port()}, nil, nil
}

// logListening says that the process listens on l's port. It is the line
// an operator (or a test starting the client of an rdma_cm server) reads
// to know that connections to the port are taken now.
func (l *hostedListener) logListening(s *session) {
	s.log.Info("process listens for rdma_cm connections", slog.Int("port", int(l.l.Port())), slog.Bool("udp", l.ud))
}

// attachBacklog returns the backlog a process's listener gets when it asks
// for backlog, and its bill. A backlog beyond maxAttachBacklog is cut to
// it, as listen(2) cuts one beyond net.core.somaxconn; Listen refuses one
// below 0.
func attachBacklog(backlog int) (int, quota.Bill) {
	backlog = min(cmp.Or(backlog, defaultBacklog), maxAttachBacklog)
	return backlog, quota.Of(quota.Heap, int64(max(backlog, 0))*backlogHeap)
}

// openListener has a held listener of the process take requests, its
// backlog charged anew.
func (s *session) openListener(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.OpenListenerArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	l, err := lookup[*hostedListener](s, a.H)
	if err != nil {
		return nil, nil, err
	}
	backlog, bill := attachBacklog(a.Backlog)
	if err := s.acct.Charge(bill); err != nil {
		return nil, nil, err
	}
	if err := l.l.Open(backlog); err != nil {
		s.acct.Release(bill)
		return nil, nil, err
	}
	s.acct.Release(l.bill)
	l.bill = bill
	if l.held {
		l.held = false
		l.logListening(s)
	}
	return nil, nil, nil
}

// The backlog of an attached process's listener: nic.ListenOptions's
// default unless it asks for another, at most as long as Linux's default
// net.core.somaxconn, and charged for what a request waiting in it holds
// in the daemon.
const (
	defaultBacklog   = 128
	maxAttachBacklog = 4096
	backlogHeap      = 1 << 10
)

func (s *session) closeListener(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	l, hnd, err := byHandle[*hostedListener](s, raw)
	if err != nil {
		return nil, nil, err
	}
	s.remove(hnd)
	return nil, nil, l.close(s)
}

func (s *session) acceptRequest(ctx context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	l, _, err := byHandle[*hostedListener](s, raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := l.l.AcceptRequest(ctx)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.add(&hostedRequest{r: r, l: l})
	if err != nil {
		r.Reject(nil)
		return nil, nil, err
	}
	return attachproto.RequestResult{H: h, Private: r.PrivateData(), Remote: r.RemoteAddr(), Params: r.Params()}, nil, nil
}

// accept accepts a request with a QP over new rings. The handshake goes on
// if the process detaches meanwhile; the connection is then closed at
// once.
func (s *session) accept(ctx context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.AcceptArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := lookup[*hostedRequest](s, a.Request)
	if err != nil {
		return nil, nil, err
	}
	if r.l.ud {
		return nil, nil, fmt.Errorf("request %d is a resolution, answered with accept_ud: %w", a.Request, nic.ErrInvalid)
	}
	s.remove(a.Request)
	h, cfg, err := s.connQP(r.l.pd, r.l.cfg, a.UseQP)
	if err != nil {
		abandon(r.r, mad.RejectNoQP)
		return nil, nil, err
	}
	opts := nic.AcceptOptions{PrivateData: a.PrivateData, ResponderResources: a.ResponderResources,
		InitiatorDepth: a.InitiatorDepth, RNRRetryCount: a.RNRRetryCount, Timeout: a.Timeout, SelfConnect: a.SelfConnect}
	if a.UseQP != 0 {
		opts.UseQP = h.pub
	}
	type outcome struct {
		c   *nic.Conn
		err error
	}
	done := make(chan outcome, 1)
	background(func() {
		c, err := acceptWith(r.r, opts, cfg)
		done <- outcome{c, err}
	})
	select {
	case o := <-done:
		if o.err != nil {
			s.dropConnQP(h, a.UseQP)
			return nil, nil, o.err
		}
		return s.hostConn(o.c, h, a.UseQP)
	case <-ctx.Done():
		background(func() {
			if o := <-done; o.err == nil {
				o.c.Close()
			}
			s.dropConnQP(h, a.UseQP)
		})
		return nil, nil, ctx.Err()
	}
}

// connQP returns the QP a connection is made with: the process's QP
// named use, which no other connection has, or else new rings with cfg.
func (s *session) connQP(pd *nic.PD, cfg attachproto.QPConfig, use uint32) (*hostedQP, nic.QPConfig, error) {
	if use == 0 {
		return s.newHostedQP(pd, cfg)
	}
	h, err := lookup[*hostedQP](s, use)
	if err != nil {
		return nil, nic.QPConfig{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.connecting || h.conn != nil {
		return nil, nic.QPConfig{}, fmt.Errorf("QP %#x has a connection already: %w", h.q.Num(), nic.ErrInvalid)
	}
	h.connecting = true
	return h, nic.QPConfig{}, nil
}

// dropConnQP undoes connQP after a connection failed: new rings are
// closed, the process's own QP is free for another connection.
func (s *session) dropConnQP(h *hostedQP, use uint32) {
	if use == 0 {
		h.close()
		return
	}
	s.mu.Lock()
	h.connecting = false
	s.mu.Unlock()
}

func (s *session) reject(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.RejectArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := lookup[*hostedRequest](s, a.Request)
	if err != nil {
		return nil, nil, err
	}
	s.remove(a.Request)
	return nil, nil, r.r.Reject(a.Private)
}

func (s *session) dial(ctx context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	a, err := args[attachproto.DialArgs](raw)
	if err != nil {
		return nil, nil, err
	}
	pd, err := lookup[*nic.PD](s, a.PD)
	if err != nil {
		return nil, nil, err
	}
	h, cfg, err := s.connQP(pd, a.QP, a.UseQP)
	if err != nil {
		return nil, nil, err
	}
	o := nic.DialOptions{
		PD: pd, QP: cfg, PrivateData: a.Private, ResponderResources: a.ResponderResources,
		InitiatorDepth: a.InitiatorDepth, RetryCount: a.RetryCount, RNRRetryCount: a.RNRRetryCount,
		MTU: a.MTU, Timeout: a.Timeout, CMRetries: a.CMRetries, CMTimeout: a.CMTimeout,
		PortSpace: mad.PortSpace(a.PortSpace), SelfConnect: a.SelfConnect, TrafficClass: a.TrafficClass,
	}
	if a.UseQP != 0 {
		o.UseQP = h.pub
	}
	c, err := s.dev.Dial(ctx, a.Remote, a.Port, o)
	if err != nil {
		s.dropConnQP(h, a.UseQP)
		return nil, nil, err
	}
	return s.hostConn(c, h, a.UseQP)
}

// hostConn hands an established connection to the process, and tells it
// when the connection ends. Its QP is new, or the process's QP whose
// handle is use: then no rings go with the answer.
func (s *session) hostConn(c *nic.Conn, h *hostedQP, use uint32) (any, []int, error) {
	s.mu.Lock()
	h.conn, h.connOwns, h.connecting = c, use == 0, false
	if use == 0 {
		h.pub = c.QP()
	}
	s.mu.Unlock()
	// fail closes the connection, and the QP unless it is the process's.
	fail := func(err error) (any, []int, error) {
		background(func() {
			c.Close()
			if use == 0 {
				h.close()
			}
		})
		return nil, nil, err
	}
	// The watcher's goroutine is billed with the QP, which outlives it.
	if err := s.acct.Charge(watchBill); err != nil {
		return fail(err)
	}
	h.bill = h.bill.Add(watchBill)
	qh := use
	if use == 0 {
		var err error
		if qh, err = s.add(h); err != nil {
			return fail(err)
		}
	}
	hc := &hostedConn{c: c, qp: h, own: use == 0, since: time.Now(), stop: make(chan struct{}), watched: make(chan struct{})}
	ch, err := s.add(hc)
	if err != nil {
		if use == 0 {
			s.remove(qh)
		}
		return fail(err)
	}
	res := attachproto.ConnResult{H: ch, QP: h.result(qh), Private: c.PrivateData(), Remote: c.RemoteAddr(), Params: c.Params()}
	var fds []int
	if use == 0 {
		fds = h.TakeFDs()
	}
	return hostedConnResult{res, func() { s.srv.wg.Go(func() { hc.watch(s, ch) }) }}, fds, nil
}

// hostedConnResult is the answer to dial and accept. Its connection's
// watcher starts once the process has the answer: a connection that ends
// at once must not tell the process of its end before the process knows
// of the connection.
type hostedConnResult struct {
	attachproto.ConnResult
	watch func()
}

func (r hostedConnResult) answered() { r.watch() }

// disconnect closes a connection (DREQ, then the DREP is waited for) and
// forgets its QP, which Close destroys (unless the process brought it:
// UseQP, then it stays the process's). If the process detaches meanwhile,
// the wait goes on in the background.
func (s *session) disconnect(ctx context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	c, hnd, err := byHandle[*hostedConn](s, raw)
	if err != nil {
		return nil, nil, err
	}
	s.remove(hnd)
	own := c.own
	if own {
		s.forget(c.qp)
	}
	c.qp.takePosted()
	close(c.stop)
	<-c.watched
	done := make(chan struct{})
	background(func() {
		c.c.Close()
		if own {
			c.qp.close()
		}
		close(done)
	})
	select {
	case <-done:
		return nil, nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// establish sends the RTU of a dial with SelfConnect, whose QP the
// process has connected.
func (s *session) establish(_ context.Context, raw json.RawMessage, _ []int) (any, []int, error) {
	c, _, err := byHandle[*hostedConn](s, raw)
	if err != nil {
		return nil, nil, err
	}
	return nil, nil, c.c.Establish()
}
