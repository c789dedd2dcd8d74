package nic

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// The connection manager connects RC QPs by address and port, the way
// rdma_cm does (rdma_listen, rdma_accept, rdma_reject, rdma_connect,
// rdma_disconnect): REQ, REP and RTU between the devices' QP1s, with the
// service ID of rdma_cm's TCP port space (or of its IB port space:
// PortSpace options) and its private-data header, so that a softnic peer
// and a Linux rdma_cm peer understand each other.

// PortSpace is an rdma_cm port space, the top of the service ID that a
// port number completes: connections are made in the TCP and the IB port
// spaces, resolutions of UD QPs (cm_ud.go) in the UDP and the IB ones. A
// port of one port space is unrelated to the same number in another, but
// in the IB port space a port is one listener's, of connections or of
// resolutions, as in Linux. rdma_cm's private-data header leads the
// private data in every port space, as Linux sends it for IP addresses.
type PortSpace = mad.PortSpace

// The port spaces rdma_cm's connection manager serves (Linux's
// RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IB).
const (
	PortSpaceTCP = mad.PortSpaceTCP
	PortSpaceUDP = mad.PortSpaceUDP
	PortSpaceIB  = mad.PortSpaceIB
)

// checkPortSpace checks that ps (0: def) is def or the IB port space, and
// returns it.
func checkPortSpace(ps, def PortSpace) (PortSpace, error) {
	if ps == 0 {
		return def, nil
	}
	if ps != def && ps != PortSpaceIB {
		return 0, fmt.Errorf("port space %v: %v or %v: %w", ps, def, PortSpaceIB, ErrInvalid)
	}
	return ps, nil
}

// ListenOptions configure a Listener.
type ListenOptions struct {
	// PD is the protection domain of the QPs created for accepted
	// connections (required).
	PD *PD
	// QP sizes the accepted QPs; SendCQ is required, RecvCQ defaults to it.
	// The type is RC.
	QP QPConfig
	// Backlog bounds the requests waiting for AcceptRequest (default 128).
	// A REQ beyond it is dropped without an answer, as Linux does, so that
	// the requester's retransmission tries again.
	Backlog int
	// PortSpace is the port's: PortSpaceTCP (default) or PortSpaceIB.
	PortSpace PortSpace
	// Held makes a listener that holds its port but takes no request
	// until Open: a request for the port is refused as one for a port
	// nobody listens on (ErrConnRefused at the dialer), as Linux refuses
	// it for an rdma_cm id bound to the port and not listening yet.
	// rdma_get_src_port gives such an id its port before rdma_listen.
	Held bool
}

// Listener accepts connection requests for one rdma_cm port of a device.
type Listener struct {
	dev  *Device
	port uint16
	prov provider.Listener
	ud   bool // of the UDP port space (ListenUD, cm_ud.go)
}

// Listen starts accepting connection requests for rdma_cm port port: REQs
// whose service ID is RDMA_PS_TCP's for the port (mad.RDMACMServiceID), or
// that of opts.PortSpace. It returns ErrBusy if the port is already
// listened on. Port 0 picks a port not listened on, which Listener.Port
// says, as rdma_listen does for an id bound to port 0.
func (d *Device) Listen(port uint16, opts ListenOptions) (*Listener, error) {
	ps, err := checkPortSpace(opts.PortSpace, PortSpaceTCP)
	switch {
	case err != nil:
		return nil, fmt.Errorf("softnic: listen on port %d: %w", port, err)
	case opts.PD == nil || opts.PD.dev != d:
		return nil, fmt.Errorf("softnic: listen on port %d: ListenOptions.PD of this device is required: %w", port, ErrInvalid)
	case opts.QP.SendCQ == nil:
		return nil, fmt.Errorf("softnic: listen on port %d: ListenOptions.QP.SendCQ is required: %w", port, ErrInvalid)
	case opts.QP.Type != 0 && opts.QP.Type != verbs.RC:
		return nil, fmt.Errorf("softnic: listen on port %d: the connection manager connects RC QPs, not %s: %w", port, opts.QP.Type, ErrInvalid)
	case opts.Backlog < 0:
		return nil, fmt.Errorf("softnic: listen on port %d: backlog %d: %w", port, opts.Backlog, ErrInvalid)
	}
	p, port, err := d.prov.Listen(port, &provider.ListenOptions{PD: opts.PD.prov, QP: opts.QP.provider(), Backlog: opts.Backlog, PortSpace: ps, Held: opts.Held})
	if err != nil {
		return nil, err
	}
	return &Listener{dev: d, port: port, prov: p}, nil
}

