package nic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
)

// The connection manager of an attached device: the daemon's device makes
// the connections (its CM on its QP1) on behalf of the process, with QPs
// whose rings the process maps.

func (a *attachment) listen(port uint16, opts *ListenOptions) (*Listener, error) {
	if err := a.checkQPConfig(opts.PD, &opts.QP); err != nil {
		return nil, fmt.Errorf("softnic: listen on port %d: %w", port, err)
	}
	var r listenResult
	args := listenArgs{Port: port, PD: opts.PD.ah, QP: opts.QP.args(), Backlog: opts.Backlog}
	if _, err := a.call(context.Background(), opListen, args, nil, &r); err != nil {
		return nil, err
	}
	return &Listener{dev: a.d, l: &cmListener{port: r.Port, closed: make(chan struct{})}, pd: opts.PD, qp: opts.QP, ah: r.H}, nil
}

// acceptRequest asks the daemon for l's next request. A closed listener
// fails with ErrClosed, as an embedded one does, without asking: the
// daemon has forgotten its handle. A call that Close overtakes fails at
// the daemon with ErrClosed or, if the handle went first, ErrInvalid;
// either is ErrClosed here.
func (a *attachment) acceptRequest(ctx context.Context, l *Listener) (*Request, error) {
	if l.l.isClosed() {
		return nil, l.l.errClosed()
	}
	var r requestResult
	if _, err := a.call(ctx, opAcceptRequest, handleArgs{l.ah}, nil, &r); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case l.l.isClosed():
			return nil, l.l.errClosed()
		}
		return nil, err
	}
	return &Request{l: l, id: &cmID{peer: r.Remote}, private: r.Private, ah: r.H}, nil
}

// closeListener closes l at the daemon, once: closing it again returns nil
// as an embedded listener's Close does. So does closing it after the
// session ended, which closed it at the daemon.
func (a *attachment) closeListener(l *Listener) error {
	a.mu.Lock()
	if l.l.isClosed() {
		a.mu.Unlock()
		return nil
	}
	close(l.l.closed)
	a.mu.Unlock()
	_, err := a.call(context.Background(), opCloseListener, handleArgs{l.ah}, nil, nil)
	if err != nil && a.ended.Load() {
		return nil
	}
	return err
}

func (a *attachment) accept(r *Request, opts AcceptOptions) (*Conn, error) {
	r.answerMu.Lock()
	defer r.answerMu.Unlock()
	if err := r.answeredLocked(); err != nil {
		return nil, err
	}
	var res connResult
	fds, err := a.call(context.Background(), opAccept, acceptArgs{Request: r.ah, Opts: opts, UseQP: qpHandle(opts.UseQP)}, nil, &res)
	if err != nil {
		return nil, err
	}
	c, err := a.newConn(r.l.pd, &res, fds, opts.UseQP)
	r.accepted = c
	return c, err
}

func (a *attachment) reject(r *Request, private []byte) error {
	r.answerMu.Lock()
	defer r.answerMu.Unlock()
	if err := r.answeredLocked(); err != nil {
		return err
	}
	_, err := a.call(context.Background(), opReject, rejectArgs{Request: r.ah, Private: private}, nil, nil)
	r.rejected = err == nil
	return err
}

// answeredLocked returns the error an embedded device gives a request
// answered already, as the CM state it left: why the connection ended, or
// that it is established (or rejected), which is EINVAL.
func (r *Request) answeredLocked() error {
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
	return fmt.Errorf("connection with %v is %s: %w", r.id.peer, state, ErrInvalid)
}

func (a *attachment) dial(ctx context.Context, remote netip.AddrPort, port uint16, o *DialOptions) (*Conn, error) {
	// A QP of the caller's is checked by Dial; the daemon checks it too.
	if err := a.checkQPConfig(o.PD, &o.QP); o.UseQP == nil && err != nil {
		return nil, fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err)
	}
	var res connResult
	fds, err := a.call(ctx, opDial, dialArgsOf(remote, port, o), nil, &res)
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
func (a *attachment) newConn(pd *PD, r *connResult, fds []int, use *QP) (*Conn, error) {
	q, err := use, error(nil)
	if use != nil {
		shm.CloseFDs(fds)
		use.att.cache(&queryQPResult{Attr: r.QP.Attr, Status: qp.Status{State: r.QP.Attr.State}})
	} else {
		q, err = a.newQP(pd, &r.QP, fds)
	}
	if err != nil {
		a.call(context.Background(), opDisconnect, handleArgs{r.H}, nil, nil)
		a.mu.Lock()
		delete(a.unknownEnds, r.H)
		a.mu.Unlock()
		return nil, err
	}
	c := &Conn{dev: a.d, id: &cmID{peer: r.Remote, done: make(chan struct{})}, qp: q, private: r.Private, ah: r.H, ownQP: use == nil}
	a.mu.Lock()
	defer a.mu.Unlock()
	if why, ok := a.unknownEnds[r.H]; ok {
		delete(a.unknownEnds, r.H)
		a.endConnLocked(c, why)
	}
	if a.ended.Load() {
		a.endConnLocked(c, ErrClosed)
	}
	a.conns[r.H] = c
	return c, nil
}

func (a *attachment) connErr(c *Conn) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return c.id.err
}

// disconnect closes c at the daemon (DREQ, DREP waited for) and unmaps its
// QP's rings.
func (a *attachment) disconnect(c *Conn) {
	a.call(context.Background(), opDisconnect, handleArgs{c.ah}, nil, nil)
	a.mu.Lock()
	a.endConnLocked(c, nil)
	delete(a.conns, c.ah)
	a.mu.Unlock()
	if c.ownQP {
		a.forget(c.qp.att)
	}
}

// connEnded handles the daemon's news that a connection ended.
func (a *attachment) connEnded(m *attachMsg) {
	var ev connEndedEvent
	if json.Unmarshal(m.Args, &ev) != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.conns[ev.H]; c != nil {
		a.endConnLocked(c, m.err())
	} else {
		a.unknownEnds[ev.H] = m.err()
	}
}

// endConnLocked records why c ended, the first reason only, and closes
// its Done channel.
func (a *attachment) endConnLocked(c *Conn, err error) {
	if c.id.ended {
		return
	}
	c.id.ended, c.id.err = true, err
	close(c.id.done)
}
