// Package provider is the contract between package nic's public types and
// the providers behind them, as libibverbs's verbs_context_ops is between
// libibverbs and a device's provider: the interfaces a provider's device,
// PD, MR, MW, CQ, SRQ, QP, listener, request and connection implement, the
// options of the verbs that make them, and the little state both sides of
// a CQ or SRQ share, and what both providers connect QPs with
// (ConnectOptions, Connect, rdma_cm's defaults). The embedded provider
// runs the NIC in the process (package nic/internal/embedded); the
// attached one asks a softnic daemon (package nic/internal/attached).
//
// A provider speaks in its own objects, never in nic's: package nic wraps
// each in a public type. What has to come back up goes through Up, which
// the façade gives a provider when it opens the device: a provider has the
// façade wrap each QP it makes (a connection's too), keeps the wrapper
// (QP.Owner) and names QPs by it when it reports their errors. A provider
// recognises only its own objects: another device's is ErrInvalid. What
// one provider lacks is an optional interface (TrafficCounter, Wakeup,
// RegionHolder, Shared) whose absence the façade turns into ErrNotSupported.
package provider

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire/mad"
)

// Up is the façade as a provider sees it.
type Up interface {
	// WrapQP returns the public QP of q, which the provider made in the
	// PD whose public object is pd (PD's owner): the provider keeps it as
	// q's Owner.
	WrapQP(pd any, q QP) any
	// QPError reports that the QP whose public object is q entered the
	// error state by itself (Config.OnQPError).
	QPError(q any, cause verbs.WCStatus)
	// SRQLimit reports that the SRQ whose public object is s reached its
	// armed limit, which is disarmed (Config.OnSRQLimit).
	SRQLimit(s any)
}

// Device is a device's provider.
type Device interface {
	Addr() netip.AddrPort
	MTU() int
	Done() <-chan struct{}
	Features() udp.Features
	PathMTU(dst netip.AddrPort) int
	Counters() []verbs.CounterValue
	Query() verbs.DeviceAttr
	Close() error

	// AllocPD allocates a PD whose public object is owner.
	AllocPD(owner any) (PD, error)
	CreateCQ(depth int, st *CQState) (CQ, error)
	// Listen starts listening on port (0 for one the provider picks) and
	// returns the port listened on.
	Listen(port uint16, opts *ListenOptions) (Listener, uint16, error)
	// DialMTU is the path MTU a Dial toward remote asks for, given the one
	// its options ask for (0 for the default).
	DialMTU(asked int, remote netip.AddrPort) int
	Dial(ctx context.Context, remote netip.AddrPort, port uint16, o *DialOptions) (Connection, error)
	// ListenUD listens on port of rdma_cm's port space ps (UDP or IB),
	// whose requests are service ID resolutions (sidr.go); held, it only
	// holds the port until Listener.Open (ListenOptions.Held).
	ListenUD(port uint16, ps mad.PortSpace, backlog int, held bool) (Listener, uint16, error)
	// Resolve resolves port of rdma_cm's port space o.PortSpace at remote
	// to the UD QP that serves it.
	Resolve(ctx context.Context, remote netip.AddrPort, port uint16, o *ResolveOptions) (Resolution, error)
}

// PD is a protection domain's provider.
type PD interface {
	Handle() mr.PDHandle
	Dealloc() error
	RegMR(buf []byte, access mr.Access) (MR, error)
	AllocMR(size int, access mr.Access) (MR, error)
	// RegShared registers n bytes of the memfd fd from offset off at
	// iova; m is this process's mapping of them (from skip), which it
	// owns, and fd stays the caller's.
	RegShared(m *shm.Mapping, skip, fd int, off int64, n int, iova uint64, access mr.Access) (MR, error)
	AllocMW(typ mr.WindowType) (MW, error)
	// CreateSRQ creates an SRQ whose public object is owner.
	CreateSRQ(owner any, depth, maxSGE int) (SRQ, error)
	CreateQP(cfg QPConfig) (QP, error)
	// SGEAt finds the region of the PD holding [start, start+n) of this
	// process's memory.
	SGEAt(start, n uint64) (verbs.SGE, bool)
}

// MR is a memory region's provider: the memory, its key (lkey == rkey)
// and the address peers use for its first byte.
type MR interface {
	Bytes() []byte
	Key() uint32
	Addr() uint64
	Dereg() error
	// Rereg is MR.Rereg; pd is the new PD when flags has mr.ReregPD, and
	// may be another device's, which Rereg refuses.
	Rereg(flags mr.ReregFlags, pd PD, access mr.Access) error
	// Prefetch is MR.Prefetch.
	Prefetch(addr, n uint64) error
}

// RegionHolder is the optional part of an MR whose region is in this
// process's region table.
type RegionHolder interface {
	Region() *mr.Region
}