// Port returns the rdma_cm port the listener accepts requests for.
func (l *Listener) Port() uint16 { return l.port }

// Accept waits for the next connection request and accepts it with the
// default AcceptOptions: it returns a connection whose QP is in RTS. A
// request whose requester gives up during the handshake is skipped. It
// answers one request at a time, each handshake taking up to
// CMLimits.Handshake: a server that must not wait for one requester takes
// requests with AcceptRequest and accepts each in a goroutine of its own,
// as softnic serve does.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		r, err := l.AcceptRequest(ctx)
		if err != nil {
			return nil, err
		}
		c, err := r.Accept(AcceptOptions{})
		if errors.Is(err, ErrConnReset) || errors.Is(err, ErrTimedOut) {
			l.dev.log.Debug("cm: handshake failed", slog.Any("peer", r.RemoteAddr()), slog.Any("error", err))
			continue
		}
		return c, err
	}
}

// AcceptRequest waits for the next connection request and returns it
// unanswered: the caller accepts or rejects it. A requester that waits
// meanwhile gets an MRA for each REQ it repeats.
func (l *Listener) AcceptRequest(ctx context.Context) (*Request, error) {
	p, err := l.prov.AcceptRequest(ctx)
	if err != nil {
		return nil, err
	}
	return &Request{l: l, peer: p.Remote(), private: p.PrivateData(), prov: p}, nil
}

// Close stops listening; requests not yet taken by AcceptRequest are
// rejected (consumer reject). Connections already made stay.
func (l *Listener) Close() error { return l.prov.Close() }

// Open has a listener made with ListenOptions.Held (or
// ListenUDOptions.Held) take requests, with room for backlog of them (0:
// the default); on a listener that takes them already it sets the room,
// as rdma_listen on a listening id does.
func (l *Listener) Open(backlog int) error {
	if backlog < 0 {
		return fmt.Errorf("softnic: open the listener of port %d: backlog %d: %w", l.port, backlog, ErrInvalid)
	}
	return l.prov.Open(backlog)
}

// Request is a connection request a Listener received and the application
// has not answered yet.
type Request struct {
	l       *Listener
	peer    netip.AddrPort
	private []byte
	prov    provider.Request
}

// PrivateData returns the requester's private data: the REQ's after the
// rdma_cm header, all mad.CMAPrivateDataSize bytes of it (the wire
// carries no length).
func (r *Request) PrivateData() []byte { return r.private }

// RemoteAddr returns the requesting device's address (IP and UDP port).
func (r *Request) RemoteAddr() netip.AddrPort { return r.peer }

// AcceptOptions answer a connection request. Zero fields take the
// defaults noted.
type AcceptOptions struct {
	// PrivateData goes into the REP (at most mad.REPPrivateDataSize bytes).
	PrivateData []byte
	// ResponderResources bounds the RDMA READs and atomics the peer may
	// have outstanding at this QP (default: the requester's initiator
	// depth, at most 16); InitiatorDepth bounds this QP's (default and
	// limit: the requester's responder resources, at most 16 by default).
	ResponderResources, InitiatorDepth uint8
	// RNRRetryCount is how often the requester's QP retries after an RNR
	// NAK from this QP (default 7: forever).
	RNRRetryCount uint8
	// Timeout is this QP's local ACK timeout exponent, 4.096 µs ×
	// 2^Timeout, at most 31 (default: the REQ's, which the dialer's
	// DialOptions.Timeout set), as rdma_set_option's
	// RDMA_OPTION_ID_ACK_TIMEOUT sets it for an accepting rdma_cm id.
	Timeout uint8
	// UseQP, if set, is the RC QP the connection is made with, one of the
	// device in RESET or INIT (of any PD), instead of a new one: the QP a
	// program created before it accepted (rdma_create_qp on the
	// rdma_cm_id, then rdma_accept), which may hold receive WRs already.
	// Conn.Close then leaves it in the error state for its owner to
	// destroy.
	UseQP *QP `json:"-"`
	// SelfConnect leaves UseQP (required) to its owner, who connects it
	// with Request.Params (in any state: rping -q has it in RTS before it
	// accepts), as rdma_accept does for a QP rdma_cm did not make.
	SelfConnect bool
}

