package nic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
)

// The connection manager of an attached device: the daemon's device makes
// the connections (its CM on its QP1) on behalf of the process, with QPs
// whose rings the process maps.

// attachedListener is a listener of the daemon's, named by handle h.
type attachedListener struct {
	a      *attachment
	h      uint32
	closed chan struct{} // closed by Close
}

func (a *attachment) listen(l *Listener, opts *ListenOptions) (listenerProvider, error) {
	port := l.port
	if err := a.checkQPConfig(opts.PD, &opts.QP); err != nil {
		return nil, fmt.Errorf("softnic: listen on port %d: %w", port, err)
	}
	var r attachproto.ListenResult
	args := attachproto.ListenArgs{Port: port, PD: daemonHandle(opts.PD.prov), QP: opts.QP.args(), Backlog: opts.Backlog}
	if _, err := a.call(context.Background(), attachproto.OpListen, args, nil, &r); err != nil {
		return nil, err
	}
	l.port = r.Port
	return &attachedListener{a: a, h: r.H, closed: make(chan struct{})}, nil
}

// acceptRequest asks the daemon for l's next request. A closed listener
// fails with ErrClosed, as an embedded one does, without asking: the
// daemon has forgotten its handle. A call that Close overtakes fails at
// the daemon with ErrClosed or, if the handle went first, ErrInvalid;
// either is ErrClosed here.
func (al *attachedListener) acceptRequest(ctx context.Context, l *Listener) (*Request, error) {
	if isClosed(al.closed) {
		return nil, l.errClosed()
	}
	var r attachproto.RequestResult
	if _, err := al.a.call(ctx, attachproto.OpAcceptRequest, attachproto.HandleArgs{H: al.h}, nil, &r); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case isClosed(al.closed):
			return nil, l.errClosed()
		}
		return nil, err
	}
	return &Request{l: l, peer: r.Remote, private: r.Private, prov: &attachedRequest{a: al.a, h: r.H}}, nil
}

// closeListener closes l at the daemon, once: closing it again returns nil
// as an embedded listener's Close does. So does closing it after the
// session ended, which closed it at the daemon.
func (al *attachedListener) close() error {
	a := al.a
	a.mu.Lock()
	if isClosed(al.closed) {
		a.mu.Unlock()
		return nil
	}
	close(al.closed)
	a.mu.Unlock()
	_, err := a.call(context.Background(), attachproto.OpCloseListener, attachproto.HandleArgs{H: al.h}, nil, nil)
	if err != nil && a.ended.Load() {
		return nil
	}
	return err
}

// attachedRequest is a request the daemon's listener received, named by
// handle h, and the process's answer once given: the connection accepted,
// or rejected. The daemon forgets an answered request; these give a second
// answer the embedded device's errors.
type attachedRequest struct {
	a        *attachment
	h        uint32
	answerMu sync.Mutex
	accepted *Conn
	rejected bool
}

func (ar *attachedRequest) accept(r *Request, opts AcceptOptions) (*Conn, error) {
	ar.answerMu.Lock()
	defer ar.answerMu.Unlock()
	if err := ar.answeredLocked(r.peer); err != nil {
		return nil, err
	}
	a := ar.a
	var res attachproto.ConnResult
	fds, err := a.call(context.Background(), attachproto.OpAccept, attachproto.AcceptArgs{
		Request: ar.h, PrivateData: opts.PrivateData, ResponderResources: opts.ResponderResources,
		InitiatorDepth: opts.InitiatorDepth, RNRRetryCount: opts.RNRRetryCount, UseQP: qpHandle(opts.UseQP),
	}, nil, &res)
	if err != nil {
		return nil, err
	}
	c, err := a.newConn(r.l.pd, &res, fds, opts.UseQP)
	ar.accepted = c
	return c, err
}

func (ar *attachedRequest) reject(r *Request, private []byte) error {
	ar.answerMu.Lock()
	defer ar.answerMu.Unlock()
	if err := ar.answeredLocked(r.peer); err != nil {
		return err
	}
	_, err := ar.a.call(context.Background(), attachproto.OpReject, attachproto.RejectArgs{Request: ar.h, Private: private}, nil, nil)
	ar.rejected = err == nil
	return err
}

// answeredLocked returns the error an embedded device gives a request
// from peer answered already, as the CM state it left: why the connection
// ended, or that it is established (or rejected), which is EINVAL.
func (r *attachedRequest) answeredLocked(peer netip.AddrPort) error {
	state := ""
	switch {
	case r.rejected:
		state = "rejected"
	case r.accepted == nil:
		return nil
	case r.accepted.Err() != nil:
		return r.accepted.Err()
	default:
		state = "ESTABLISHED"
		select {
		case <-r.accepted.Done():
			state = "closed"
		default:
		}
	}
	return fmt.Errorf("connection with %v is %s: %w", peer, state, ErrInvalid)
}

