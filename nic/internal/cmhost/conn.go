package cmhost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The connection manager's provider objects: the listeners, requests and
// connections that Listen and Dial make, driving the engine (host.go).

// Listener is a listener of the engine.
type Listener struct {
	h  *Host
	l  *cmListener
	pd provider.PD       // of the QPs of the connections accepted
	qp provider.QPConfig // of those QPs
}

// Listen is provider.Device's Listen.
func (h *Host) Listen(port uint16, opts *provider.ListenOptions) (provider.Listener, uint16, error) {
	l, err := h.listen(opts.PortSpace, port, opts.Backlog, opts.Held, (*cm.Engine).Listen)
	if err != nil {
		return nil, 0, err
	}
	return &Listener{h: h, l: l, pd: opts.PD, qp: opts.QP}, l.port, nil
}

// listen registers a listener of the engine with listen (Listen or
// ListenUD), held (cm.Engine.Hold) if asked.
func (h *Host) listen(ps mad.PortSpace, port uint16, backlog int, held bool, listen func(*cm.Engine, mad.PortSpace, uint16, int) (*cm.Listener, error)) (*cmListener, error) {
	l := &cmListener{port: port, ready: make(chan struct{}, 1), closed: make(chan struct{})}
	var err error
	h.run(func(e *cm.Engine, _ qp.Time, _ *cm.Output) {
		if l.engine, err = listen(e, ps, port, cmp.Or(backlog, provider.CMDefaultBacklog)); err == nil {
			l.engine.Context = l
			if held {
				e.Hold(l.engine)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("softnic: listen: %w", err)
	}
	l.port = l.engine.Port() // port 0 asked for one
	h.log.Debug("cm: listening", slog.Any("port", l.port), slog.Any("port space", ps), slog.Bool("ud", l.engine.UD()))
	return l, nil
}

func (el *Listener) AcceptRequest(ctx context.Context) (provider.Request, error) {
	for {
		if provider.IsClosed(el.l.closed) {
			return nil, provider.ListenerClosed(el.l.port)
		}
		if id := el.h.nextRequest(el.l); id != nil {
			return &Request{h: el.h, id: id, l: el, psn: el.h.randomPSN()}, nil
		}
		select {
		case <-el.l.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-el.l.closed:
			return nil, provider.ListenerClosed(el.l.port)
		case <-el.h.closing:
			return nil, cm.ErrClosed
		}
	}
}

func (el *Listener) Open(backlog int) error {
	if provider.IsClosed(el.l.closed) {
		return provider.ListenerClosed(el.l.port)
	}
	el.h.run(func(e *cm.Engine, _ qp.Time, _ *cm.Output) {
		e.Open(el.l.engine, cmp.Or(backlog, provider.CMDefaultBacklog))
	})
	return nil
}

func (el *Listener) Close() error {
	el.h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Unlisten(now, el.l.engine, out) })
	return nil
}

// Request is a request the engine received for the listener l.
type Request struct {
	h   *Host
	id  *cmID
	l   *Listener
	psn wire.PSN // the REP's Starting PSN, chosen before Params tells it
}

func (er *Request) Remote() netip.AddrPort { return er.id.peer }
func (er *Request) PrivateData() []byte {
	if r := er.id.comm.SIDRREQ(); r != nil {
		return r.PrivateData[mad.CMAHeaderSize:]
	}
	return er.id.req.PrivateData[mad.CMAHeaderSize:]
}

func (er *Request) Accept(opts *provider.AcceptOptions) (provider.Connection, error) {
	return er.AcceptWith(opts, er.l.qp)
}

func (er *Request) Reject(private []byte) error {
	var err error
	er.h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		err = e.Reject(now, er.id.comm, mad.RejectConsumer, private, out)
	})
	if err == nil {
		er.h.log.Debug("cm: rejected", slog.Any("peer", er.id.peer), slog.Any("port", er.id.port))
	}
	return err
}