// Accept answers the request with a REP, after moving a new QP (from the
// listener's PD and QPConfig) through INIT, RTR and RTS with the REQ's
// attributes, as rdma_accept does; it then waits for the RTU (or the
// first request on the QP, which shows the requester has the REP) and
// returns the connection. The REP is sent again only when the requester
// repeats its REQ, and the wait is bounded by Config.CM (a timeout wraps
// ErrTimedOut). If the QP cannot be made, the request is rejected.
func (r *Request) Accept(opts AcceptOptions) (*Conn, error) {
	if r.UD() {
		return nil, fmt.Errorf("softnic: accept %v: a resolution is answered with AcceptUD: %w", r.peer, ErrInvalid)
	}
	if opts.SelfConnect && (opts.UseQP == nil || r.Params() == nil) {
		return nil, fmt.Errorf("softnic: accept %v: SelfConnect needs UseQP, and a device that tells Request.Params: %w", r.peer, ErrInvalid)
	}
	if opts.Timeout > 31 {
		return nil, fmt.Errorf("softnic: accept %v: timeout exponent %d: at most 31: %w", r.peer, opts.Timeout, ErrInvalid)
	}
	c, err := r.prov.Accept(opts.provider())
	if err != nil {
		return nil, err
	}
	return r.l.dev.newConn(&c), nil
}

// provider is o with providers.
func (o *AcceptOptions) provider() *provider.AcceptOptions {
	p := &provider.AcceptOptions{PrivateData: o.PrivateData, ResponderResources: o.ResponderResources,
		InitiatorDepth: o.InitiatorDepth, RNRRetryCount: o.RNRRetryCount, Timeout: o.Timeout, SelfConnect: o.SelfConnect}
	if o.UseQP != nil {
		p.UseQP = o.UseQP.prov
	}
	return p
}

// Reject refuses the request with a REJ, reason "consumer reject" (28),
// carrying privateData (at most mad.REJPrivateDataSize bytes), as
// rdma_reject does; a resolution (UD) with a SIDR_REP, status "rejected
// by the service" (at most mad.SIDRREPPrivateDataSize bytes).
func (r *Request) Reject(privateData []byte) error {
	msg, most := "REJ", mad.REJPrivateDataSize
	if r.UD() {
		msg, most = "SIDR_REP", mad.SIDRREPPrivateDataSize
	}
	if len(privateData) > most {
		return fmt.Errorf("softnic: reject %v: %d bytes of private data, a %s carries %d: %w",
			r.peer, len(privateData), msg, most, ErrInvalid)
	}
	return r.prov.Reject(privateData)
}

// DialOptions configure Dial. Zero fields take the defaults noted, which
// are rdma_cm's.
type DialOptions struct {
	PD *PD      // the protection domain of the QP (required)
	QP QPConfig // sizes of the QP; SendCQ is required, the type is RC
	// PrivateData goes into the REQ after rdma_cm's header: at most
	// mad.CMAPrivateDataSize (56) bytes.
	PrivateData []byte
	// ResponderResources and InitiatorDepth bound the RDMA READs and
	// atomics outstanding at this QP from the peer, and from this QP
	// (default 16 each); the peer may answer with less.
	ResponderResources, InitiatorDepth uint8
	// RetryCount is both QPs' transport retry_cnt (default 7: forever, as
	// rxe counts it; lower it to notice a vanished peer). RNRRetryCount is
	// how often the peer's QP retries after an RNR NAK from this one
	// (default 7: forever).
	RetryCount, RNRRetryCount uint8
	// MTU is the path MTU asked for (default and limit: Device.PathMTU
	// toward the peer, what the network interface carries). A softnic peer
	// whose path carries less rejects the REQ naming its MTU, and Dial
	// tries once more with that: the connection gets the smaller of both.
	MTU int
	// Timeout is both QPs' local ACK timeout exponent: 4.096 µs × 2^Timeout
	// (default 14, ≈ 67 ms; Linux puts 19 in the REQ's path on RoCE).
	Timeout uint8
	// CMRetries is how often the REQ is sent again without an answer
	// (max_cm_retries, default 15; at most 15).
	CMRetries uint8
	// CMTimeout is the CM response timeout exponent, how long each REQ
	// waits for an answer: 4.096 µs × 2^CMTimeout plus the path's ACK
	// timeout (default 20, ≈ 4.3 s, as rdma_cm). The peer waits as long
	// for this side's answers.
	CMTimeout uint8
	// UseQP, if set, is the RC QP the connection is made with, one of PD
	// in RESET or INIT, instead of a new one sized by QP: the QP a program
	// created before it connected (rdma_create_qp on the rdma_cm_id, then
	// rdma_connect), which may hold receive WRs already. Conn.Close then
	// leaves it in the error state for its owner to destroy; a Dial that
	// fails before the QP is connected (a REJ, no answer) leaves it as it
	// was.
	UseQP *QP
	// PortSpace is the port's: PortSpaceTCP (default) or PortSpaceIB.
	PortSpace PortSpace
	// SelfConnect leaves UseQP (required) to its owner: Dial returns at
	// the REP, with the QP untouched and Conn.Params telling what to
	// connect it with, and Conn.Establish then sends the RTU, as
	// rdma_connect and rdma_establish do for a QP rdma_cm did not make.
	SelfConnect bool
	// TrafficClass is the IP header's DSCP and ECN byte of both QPs'
	// packets (verbs.Attr.TrafficClass; rdma_set_option's
	// RDMA_OPTION_ID_TOS; default 0): it goes in the REQ's path, from
	// which the accepting side takes it, and the connection's CM messages
	// go with it, as with Linux's rdma_cm.
	TrafficClass uint8
}