// dialMTU leaves the path MTU to the daemon, unless the options ask for
// one.
func (a *attachment) dialMTU(asked int, _ netip.AddrPort) int { return asked }

func (a *attachment) dial(ctx context.Context, _ *Device, remote netip.AddrPort, port uint16, o *DialOptions) (*Conn, error) {
	// A QP of the caller's is checked by Dial; the daemon checks it too.
	if err := a.checkQPConfig(o.PD, &o.QP); o.UseQP == nil && err != nil {
		return nil, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	var res attachproto.ConnResult
	fds, err := a.call(ctx, attachproto.OpDial, dialArgs(remote, port, o), nil, &res)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, ctx.Err())
		}
		return nil, err
	}
	return a.newConn(o.PD, &res, fds, o.UseQP)
}

// newConn wraps a connection the daemon made, with its QP: a new one, or
// use, the caller's, which the daemon has connected.
func (a *attachment) newConn(pd *PD, r *attachproto.ConnResult, fds []int, use *QP) (*Conn, error) {
	q, err := use, error(nil)
	if use != nil {
		shm.CloseFDs(fds)
		use.prov.(*attachedQP).cache(&attachproto.QueryQPResult{Attr: r.QP.Attr, Status: qp.Status{State: r.QP.Attr.State}})
	} else {
		q, err = a.newQP(pd, &r.QP, fds)
	}
	if err != nil {
		a.call(context.Background(), attachproto.OpDisconnect, attachproto.HandleArgs{H: r.H}, nil, nil)
		a.mu.Lock()
		delete(a.unknownEnds, r.H)
		a.mu.Unlock()
		return nil, err
	}
	ac := &attachedConn{a: a, h: r.H, closed: make(chan struct{})}
	c := &Conn{dev: a.d, qp: q, peer: r.Remote, private: r.Private, ownQP: use == nil, prov: ac}
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.unknownEnds[r.H]; ok {
		delete(a.unknownEnds, r.H)
		ac.endLocked(why)
	}
	if a.ended.Load() {
		ac.endLocked(ErrClosed)
	}
	a.conns[r.H] = ac
	return c, nil
}

// attachedConn is a connection the daemon's connection manager made,
// named by handle h; ended and why say whether and why it ended, under
// the attachment's lock.
type attachedConn struct {
	a      *attachment
	h      uint32
	closed chan struct{} // closed when it ends
	ended  bool
	why    error
}

func (c *attachedConn) done() <-chan struct{} { return c.closed }

func (c *attachedConn) err() error {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.why
}

// disconnect closes the connection at the daemon (DREQ, DREP waited for)
// and unmaps its QP's rings.
func (c *attachedConn) disconnect(pub *Conn) {
	a := c.a
	a.call(context.Background(), attachproto.OpDisconnect, attachproto.HandleArgs{H: c.h}, nil, nil)
	a.mu.Lock()
	c.endLocked(nil)
	delete(a.conns, c.h)
	a.mu.Unlock()
	if pub.ownQP {
		a.forget(pub.qp.prov.(*attachedQP))
	}
}

// connEnded handles the daemon's news that a connection ended.
func (a *attachment) connEnded(m *attachproto.Msg) {
	var ev attachproto.ConnEnded
	if json.Unmarshal(m.Args, &ev) != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.conns[ev.H]; c != nil {
		c.endLocked(m.Err())
	} else {
		a.unknownEnds[ev.H] = m.Err()
	}
}

// endLocked records why the connection ended, the first reason only, and
// closes its Done channel.
func (c *attachedConn) endLocked(err error) {
	if c.ended {
		return
	}
	c.ended, c.why = true, err
	close(c.closed)
}

// dialArgs describes a Dial's options to the daemon.
func dialArgs(remote netip.AddrPort, port uint16, o *DialOptions) attachproto.DialArgs {
	return attachproto.DialArgs{
		Remote: remote, Port: port, PD: daemonHandle(o.PD.prov), QP: o.QP.args(), Private: o.PrivateData,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: o.RetryCount, RNRRetryCount: o.RNRRetryCount, MTU: o.MTU,
		Timeout: o.Timeout, CMRetries: o.CMRetries, CMTimeout: o.CMTimeout, UseQP: qpHandle(o.UseQP),
	}
}
