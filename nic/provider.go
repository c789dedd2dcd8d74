package nic

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// The public types (Device, PD, MR, MW, CQ, SRQ, QP, Listener, Request,
// Conn) hold what both kinds of device share and send every verb to a
// provider, as libibverbs sends each to the verbs_context_ops of the
// device's provider: the embedded provider runs the NIC in this process
// (embeddedDevice and its objects), the attached one asks a softnic daemon
// (attachment and its objects). A provider makes the public objects of
// what it creates, with providers of its own inside, and recognises only
// its own: an object of another device is ErrInvalid. What one provider
// lacks is an optional interface the other implements; its absence is
// ErrNotSupported (see unsupported).

// deviceProvider is a device's provider.
type deviceProvider interface {
	addr() netip.AddrPort
	mtu() int
	done() <-chan struct{}
	features() udp.Features
	pathMTU(dst netip.AddrPort) int
	counters() []CounterValue
	query() DeviceAttr
	close() error

	allocPD(d *Device) (*PD, error)
	createCQ(d *Device, depth int) (*CQ, error)
	listen(l *Listener, opts *ListenOptions) (listenerProvider, error)
	// dialMTU is the path MTU a Dial toward remote asks for, given the
	// one its options ask for (0 for the default).
	dialMTU(asked int, remote netip.AddrPort) int
	dial(ctx context.Context, d *Device, remote netip.AddrPort, port uint16, o *DialOptions) (*Conn, error)
}

// nicOwner is the optional part of a deviceProvider that runs the NIC
// itself, and so has its QP table, its region table (which package
// nic/fabric's fi_mr domains register in) and its link's faults: the
// embedded provider. An attached device's are its daemon's.
type nicOwner interface {
	setFaults(in FaultInjector)
	maxQPs() int
	memory() *mr.Table
	allQPs() []*QP
}

// pdProvider is a protection domain's provider.
type pdProvider interface {
	handle() mr.PDHandle
	dealloc() error
	regMR(pd *PD, buf []byte, access mr.Access) (*MR, error)
	allocMR(pd *PD, size int, access mr.Access) (*MR, error)
	// regShared registers n bytes of the memfd fd from offset off at
	// iova; m is this process's mapping of them (from skip), which it
	// owns, and fd stays the caller's.
	regShared(pd *PD, m *shm.Mapping, skip, fd int, off int64, n int, iova uint64, access mr.Access) (*MR, error)
	allocMW(pd *PD, typ mr.WindowType) (*MW, error)
	createSRQ(pd *PD, depth, maxSGE int) (*SRQ, error)
	createQP(pd *PD, cfg QPConfig) (*QP, error)
	// sgeAt finds the region of the PD holding [start, start+n) of this
	// process's memory.
	sgeAt(start, n uint64) (verbs.SGE, bool)
}

// mrProvider is a memory region's provider.
type mrProvider interface {
	dereg() error
}

// regionHolder is the optional part of an mrProvider whose region is in
// this process's region table.
type regionHolder interface {
	region() *mr.Region
}

// mwProvider is a memory window's provider.
type mwProvider interface {
	rkey() uint32
	dealloc() error
}

// cqProvider is a completion queue's provider.
type cqProvider interface {
	// poll is CQ.Poll; drive says whether it may process packets when it
	// finds no completion (see CQ.poll).
	poll(wcs []verbs.WC, drive bool) (int, error)
	len() int
	destroy(c *CQ) error
	// park prepares a waiter that found the CQ empty for its sleep. It
	// reports whether it slept already (CQ.sleep, or a wait of its own),
	// and why it woke: false sends the waiter to sleep on CQ.wake.
	park(ctx context.Context, done <-chan struct{}) (slept bool, err error)
}

// srqProvider is a shared receive queue's provider.
type srqProvider interface {
	postRecv(wr *verbs.RecvWR) error
	destroy(s *SRQ) error
}

// qpProvider is a queue pair's provider.
type qpProvider interface {
	typ() verbs.Type
	attr() verbs.Attr
	status() qp.Status
	modify(attr *verbs.Attr, mask verbs.AttrMask) error
	postSend(wr *verbs.SendWR, ring bool) error
	postSends(wrs []verbs.SendWR) (int, error)
	ringDoorbell() error
	postRecv(wr *verbs.RecvWR) error
	destroy() error
}

// trafficCounter is the optional part of a qpProvider that counts the
// QP's traffic in this process.
type trafficCounter interface {
	traffic() verbs.Traffic
}

// listenerProvider is a listener's provider.
type listenerProvider interface {
	acceptRequest(ctx context.Context, l *Listener) (*Request, error)
	close() error
}

// requestProvider is a connection request's provider.
type requestProvider interface {
	accept(r *Request, opts AcceptOptions) (*Conn, error)
	reject(r *Request, private []byte) error
}

// connProvider is a connection's provider.
type connProvider interface {
	done() <-chan struct{}
	err() error
	// disconnect is Conn.Close, called once.
	disconnect(c *Conn)
}

// unsupported is the error of a verb the device's provider does not
// implement, as EOPNOTSUPP is libibverbs's.
func unsupported(what string) error {
	return fmt.Errorf("%s of an attached device: %w", what, ErrNotSupported)
}