func (o *DialOptions) setDefaults(d *Device, remote netip.AddrPort) error {
	def := func(v *uint8, x uint8) {
		if *v == 0 {
			*v = x
		}
	}
	def(&o.ResponderResources, provider.CMDefaultRdAtomic)
	def(&o.InitiatorDepth, provider.CMDefaultRdAtomic)
	def(&o.RetryCount, provider.CMDefaultRetry)
	def(&o.RNRRetryCount, provider.CMDefaultRetry)
	def(&o.Timeout, provider.CMDefaultAckTimeout)
	def(&o.CMTimeout, provider.CMDefaultCMTimeout)
	def(&o.CMRetries, provider.CMDefaultCMRetries)
	asked := o.MTU
	o.MTU = d.prov.DialMTU(o.MTU, remote)
	ps, err := checkPortSpace(o.PortSpace, PortSpaceTCP)
	o.PortSpace = ps
	switch {
	case err != nil:
		return err
	case o.PD == nil || o.PD.dev != d:
		return fmt.Errorf("DialOptions.PD of this device is required: %w", ErrInvalid)
	case len(o.PrivateData) > mad.CMAPrivateDataSize:
		return fmt.Errorf("%d bytes of private data, rdma_cm's REQ carries %d: %w", len(o.PrivateData), mad.CMAPrivateDataSize, ErrInvalid)
	case asked > d.MTU():
		return fmt.Errorf("path MTU %d exceeds the device MTU %d: %w", asked, d.MTU(), ErrInvalid)
	case o.RetryCount > 7 || o.RNRRetryCount > 7:
		return fmt.Errorf("retry counts %d and %d: at most 7: %w", o.RetryCount, o.RNRRetryCount, ErrInvalid)
	case o.Timeout > 31 || o.CMTimeout > 31:
		return fmt.Errorf("timeout exponents %d and %d: at most 31: %w", o.Timeout, o.CMTimeout, ErrInvalid)
	case o.CMRetries > 15:
		return fmt.Errorf("%d CM retries: at most 15: %w", o.CMRetries, ErrInvalid)
	case o.ResponderResources > qp.MaxRdAtomicLimit || o.InitiatorDepth > qp.MaxRdAtomicLimit:
		return fmt.Errorf("responder resources %d, initiator depth %d: at most %d: %w",
			o.ResponderResources, o.InitiatorDepth, qp.MaxRdAtomicLimit, ErrInvalid)
	}
	// 0 leaves the path MTU to an attached device's daemon.
	if _, ok := wire.MTUFromBytes(o.MTU); !ok && o.MTU != 0 {
		return fmt.Errorf("path MTU %d is not 256, 512, 1024, 2048 or 4096: %w", cmp.Or(asked, o.MTU), ErrInvalid)
	}
	return nil
}

// Dial connects an RC QP to rdma_cm port port of the device at remote (its
// IP address and UDP port; port 0 means 4791), as rdma_connect does: it
// creates the QP, sends a REQ (again per the CM timeout and retries),
// moves the QP through INIT, RTR and RTS with the attributes of the REP,
// sends the RTU and returns the connection.
//
// A REJ ends it with a *RejectError (errors.Is ErrConnRefused when nothing
// listens on the port), no answer with an error wrapping ErrTimedOut, and
// the end of ctx with an error wrapping ctx.Err() (the peer is told with a
// REJ, as Linux does). Every error names the address and port. Two REJs
// are not the end: one naming a smaller path MTU has Dial try again with
// it, and "no resources" (the peer holds as many requests as it takes)
// has it try again after a pause, up to CMRetries times.
func (d *Device) Dial(ctx context.Context, remote netip.AddrPort, port uint16, opts DialOptions) (*Conn, error) {
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), cmp.Or(remote.Port(), wire.UDPPort))
	fail := func(err error) (*Conn, error) {
		d.log.Debug("cm: dial failed", slog.Any("peer", remote), slog.Any("port", port), slog.Any("error", err))
		return nil, err
	}
	if !remote.Addr().IsValid() {
		return fail(fmt.Errorf("softnic: dial %v port %d: no address: %w", remote, port, ErrInvalid))
	}
	if err := opts.setDefaults(d, remote); err != nil {
		return fail(fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err))
	}
	if opts.SelfConnect && opts.UseQP == nil {
		return fail(fmt.Errorf("softnic: dial %v port %d: SelfConnect needs UseQP: %w", remote, port, ErrInvalid))
	}
	if q := opts.UseQP; q != nil {
		err := checkConnQP(d, q)
		if err == nil && q.pd != opts.PD {
			err = fmt.Errorf("DialOptions.UseQP is not of DialOptions.PD: %w", ErrInvalid)
		}
		if err != nil {
			return fail(fmt.Errorf("softnic: dial %v port %d: %w", remote, port, err))
		}
	}
	c, err := d.prov.Dial(ctx, remote, port, opts.provider())
	if err != nil {
		return fail(err)
	}
	return d.newConn(&c), nil
}

