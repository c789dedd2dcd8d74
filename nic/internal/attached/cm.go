package attached

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
)

// The connection manager of an attached device: the daemon's device makes
// the connections (its CM on its QP1) on behalf of the process, with QPs
// whose rings the process maps.

// attachedListener is a listener of the daemon's on port, named by handle
// h; the QPs of the connections it accepts are of the PD pd.
type attachedListener struct {
	a      *attachment
	h      uint32
	port   uint16
	pd     *attachedPD
	closed chan struct{} // closed by Close
}

// Listen listens with a PD of this device (nic's Listen checked it).
func (a *attachment) Listen(port uint16, opts *provider.ListenOptions) (provider.Listener, uint16, error) {
	pd := opts.PD.(*attachedPD)
	if err := pd.checkQPConfig(&opts.QP); err != nil {
		return nil, 0, fmt.Errorf("softnic: listen on port %d: %w", port, err)
	}
	var r attachproto.ListenResult
	args := attachproto.ListenArgs{Port: port, PD: pd.h, QP: qpArgs(&opts.QP), Backlog: opts.Backlog, PortSpace: uint16(opts.PortSpace), Held: opts.Held}
	if _, err := a.call(context.Background(), attachproto.OpListen, args, nil, &r); err != nil {
		return nil, 0, err
	}
	return &attachedListener{a: a, h: r.H, port: r.Port, pd: pd, closed: make(chan struct{})}, r.Port, nil
}

// AcceptRequest asks the daemon for the listener's next request. A closed listener
// fails with ErrClosed, as an embedded one does, without asking: the
// daemon has forgotten its handle. A call that Close overtakes fails at
// the daemon with ErrClosed or, if the handle went first, ErrInvalid;
// either is ErrClosed here.
func (al *attachedListener) AcceptRequest(ctx context.Context) (provider.Request, error) {
	if provider.IsClosed(al.closed) {
		return nil, provider.ListenerClosed(al.port)
	}
	var r attachproto.RequestResult
	if _, err := al.a.call(ctx, attachproto.OpAcceptRequest, attachproto.HandleArgs{H: al.h}, nil, &r); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case provider.IsClosed(al.closed):
			return nil, provider.ListenerClosed(al.port)
		}
		return nil, err
	}
	return &attachedRequest{a: al.a, h: r.H, peer: r.Remote, private: r.Private, pd: al.pd, params: r.Params}, nil
}

// Open has the daemon's listener take requests.
func (al *attachedListener) Open(backlog int) error {
	if provider.IsClosed(al.closed) {
		return provider.ListenerClosed(al.port)
	}
	_, err := al.a.call(context.Background(), attachproto.OpOpenListener, attachproto.OpenListenerArgs{H: al.h, Backlog: backlog}, nil, nil)
	return err
}