// AcceptWith accepts the request with a QP made with cfg: Accept with the
// listener's, a daemon with its own for an attached process
// (hooks.AcceptWith).
func (er *Request) AcceptWith(opts *provider.AcceptOptions, cfg provider.QPConfig) (provider.Connection, error) {
	h := er.h
	id := er.id
	req := id.req
	if req == nil {
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: a service ID resolution is answered with AcceptUD: %w", id.peer, mr.ErrInvalid)
	}
	if len(opts.PrivateData) > mad.REPPrivateDataSize {
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: %d bytes of private data, a REP carries %d: %w",
			id.peer, len(opts.PrivateData), mad.REPPrivateDataSize, mr.ErrInvalid)
	}
	if opts.RNRRetryCount > 7 {
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: RNR retry count %d > 7: %w", id.peer, opts.RNRRetryCount, mr.ErrInvalid)
	}
	if opts.SelfConnect && opts.UseQP == nil {
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: a QP its owner connects is the caller's (UseQP): %w", id.peer, mr.ErrInvalid)
	}
	rr, depth, rnr, params := er.terms(opts)

	var eq QP
	var err error
	if opts.UseQP != nil {
		eq, err = h.connQP(opts.UseQP, opts.SelfConnect)
	} else {
		eq, err = h.createConnQP(er.l.pd, cfg)
	}
	if err != nil {
		er.Abandon(mad.RejectNoQP)
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: %w", id.peer, err)
	}
	// A failed accept destroys the QP it made, and leaves the caller's in
	// the error state.
	drop := func() { eq.Destroy() }
	if opts.UseQP != nil {
		drop = eq.Halt
	}
	if !opts.SelfConnect {
		err = provider.Connect(eq, h.dev.MTU(), params.Remote, params.RemoteQPN, &params.Options)
	}
	if err != nil {
		drop()
		er.Abandon(mad.RejectConsumer)
		return provider.Connection{}, fmt.Errorf("softnic: accept %v: %w", id.peer, err)
	}
	// The first request the QP takes before the RTU establishes the
	// connection too (see cm.Engine.CommEstablished).
	eq.OnFirstRequest(func() { h.run(func(e *cm.Engine, _ qp.Time, out *cm.Output) { e.CommEstablished(id.comm, out) }) })
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		err = e.Accept(now, id.comm, &cm.AcceptParams{
			QPN: eq.Num(), PSN: er.psn, SRQ: cfg.SRQ != nil, Private: opts.PrivateData,
			ResponderResources: rr, InitiatorDepth: depth, RNRRetryCount: rnr,
		}, out)
		if err == nil {
			id.qp = eq
		}
	})
	if err == nil {
		select {
		case res := <-id.result:
			err = res.err
		case <-h.closing:
			err = cm.ErrClosed
		}
	}
	eq.OnFirstRequest(nil)
	if err == cm.ErrClosed {
		err = fmt.Errorf("softnic: accept %v: %w", id.peer, cm.ErrClosed)
	}
	if err != nil {
		drop()
		return provider.Connection{}, err
	}
	h.log.Debug("cm: accepted", slog.Any("peer", id.peer), slog.Any("port", id.port),
		slog.Any("qpn", eq.Num()), slog.Any("remote_qpn", req.LocalQPN))
	return h.newConn(id, eq, er.PrivateData(), opts.UseQP == nil), nil
}

// Params is what the QP accepting the request with the default options
// is connected with.
func (er *Request) Params() *provider.ConnParams {
	if er.id.req == nil {
		return nil
	}
	_, _, _, p := er.terms(&provider.AcceptOptions{})
	return &p
}

// terms are what accepting the request with opts negotiates: the REP's
// responder resources, initiator depth and RNR retry count, and what the
// accepting QP is connected with. The REQ's Starting PSN is the one this
// side sends from, the REP's the one the dialer sends from, as Linux's CM
// has them (cm_req_handler makes the REQ's its sq_psn).
func (er *Request) terms(opts *provider.AcceptOptions) (rr, depth, rnr uint8, p provider.ConnParams) {
	req := er.id.req
	rr = min(cmp.Or(opts.ResponderResources, min(provider.CMDefaultRdAtomic, req.InitiatorDepth)), qp.MaxRdAtomicLimit)
	depth = min(cmp.Or(opts.InitiatorDepth, provider.CMDefaultRdAtomic), req.ResponderResources)
	rnr = cmp.Or(opts.RNRRetryCount, provider.CMDefaultRetry)
	p = provider.ConnParams{Remote: er.id.peer, RemoteQPN: req.LocalQPN, Options: provider.ConnectOptions{
		LocalPSN: req.StartingPSN, RemotePSN: er.psn, MTU: req.PathMTU.Bytes(), Access: cmAccess(rr),
		Timeout: cmp.Or(opts.Timeout, min(req.PrimaryPath.LocalACKTimeout, cm.MaxHonouredTimeout)), RetryCnt: req.RetryCount, RNRRetry: req.RNRRetryCount,
		MinRNRTimer: provider.CMMinRNRTimer, MaxRdAtomic: depth, MaxDestRdAtomic: rr,
		TrafficClass: req.PrimaryPath.TrafficClass,
	}}
	return rr, depth, rnr, p
}