// Shared is the optional part of an MR whose memory another process
// writes through a mapping it shares with this one (an attached device's
// region, which its daemon writes peers' data into): loads of the memory
// see those writes without any lock of this process.
type Shared interface {
	Shared()
}

// MW is a memory window's provider.
type MW interface {
	RKey() uint32
	Dealloc() error
}

// CQ is a completion queue's provider.
type CQ interface {
	// Poll is CQ.Poll; drive says whether it may process packets when it
	// finds no completion (see nic's CQ.poll).
	Poll(wcs []verbs.WC, drive bool) (int, error)
	Len() int
	// Written is qp.CQ.Written: the completions written to the CQ, ever,
	// and those of them that wake a CQ armed for solicited ones, which
	// CQ.Notify's arming waits for to change.
	Written() (all, solicited uint32)
	// Discard is CQ.Discard.
	Discard(qpn uint32) int
	// Destroy destroys the CQ unless a QP uses it (CQState.Retire).
	Destroy() error
	// Park prepares a waiter that found the CQ not ready for its sleep:
	// ready says whether the CQ has what it waits for (a completion, Len
	// above 0, or one written since it was armed, Written), and ends its spin
	// and its own wait; a write to the CQ ends a wait too. It reports
	// whether it slept already (CQState.Sleep, or a wait of its own), and
	// why it woke: false sends the waiter to CQState.Sleep.
	Park(ctx context.Context, done <-chan struct{}, ready func() bool) (slept bool, err error)
	// Resize is CQ.Resize.
	Resize(depth int) error
}

// Wakeup is the wakeup descriptor of a CQ whose provider has one (nic's
// CQ.Wakeup): an attached CQ's, which its daemon signals.
type Wakeup interface {
	// WakeupFD is the descriptor, readable while a wakeup waits to be taken.
	WakeupFD() int
	// ArmWakeup asks for a wakeup at the next completion written to the
	// CQ, or with solicitedOnly the next solicited one or one in error.
	ArmWakeup(solicitedOnly bool)
	// DisarmWakeup withdraws the arming, and reports whether a wakeup for
	// it was signalled already (or is on its way).
	DisarmWakeup() (signalled bool)
	// TakeWakeups takes the wakeups signalled, waiting up to wait for one
	// if there is none, and returns how many it took.
	TakeWakeups(wait time.Duration) int
}

// SRQ is a shared receive queue's provider.
type SRQ interface {
	PostRecv(wr *verbs.RecvWR) error
	Attr() verbs.SRQAttr
	Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error
	Destroy() error
}

// QP is a queue pair's provider.
type QP interface {
	Num() uint32
	// Owner is the public QP, Up.WrapQP's.
	Owner() any
	Type() verbs.Type
	Attr() verbs.Attr
	Status() qp.Status
	Modify(attr *verbs.Attr, mask verbs.AttrMask) error
	PostSend(wr *verbs.SendWR, ring bool) error
	PostSends(wrs []verbs.SendWR) (int, error)
	PostSendBatch(wrs []verbs.SendWR) error
	RingDoorbell() error
	PostRecv(wr *verbs.RecvWR) error
	Destroy() error
	// AttachMulticast and DetachMulticast attach the UD QP to an IPv4
	// multicast group, checked by the façade, and detach it.
	AttachMulticast(group netip.Addr) error
	DetachMulticast(group netip.Addr) error
}

// TrafficCounter is the optional part of a QP that counts the QP's traffic
// in this process.
type TrafficCounter interface {
	Traffic() verbs.Traffic
}

// QPConfig creates a QP: nic.QPConfig with its queues' providers.
type QPConfig struct {
	Type                                                    verbs.Type
	SendCQ, RecvCQ                                          CQ // RecvCQ nil is SendCQ
	SRQ                                                     SRQ
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	SignalAll                                               bool
	// Queues are those of an attached process's QP, whose rings a daemon
	// serves (hooks.SetQueues).
	Queues hooks.Queues
}

// Listener is a listener's provider.
type Listener interface {
	AcceptRequest(ctx context.Context) (Request, error)
	// Open has a held listener take requests, with room for backlog
	// (0: the default); on one that takes them it sets the room.
	Open(backlog int) error
	Close() error
}

// ListenOptions are nic.ListenOptions with providers.
type ListenOptions struct {
	PD        PD
	QP        QPConfig
	Backlog   int
	PortSpace mad.PortSpace
	Held      bool // nic.ListenOptions.Held
}

// Request is a connection request's provider.
type Request interface {
	Remote() netip.AddrPort
	// PrivateData is the REQ's, after rdma_cm's header.
	PrivateData() []byte
	Accept(opts *AcceptOptions) (Connection, error)
	// Params is what a QP accepting the request is connected with, by
	// its owner when AcceptOptions.SelfConnect; nil for a resolution.
	Params() *ConnParams
	Reject(private []byte) error
	// AcceptUD answers a request of a UD listener with the UD QP q, of
	// Q_Key qkey.
	AcceptUD(q QP, qkey uint32, private []byte) error
}

