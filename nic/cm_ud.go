package nic

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/provider"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// rdma_cm's UDP port space (RDMA_PS_UDP): no connection, but service ID
// resolution (SIDR): the active side learns which UD QP serves a port of
// the peer, and its Q_Key, from a SIDR_REQ and its SIDR_REP, as
// rdma_connect on a UDP rdma_cm_id does; the passive side's listener gets
// each SIDR_REQ as a Request and answers it with its UD QP (rdma_accept)
// or refuses it (rdma_reject). Linux's rdma_cm peers understand it.

// RDMAUDPQKey is the Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY):
// the UD QPs that answer resolutions take it, so that their peers may send
// to them with the Q_Key the resolution names.
const RDMAUDPQKey = cm.RDMAUDPQKey

// SIDRError is a resolution refused by the peer's SIDR_REP, as Resolve
// returns it: errors.Is ErrConnRefused when nothing listens on the port.
type SIDRError = cm.SIDRError

// ListenUDOptions configure a listener of the UDP port space.
type ListenUDOptions struct {
	// Backlog bounds the requests waiting for AcceptRequest (default
	// 128); a SIDR_REQ beyond it is dropped, and its requester tries
	// again.
	Backlog int
	// PortSpace is the port's: PortSpaceUDP (default) or PortSpaceIB.
	PortSpace PortSpace
	// Held makes a listener that holds its port until Open, as
	// ListenOptions.Held: resolutions meanwhile are refused as for a port
	// nobody listens on.
	Held bool
}

// ListenUD starts taking service ID resolutions for port of rdma_cm's UDP
// port space: SIDR_REQs whose service ID is RDMA_PS_UDP's for the port, or
// that of opts.PortSpace.
// Its requests, from AcceptRequest (Request.UD), are answered with
// Request.AcceptUD or Request.Reject; Accept refuses them. A Listen on the
// same port number is another listener. It returns ErrBusy if the port is
// already listened on; port 0 picks a free one, as Listen does.
func (d *Device) ListenUD(port uint16, opts ListenUDOptions) (*Listener, error) {
	ps, err := checkPortSpace(opts.PortSpace, PortSpaceUDP)
	if err != nil {
		return nil, fmt.Errorf("softnic: listen for resolutions on port %d: %w", port, err)
	}
	if opts.Backlog < 0 {
		return nil, fmt.Errorf("softnic: listen on UDP port %d: backlog %d: %w", port, opts.Backlog, ErrInvalid)
	}
	p, port, err := d.prov.ListenUD(port, ps, opts.Backlog, opts.Held)
	if err != nil {
		return nil, err
	}
	return &Listener{dev: d, port: port, prov: p, ud: true}, nil
}

// UD reports whether the request is a service ID resolution, which a
// listener of ListenUD takes.
func (r *Request) UD() bool { return r.l.ud }

// AcceptUD answers a resolution (Request.UD) with a SIDR_REP naming q, a
// UD QP of the device, and its Q_Key (RDMAUDPQKey, for rdma_cm peers),
// and privateData (at most mad.SIDRREPPrivateDataSize bytes), as
// rdma_accept on a UDP rdma_cm_id does. The requester then sends to q;
// nothing is established on this side, and a repeated SIDR_REQ gets the
// same answer again.
func (r *Request) AcceptUD(q *QP, privateData []byte) error {
	switch {
	case !r.UD():
		return fmt.Errorf("softnic: accept %v: a connection request is answered with Accept: %w", r.peer, ErrInvalid)
	case q == nil || q.dev != r.l.dev || q.Type() != verbs.UD:
		return fmt.Errorf("softnic: accept %v: a resolution is answered with a UD QP of its device: %w", r.peer, ErrInvalid)
	case len(privateData) > mad.SIDRREPPrivateDataSize:
		return fmt.Errorf("softnic: accept %v: %d bytes of private data, a SIDR_REP carries %d: %w",
			r.peer, len(privateData), mad.SIDRREPPrivateDataSize, ErrInvalid)
	}
	return r.prov.AcceptUD(q.prov, q.Attr().QKey, privateData)
}

// ResolveOptions configure Resolve. Zero fields take rdma_cm's defaults.
type ResolveOptions struct {
	// PrivateData goes into the SIDR_REQ after rdma_cm's header: at most
	// cm.SIDRCMAPrivateDataSize (180) bytes.
	PrivateData []byte
	// CMTimeout is how long each SIDR_REQ waits for its answer: 4.096 µs
	// × 2^CMTimeout (default 20, ≈ 4.3 s); CMRetries how often it is sent
	// again (default 15, at most 15).
	CMTimeout, CMRetries uint8
	// PortSpace is the port's: PortSpaceUDP (default) or PortSpaceIB.
	PortSpace PortSpace
}

// UDPeer is a UD QP a resolution found: where to send (a SendWR's Dest,
// DestQPN and QKey), and the private data of the SIDR_REP.
type UDPeer struct {
	Addr        netip.AddrPort
	QPN, QKey   uint32
	PrivateData []byte
}

// Resolve resolves port of rdma_cm's UDP port space at the device at
// remote (its IP address and UDP port; port 0 means 4791) to the UD QP
// that serves it, as rdma_connect on a UDP rdma_cm_id does: it sends a
// SIDR_REQ (again per the CM timeout and retries) and returns what the
// SIDR_REP names. A refusal is a *SIDRError (errors.Is ErrConnRefused when
// nothing listens on the port), no answer an error wrapping ErrTimedOut,
// and the end of ctx an error wrapping ctx.Err().
func (d *Device) Resolve(ctx context.Context, remote netip.AddrPort, port uint16, opts ResolveOptions) (*UDPeer, error) {
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), cmp.Or(remote.Port(), wire.UDPPort))
	fail := func(err error) (*UDPeer, error) {
		d.log.Debug("cm: resolve failed", slog.Any("peer", remote), slog.Any("port", port), slog.Any("error", err))
		return nil, err
	}
	o := provider.ResolveOptions{
		PrivateData: opts.PrivateData,
		CMTimeout:   cmp.Or(opts.CMTimeout, provider.CMDefaultCMTimeout),
		CMRetries:   cmp.Or(opts.CMRetries, provider.CMDefaultCMRetries),
	}
	var err error
	o.PortSpace, err = checkPortSpace(opts.PortSpace, PortSpaceUDP)
	switch {
	case err != nil:
		return fail(fmt.Errorf("softnic: resolve %v port %d: %w", remote, port, err))
	case !remote.Addr().IsValid():
		return fail(fmt.Errorf("softnic: resolve %v port %d: no address: %w", remote, port, ErrInvalid))
	case len(opts.PrivateData) > cm.SIDRCMAPrivateDataSize:
		return fail(fmt.Errorf("softnic: resolve %v port %d: %d bytes of private data, rdma_cm's SIDR_REQ carries %d: %w",
			remote, port, len(opts.PrivateData), cm.SIDRCMAPrivateDataSize, ErrInvalid))
	case o.CMTimeout > 31 || o.CMRetries > 15:
		return fail(fmt.Errorf("softnic: resolve %v port %d: CM timeout %d (at most 31), %d CM retries (at most 15): %w",
			remote, port, o.CMTimeout, o.CMRetries, ErrInvalid))
	}
	r, err := d.prov.Resolve(ctx, remote, port, &o)
	if err != nil {
		return fail(err)
	}
	return &UDPeer{Addr: remote, QPN: r.QPN, QKey: r.QKey, PrivateData: r.Private}, nil
}