// connQP checks that q, a QP the caller brings to a connection, can make
// one: an RC QP of this device in RESET or INIT, or in any state if its
// owner connects it (self), as rping -q has it in RTS before it accepts.
func (h *Host) connQP(q provider.QP, self bool) (QP, error) {
	eq, ok := h.dev.OwnQP(q)
	if !ok || self && q.Type() != verbs.RC {
		return nil, fmt.Errorf("a connection's QP must be an RC QP of its device: %w", mr.ErrInvalid)
	}
	if self {
		return eq, nil
	}
	return eq, provider.CheckConnQP(q)
}

// Abandon rejects the request after a local failure (a daemon's too,
// hooks.Abandon).
func (er *Request) Abandon(reason mad.RejectReason) {
	er.h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Reject(now, er.id.comm, reason, nil, out) })
}

// Dial connects with a QP of opts.PD, or opts.UseQP, both of this device
// (nic's Dial checked them): provider.Device's Dial.
func (h *Host) Dial(ctx context.Context, remote netip.AddrPort, port uint16, opts *provider.DialOptions) (provider.Connection, error) {
	var q QP
	var err error
	if opts.UseQP != nil {
		q, _ = h.dev.OwnQP(opts.UseQP)
	} else if q, err = h.createConnQP(opts.PD, opts.QP); err != nil {
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	c, err := h.dialOnce(ctx, q, remote, port, opts)
	for busy := 0; err != nil; busy++ {
		var rej *cm.RejectError
		if !errors.As(err, &rej) {
			break
		}
		if rej.Reason == mad.RejectInvalidMTU && len(rej.ARI) > 0 {
			mtu := wire.MTU(rej.ARI[0]).Bytes()
			if mtu == 0 || mtu >= opts.MTU {
				break
			}
			h.log.Debug("cm: peer takes a smaller MTU", slog.Any("peer", remote), slog.Int("mtu", mtu))
			opts.MTU = mtu
		} else if rej.Reason != mad.RejectNoResources || busy >= int(opts.CMRetries) || !cmBackoff(ctx, busy, opts.CMTimeout) {
			break
		}
		c, err = h.dialOnce(ctx, q, remote, port, opts)
	}
	if err != nil {
		switch st := q.Attr().State; {
		case opts.UseQP == nil:
			q.Destroy()
		case st != verbs.Reset && st != verbs.Init:
			// The caller's QP, connected before the handshake failed.
			// One the handshake never reached (a REJ, no answer) stays
			// as it was, for the caller to try again.
			q.Halt()
		}
		return provider.Connection{}, err
	}
	return c, nil
}

// dialOnce makes one connection attempt with the QP q, still in RESET.
func (h *Host) dialOnce(ctx context.Context, q QP, remote netip.AddrPort, port uint16, o *provider.DialOptions) (provider.Connection, error) {
	mtu, _ := wire.MTUFromBytes(o.MTU)
	psn := h.randomPSN()
	p := cm.DialParams{
		Peer: remote, Src: h.dev.SourceFor(remote).Addr().Unmap(), Port: port, QPN: q.Num(), PSN: psn,
		MTU: mtu, SRQ: o.QP.SRQ != nil, Private: o.PrivateData,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: o.RetryCount, RNRRetryCount: o.RNRRetryCount,
		ACKTimeout: o.Timeout, CMTimeout: o.CMTimeout, CMRetries: o.CMRetries, PortSpace: o.PortSpace,
		TrafficClass: o.TrafficClass,
	}
	var id *cmID
	var err error
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		var comm *cm.ID
		if comm, err = e.Connect(now, &p, out); err == nil {
			id = newCMID(comm)
			id.qp = q
		}
	})
	if err != nil {
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	var res cmResult
	select {
	case res = <-id.result:
	case <-ctx.Done():
		h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) { e.Abort(now, id.comm, out) })
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, ctx.Err())
	case <-h.closing:
		res.err = cm.ErrClosed
	}
	if res.err == cm.ErrClosed {
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, cm.ErrClosed)
	}
	if res.err != nil {
		return provider.Connection{}, res.err
	}
	rep := res.rep
	rr := min(o.ResponderResources, rep.InitiatorDepth)
	// The dialer sends from the REP's Starting PSN and expects its own
	// REQ's (see Accept).
	params := provider.ConnParams{Remote: remote, RemoteQPN: rep.LocalQPN, Options: provider.ConnectOptions{
		LocalPSN: rep.StartingPSN, RemotePSN: psn, MTU: o.MTU, Access: cmAccess(rr),
		Timeout: o.Timeout, RetryCnt: o.RetryCount, RNRRetry: rep.RNRRetryCount, MinRNRTimer: provider.CMMinRNRTimer,
		MaxRdAtomic: min(o.InitiatorDepth, rep.ResponderResources), MaxDestRdAtomic: rr, TrafficClass: o.TrafficClass,
	}}
	if o.SelfConnect {
		params.Options.SetDefaults(h.dev.MTU())
		c := h.newConn(id, q, rep.PrivateData[:], false)
		c.Params = &params
		return c, nil
	}
	err = provider.Connect(q, h.dev.MTU(), remote, rep.LocalQPN, &params.Options)
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		if err != nil {
			e.Abort(now, id.comm, out)
			return
		}
		err = e.Establish(id.comm, out)
	})
	if err != nil {
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	h.log.Debug("cm: connected", slog.Any("peer", remote), slog.Any("port", port),
		slog.Any("qpn", q.Num()), slog.Any("remote_qpn", rep.LocalQPN), slog.Int("mtu", o.MTU))
	return h.newConn(id, q, rep.PrivateData[:], o.UseQP == nil), nil
}