// Close closes the listener at the daemon, once: closing it again returns
// nil as an embedded listener's Close does. So does closing it after the
// session ended, which closed it at the daemon.
func (al *attachedListener) Close() error {
	a := al.a
	a.mu.Lock()
	if provider.IsClosed(al.closed) {
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

// attachedRequest is a request from peer the daemon's listener received,
// named by handle h, for a connection whose QP is of the PD pd; and the
// process's answer once given: the connection accepted, or rejected. The
// daemon forgets an answered request; these give a second answer the
// embedded device's errors.
type attachedRequest struct {
	a          *attachment
	h          uint32
	peer       netip.AddrPort
	private    []byte
	pd         *attachedPD
	params     *provider.ConnParams
	answerMu   sync.Mutex
	accepted   provider.Conn
	acceptedUD bool // answered with AcceptUD
	rejected   bool
}

func (ar *attachedRequest) Remote() netip.AddrPort { return ar.peer }
func (ar *attachedRequest) PrivateData() []byte    { return ar.private }

// Params are the daemon's; nil from a daemon of before them.
func (ar *attachedRequest) Params() *provider.ConnParams { return ar.params }

func (ar *attachedRequest) Accept(opts *provider.AcceptOptions) (provider.Connection, error) {
	ar.answerMu.Lock()
	defer ar.answerMu.Unlock()
	if err := ar.answeredLocked(); err != nil {
		return provider.Connection{}, err
	}
	a := ar.a
	var res attachproto.ConnResult
	fds, err := a.call(context.Background(), attachproto.OpAccept, attachproto.AcceptArgs{
		Request: ar.h, PrivateData: opts.PrivateData, ResponderResources: opts.ResponderResources,
		InitiatorDepth: opts.InitiatorDepth, RNRRetryCount: opts.RNRRetryCount, Timeout: opts.Timeout, UseQP: daemonHandle(opts.UseQP),
		SelfConnect: opts.SelfConnect,
	}, nil, &res)
	if err != nil {
		return provider.Connection{}, err
	}
	c, err := ar.pd.newConn(&res, fds, opts.UseQP)
	ar.accepted = c.Conn
	return c, err
}

func (ar *attachedRequest) Reject(private []byte) error {
	ar.answerMu.Lock()
	defer ar.answerMu.Unlock()
	if err := ar.answeredLocked(); err != nil {
		return err
	}
	_, err := ar.a.call(context.Background(), attachproto.OpReject, attachproto.RejectArgs{Request: ar.h, Private: private}, nil, nil)
	ar.rejected = err == nil
	return err
}

// answeredLocked returns the error an embedded device gives a request
// answered already, as the CM state it left: why the connection ended, or
// that it is established (or rejected), which is EINVAL.
func (r *attachedRequest) answeredLocked() error {
	state := ""
	switch {
	case r.rejected:
		state = "rejected"
	case r.acceptedUD:
		state = "answered"
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
	return fmt.Errorf("connection with %v is %s: %w", r.peer, state, mr.ErrInvalid)
}

// DialMTU leaves the path MTU to the daemon, unless the options ask for
// one.
func (a *attachment) DialMTU(asked int, _ netip.AddrPort) int { return asked }

// Dial connects with a QP of o.PD, or o.UseQP, both of this device (nic's
// Dial checked them; the daemon checks them too).
func (a *attachment) Dial(ctx context.Context, remote netip.AddrPort, port uint16, o *provider.DialOptions) (provider.Connection, error) {
	pd := o.PD.(*attachedPD)
	if err := pd.checkQPConfig(&o.QP); o.UseQP == nil && err != nil {
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	var res attachproto.ConnResult
	fds, err := a.call(ctx, attachproto.OpDial, dialArgs(remote, port, o), nil, &res)
	if err != nil {
		if ctx.Err() != nil {
			return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, ctx.Err())
		}
		return provider.Connection{}, err
	}
	c, err := pd.newConn(&res, fds, o.UseQP)
	if err == nil && o.SelfConnect && res.Params == nil {
		// A daemon of before SelfConnect connected the QP itself.
		c.Conn.Disconnect()
		return provider.Connection{}, fmt.Errorf("softnic: dial %v port %d: the daemon connects the QP itself (SelfConnect): %w", remote, port, mr.ErrNotSupported)
	}
	c.Params = res.Params
	return c, err
}

// newConn returns a connection the daemon made, with its QP: a new one of
// the PD, or use, the caller's, which the daemon has connected.
func (p *attachedPD) newConn(r *attachproto.ConnResult, fds []int, use provider.QP) (provider.Connection, error) {
	a := p.a
	var q *attachedQP
	var err error
	if use != nil {
		shm.CloseFDs(fds)
		q = use.(*attachedQP)
		q.cache(&attachproto.QueryQPResult{Attr: r.QP.Attr, Status: qp.Status{State: r.QP.Attr.State}})
	} else {
		q, err = p.newQP(&r.QP, fds)
	}
	if err != nil {
		a.call(context.Background(), attachproto.OpDisconnect, attachproto.HandleArgs{H: r.H}, nil, nil)
		a.mu.Lock()
		delete(a.unknownEnds, r.H)
		a.mu.Unlock()
		return provider.Connection{}, err
	}
	ac := &attachedConn{a: a, h: r.H, qp: q, ownQP: use == nil, closed: make(chan struct{})}
	c := provider.Connection{QP: q, Remote: r.Remote, Private: r.Private, Conn: ac}
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.unknownEnds[r.H]; ok {
		delete(a.unknownEnds, r.H)
		ac.endLocked(why)
	}
	if a.ended.Load() {
		ac.endLocked(cm.ErrClosed)
	}
	a.conns[r.H] = ac
	return c, nil
}

// attachedConn is a connection the daemon's connection manager made,
// named by handle h, with its QP (made for it if ownQP); ended and why say
// whether and why it ended, under the attachment's lock.
type attachedConn struct {
	a      *attachment
	h      uint32
	qp     *attachedQP
	ownQP  bool
	closed chan struct{} // closed when it ends
	ended  bool
	why    error
}

func (c *attachedConn) Done() <-chan struct{} { return c.closed }

// Establish asks the daemon to send the RTU of a Dial with SelfConnect.
func (c *attachedConn) Establish() error {
	_, err := c.a.call(context.Background(), attachproto.OpEstablish, attachproto.HandleArgs{H: c.h}, nil, nil)
	return err
}

func (c *attachedConn) Err() error {
	c.a.mu.Lock()
	defer c.a.mu.Unlock()
	return c.why
}

// Disconnect closes the connection at the daemon (DREQ, DREP waited for)
// and unmaps the rings of its QP, if made for it.
func (c *attachedConn) Disconnect() {
	a := c.a
	a.call(context.Background(), attachproto.OpDisconnect, attachproto.HandleArgs{H: c.h}, nil, nil)
	a.mu.Lock()
	c.endLocked(nil)
	delete(a.conns, c.h)
	a.mu.Unlock()
	if c.ownQP {
		a.forget(c.qp)
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
func dialArgs(remote netip.AddrPort, port uint16, o *provider.DialOptions) attachproto.DialArgs {
	return attachproto.DialArgs{
		Remote: remote, Port: port, PD: daemonHandle(o.PD), QP: qpArgs(&o.QP), Private: o.PrivateData,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: o.RetryCount, RNRRetryCount: o.RNRRetryCount, MTU: o.MTU,
		Timeout: o.Timeout, CMRetries: o.CMRetries, CMTimeout: o.CMTimeout, UseQP: daemonHandle(o.UseQP),
		PortSpace: uint16(o.PortSpace), SelfConnect: o.SelfConnect, TrafficClass: o.TrafficClass,
	}
}