// provider is o with providers.
func (o *DialOptions) provider() *provider.DialOptions {
	p := &provider.DialOptions{
		PD: o.PD.prov, QP: o.QP.provider(), PrivateData: o.PrivateData,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: o.RetryCount, RNRRetryCount: o.RNRRetryCount, MTU: o.MTU,
		Timeout: o.Timeout, CMRetries: o.CMRetries, CMTimeout: o.CMTimeout, PortSpace: o.PortSpace,
		SelfConnect: o.SelfConnect, TrafficClass: o.TrafficClass,
	}
	if o.UseQP != nil {
		p.UseQP = o.UseQP.prov
	}
	return p
}

// checkConnQP checks that a QP the caller brings to a connection can make
// one: an RC QP of device d, in RESET or INIT.
func checkConnQP(d *Device, q *QP) error {
	if q.dev != d {
		return fmt.Errorf("a connection's QP must be an RC QP of its device: %w", ErrInvalid)
	}
	return provider.CheckConnQP(q.prov)
}

// Conn is a connected RC QP and the connection manager's state for it.
type Conn struct {
	dev       *Device
	qp        *QP
	peer      netip.AddrPort
	private   []byte
	closeOnce sync.Once
	prov      provider.Conn
	params    *ConnParams // of a Dial with SelfConnect (cm_self.go)
}

// newConn wraps a connection the provider made.
func (d *Device) newConn(c *provider.Connection) *Conn {
	return &Conn{dev: d, qp: c.QP.Owner().(*QP), peer: c.Remote, private: c.Private, prov: c.Conn, params: c.Params}
}

// QP returns the connection's QP, in RTS.
func (c *Conn) QP() *QP { return c.qp }

// PrivateData returns the peer's private data: the REP's for the dialer,
// the REQ's (after rdma_cm's header) for the acceptor; the whole field, as
// the wire carries no length.
func (c *Conn) PrivateData() []byte { return c.private }

// RemoteAddr returns the peer device's address (IP and UDP port).
func (c *Conn) RemoteAddr() netip.AddrPort { return c.peer }

// Done is closed when the connection ends: Close, the peer's DREQ, the QP
// entering the error state, or the device closing.
func (c *Conn) Done() <-chan struct{} { return c.prov.Done() }

// Err says why the connection ended, once Done is closed: nil after Close,
// an error wrapping ErrConnReset after the peer's DREQ (or REJ), a
// *QPError when the QP failed (RETRY_EXC_ERR when the peer vanished;
// errors.Is ErrTimedOut), ErrClosed when the device closed.
func (c *Conn) Err() error { return c.prov.Err() }

// Close disconnects, as rdma_disconnect and rdma_destroy_qp do: it moves
// the QP to the error state (its outstanding WRs complete with
// WR_FLUSH_ERR), sends a DREQ and waits for the DREP, resending the DREQ
// per the CM timeout and retries, then destroys the QP, unless the caller
// brought it (DialOptions.UseQP, AcceptOptions.UseQP). It does not wait
// when the connection had already ended (the peer's DREQ, or a failed QP:
// the DREQ is still sent). Close always returns nil.
func (c *Conn) Close() error {
	c.closeOnce.Do(c.prov.Disconnect)
	return nil
}

// CMLimits bound what the connection manager holds for the connection
// requests it receives, whatever the requesters ask for, so that no
// requester (or address spoofing one) can hold a device's resources for
// long, lock other requesters out, or have it send more than it receives
// (package cm's Limits, where the fields and their defaults are described).
type CMLimits = cm.Limits
