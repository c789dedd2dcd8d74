// Package hooks is how the embedded device (package nic/internal/embedded,
// behind package nic) lends itself to the daemon side of attach mode
// (package nic/attachd), which serves it to attached processes: the
// interfaces each side implements for the other,
// and the functions package nic sets at init to reach into its public
// types for the daemon; and the few helpers both sides share (MapShared,
// UserName, Queue). Only nic and the packages under it can import it, so
// nic's public API shows none of it.
//
// This package cannot name nic's types (nic imports it), so each function
// that takes or returns one is a variable of type any holding a func over
// them, with the func's type in its comment; package attachd asserts each
// to that type once, at init. This is how grpc-go's internal package hands
// unexported functionality from package grpc to the packages beside it.
package hooks

import (
	"fmt"
	"math"
	"os/user"
	"strconv"
	"sync"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// Functions package nic sets at init.
var (
	// DeviceLogger returns the logger of a device (Config.Logger).
	DeviceLogger any // func(*nic.Device) *slog.Logger
	// Embedded returns the embedded device behind d, false if d is
	// attached to a daemon itself.
	Embedded any // func(d *nic.Device) (Device, bool)
	// CQ returns the CQ of package qp behind an embedded device's CQ.
	CQ any // func(*nic.CQ) *qp.CQ
	// SRQ returns the SRQ of package qp behind an embedded device's SRQ.
	SRQ any // func(*nic.SRQ) *qp.SRQ
	// SetQueues has the QP that cfg creates take its work requests from
	// q, and tell q what it is done with.
	SetQueues any // func(cfg *nic.QPConfig, q Queues)
	// AcceptWith is Request.Accept with a QP made with cfg rather than
	// the listener's configuration (when opts.UseQP is nil).
	AcceptWith any // func(r *nic.Request, opts nic.AcceptOptions, cfg nic.QPConfig) (*nic.Conn, error)
	// Abandon rejects a request with reason after a local failure.
	Abandon any // func(r *nic.Request, reason mad.RejectReason)
)

// Device is the embedded device as the daemon serving it sees it.
type Device interface {
	// SetBusyPoller has the device's reader poll p too while the device
	// busy-polls (Config.BusyPoll); clear removes p. A device that does
	// not busy-poll ignores p.
	SetBusyPoller(p BusyPoller) (clear func())
	// Drive reads what the device's socket holds and processes it on the
	// caller's goroutine, unless another goroutine is processing (which
	// then reads it): the daemon calls it after it sent packets to the
	// device itself (QP.FlushLocked), which the socket holds as soon as
	// they are sent.
	Drive()
	// Poll is Drive for a daemon that spins waiting for an attached
	// process to post: it also keeps the device's reader off the socket,
	// and sends what the device holds back for a poll, until StopPolling,
	// which the daemon calls before it sleeps.
	Poll()
	StopPolling()
}

// BusyPoller is what the reader of a device that busy-polls polls besides
// its socket: the daemon's queues of its attached processes.
type BusyPoller interface {
	// BusyPolling tells that the reader starts (on) or stops polling.
	BusyPolling(on bool)
	// PollRings polls once, and reports whether there was work.
	PollRings() bool
}

// Queues is what the daemon hangs on a QP whose queues an attached process
// fills through rings (SetQueues). The device calls the methods ending in
// Locked with the QP's lock held.
type Queues interface {
	// Bind is called once, with the QP, before the QP is published.
	Bind(q QP)
	// PullRecvLocked takes the receive work requests posted since, before
	// the QP takes a packet; PullSendLocked the send work requests, each
	// time the device runs the QP. They report whether there were any.
	PullRecvLocked() bool
	PullSendLocked() bool
	// PublishLocked tells the process what the QP is done with, after it
	// ran.
	PublishLocked()
	// CountPostedLocked adds to st the work requests posted that the QP
	// has not taken yet.
	CountPostedLocked(st *qp.Status)
	// Owner names the process that owns the QP, for the R_Key guard's
	// sources: two processes' QPs are told apart.
	Owner() uint32
	// Failed tells the process that its QP entered the error state by
	// itself, with the status of the completion that moved it there
	// (Config.OnQPError). It is called with the QP's lock held.
	Failed(cause verbs.WCStatus)
}

// QP is a QP of the embedded device as the daemon that fills its queues
// drives it. The device runs it with its lock held.
type QP interface {
	Num() uint32
	Lock()
	TryLock() bool
	Unlock()
	// DestroyedLocked reports whether the QP is destroyed.
	DestroyedLocked() bool
	// TransportLocked is the QP's transport state machine, to post to
	// and read, with the lock held.
	TransportLocked() *qp.QP
	// FlushLocked sends what the QP has to send, from the caller's
	// goroutine, and reports whether the QP is connected to a QP of its
	// own device, whose socket its packets went to (Device.Drive).
	FlushLocked() (self bool)
	// Halt moves the QP to the error state, which flushes its work
	// requests, without ending its connection on that account: the
	// connection is being closed anyway.
	Halt()
}

// MapShared maps the pages of the memfd fd that hold n bytes from offset
// off, and returns the mapping with the offset of the bytes in it: a
// region of shared memory, which the device (PD.RegShared) and the daemon
// (for an attached process's) map alike. The mapping owns fd; on error fd
// is closed.
func MapShared(fd int, off int64, n int) (*shm.Mapping, int, error) {
	if n <= 0 || off < 0 || int64(n) > math.MaxInt64-off {
		shm.CloseFDs([]int{fd})
		return nil, 0, fmt.Errorf("shared region of %d bytes at offset %d: %w", n, off, mr.ErrInvalid)
	}
	skip := int(off % shm.PageSize)
	m, err := shm.MapRange(fd, off-int64(skip), skip+n)
	if err != nil {
		return nil, 0, fmt.Errorf("shared region: %v: %w", err, mr.ErrFault)
	}
	return m, skip, nil
}

// UserName names uid as "uid N (name)", or "uid N" when it has no name.
func UserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// maxQueued bounds the values waiting in a Queue for their consumer;
// more are dropped. A QP fails again only after its program brought it
// back from the error state, so only a consumer that stopped consuming
// fills it.
const maxQueued = 1024

// Queue hands asynchronous events, reported outside the data path (QP
// errors and SRQ limits: Config.OnQPError and OnSRQLimit, the attach
// protocol's qp_error and srq_limit), to one consumer goroutine, in
// order: a QP that enters the error state by itself, or takes an SRQ
// below its limit, posts under its lock, and the data path never waits
// for the consumer.
type Queue[T any] struct {
	mu   sync.Mutex
	vals []T
	wake chan struct{}
}

// NewQueue returns an empty queue.
func NewQueue[T any]() *Queue[T] { return &Queue[T]{wake: make(chan struct{}, 1)} }

// Post queues v for the consumer.
func (e *Queue[T]) Post(v T) {
	e.mu.Lock()
	if len(e.vals) < maxQueued {
		e.vals = append(e.vals, v)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run calls fn with each value posted, in order, until done is closed.
func (e *Queue[T]) Run(done <-chan struct{}, fn func(T)) {
	for {
		select {
		case <-done:
			return
		case <-e.wake:
		}
		e.mu.Lock()
		vals := e.vals
		e.vals = nil
		e.mu.Unlock()
		for _, v := range vals {
			fn(v)
		}
	}
}