// createConnQP creates the RC QP of a connection in pd.
func (h *Host) createConnQP(pd provider.PD, cfg provider.QPConfig) (QP, error) {
	if cfg.Type != 0 && cfg.Type != verbs.RC {
		return nil, fmt.Errorf("the connection manager connects RC QPs, not %s: %w", cfg.Type, mr.ErrInvalid)
	}
	cfg.Type = verbs.RC
	return h.dev.CreateQP(pd, cfg, 0)
}

// Conn is a connection of the engine, with its QP; ownQP says the QP was
// made for it, and Disconnect destroys it.
type Conn struct {
	h     *Host
	id    *cmID
	qp    QP
	ownQP bool
}

// newConn returns an established connection, and ends it when its QP
// fails.
func (h *Host) newConn(id *cmID, q QP, private []byte, ownQP bool) provider.Connection {
	q.OnError(func(cause verbs.WCStatus) { h.qpFailed(id, q.Num(), cause) })
	return provider.Connection{QP: q, Remote: id.peer, Private: slices.Clone(private),
		Conn: &Conn{h: h, id: id, qp: q, ownQP: ownQP}}
}

func (ec *Conn) Done() <-chan struct{} { return ec.id.done }

// Establish sends the RTU of a Dial with SelfConnect, whose caller has
// connected its QP.
func (ec *Conn) Establish() error {
	var err error
	ec.h.run(func(e *cm.Engine, _ qp.Time, out *cm.Output) { err = e.Establish(ec.id.comm, out) })
	return err
}

func (ec *Conn) Err() error {
	ec.h.mu.Lock()
	defer ec.h.mu.Unlock()
	return ec.id.err
}

func (ec *Conn) Disconnect() {
	h, id := ec.h, ec.id
	ec.qp.Halt()
	var wait bool
	h.run(func(e *cm.Engine, now qp.Time, out *cm.Output) {
		if id.comm.State() == cm.RepRcvd {
			// A Dial with SelfConnect closed before its Establish:
			// the REP is refused (REJ), and the acceptor's accept fails.
			e.Abort(now, id.comm, out)
			e.End(id.comm, nil, out)
			return
		}
		ended := id.ended
		wait = e.Disconnect(now, id.comm, out) && !ended
	})
	if wait {
		select {
		case <-id.settled:
		case <-h.closing:
		}
	}
	if ec.ownQP {
		ec.qp.Destroy()
	}
	h.log.Debug("cm: disconnected", slog.Any("peer", id.peer), slog.Any("qpn", ec.qp.Num()))
}

// qpFailed ends id's connection because its QP entered the error state.
// It runs under the QP's lock.
func (h *Host) qpFailed(id *cmID, qpn uint32, cause verbs.WCStatus) {
	err := &cm.QPError{QPN: qpn, Status: cause}
	h.run(func(e *cm.Engine, _ qp.Time, out *cm.Output) { e.End(id.comm, err, out) })
	h.log.Debug("cm: connection's QP failed", slog.Any("peer", id.peer), slog.Any("error", err))
}

// cmBackoff waits before the try after the busy-th REJ "no resources"
// (the peer holds as many requests as it takes, CMLimits): a random time,
// doubling with each try, from 10–20 ms up to the CM response timeout. It
// reports false if ctx ended first.
func cmBackoff(ctx context.Context, busy int, cmTimeout uint8) bool {
	d := min(time.Duration(10+rand.IntN(10))*time.Millisecond<<min(busy, 16), cm.Duration(cmTimeout))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// cmAccess is the access a connected QP grants its peer, as Linux's CM
// sets it: remote write, and remote read and atomics if it takes any
// READ or atomic at all.
func cmAccess(responderResources uint8) mr.Access {
	if responderResources == 0 {
		return mr.RemoteWrite
	}
	return mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
}