// AcceptOptions are nic.AcceptOptions with providers.
type AcceptOptions struct {
	PrivateData                                       []byte
	ResponderResources, InitiatorDepth, RNRRetryCount uint8
	Timeout                                           uint8 // 0: the REQ's
	UseQP                                             QP
	SelfConnect                                       bool
}

// DialOptions are nic.DialOptions, with their defaults set, with providers.
type DialOptions struct {
	PD                                 PD
	QP                                 QPConfig
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	MTU                                int
	Timeout, CMRetries, CMTimeout      uint8
	UseQP                              QP
	PortSpace                          mad.PortSpace
	SelfConnect                        bool
	TrafficClass                       uint8
}

// Connection is a connection Dial or Accept made: its QP (the caller's
// UseQP, or one made for it and destroyed with it), the peer and its
// private data, and the connection's provider.
type Connection struct {
	QP      QP
	Remote  netip.AddrPort
	Private []byte
	Conn    Conn
	// Params is what the dialer's QP is connected with, by its owner, of
	// a Dial with SelfConnect, which waits for Conn.Establish; else nil.
	Params *ConnParams
}

// ConnParams are the attributes a connection's handshake negotiated for
// one side's QP: its peer, the peer's QPN, and the rest of a
// ConnectOptions.
type ConnParams struct {
	Remote    netip.AddrPort
	RemoteQPN uint32
	Options   ConnectOptions
}

// Conn is a connection's provider.
type Conn interface {
	Done() <-chan struct{}
	Err() error
	// Disconnect is Conn.Close, called once.
	Disconnect()
	// Establish sends the RTU of a Dial with SelfConnect.
	Establish() error
}

// Users counts the QPs that use a CQ or an SRQ, which cannot be destroyed
// while any does (EBUSY, as ibv_destroy_cq and ibv_destroy_srq), nor used
// by a new QP once destroyed.
type Users struct {
	mu   sync.Mutex // orders Add and Destroy
	n    int
	dead atomic.Bool // destroyed; read without mu by Poll and PostRecv
}

// Gone reports whether the object was destroyed.
func (u *Users) Gone() bool { return u.dead.Load() }

// Add counts one more user; what names the object in the error.
func (u *Users) Add(what string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dead.Load() {
		return fmt.Errorf("%s was destroyed: %w", what, mr.ErrInvalid)
	}
	u.n++
	return nil
}

// Done counts one user less.
func (u *Users) Done() {
	u.mu.Lock()
	u.n--
	u.mu.Unlock()
}

// Destroy marks the object destroyed unless a QP uses it, and reports
// whether this call did.
func (u *Users) Destroy(what string) (bool, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.dead.Load():
		return false, nil
	case u.n > 0:
		return false, fmt.Errorf("%s is used by %d QPs; destroy them first: %w", what, u.n, mr.ErrBusy)
	}
	u.dead.Store(true)
	return true, nil
}

// CQState is what a CQ's public object and its provider share: the QPs
// that complete to it, and the waiters its writes wake.
type CQState struct {
	Users Users
	wake  chan struct{}
	gone  chan struct{} // closed when the CQ is destroyed
}

// NewCQState returns the state of a new CQ.
func NewCQState() *CQState {
	return &CQState{wake: make(chan struct{}, 1), gone: make(chan struct{})}
}

// Signal wakes a waiter of the CQ, if one sleeps in Sleep.
func (s *CQState) Signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Sleep waits until the CQ is written to (Signal), ctx ends, the device
// closes (done) or the CQ is destroyed.
func (s *CQState) Sleep(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return cm.ErrClosed
	case <-s.gone:
		return cm.ErrClosed
	}
}

// Retire marks the CQ destroyed unless a QP uses it, and wakes its
// waiters.
func (s *CQState) Retire() error {
	did, err := s.Users.Destroy("CQ")
	if did {
		close(s.gone)
	}
	return err
}

// IsClosed reports whether closed, a channel closed by a Close, is closed.
func IsClosed(closed <-chan struct{}) bool {
	select {
	case <-closed:
		return true
	default:
		return false
	}
}

// ListenerClosed is what a call on the listener of port returns once it is
// closed.
func ListenerClosed(port uint16) error {
	return fmt.Errorf("softnic: listener on port %d: %w", port, cm.ErrClosed)
}

// CheckConnQP checks that a QP brought to a connection can make one: an RC
// QP in RESET or INIT. (Whether it is of the device is the provider's to
// check.)
func CheckConnQP(q QP) error {
	if q.Type() != verbs.RC {
		return fmt.Errorf("a connection's QP must be an RC QP of its device: %w", mr.ErrInvalid)
	}
	if st := q.Attr().State; st != verbs.Reset && st != verbs.Init {
		return fmt.Errorf("a connection's QP must be in RESET or INIT, not %s: %w", st, mr.ErrInvalid)
	}
	return nil
}
