//go:build libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/shm"
)

// A completion channel is an epoll set, whose descriptor is the one
// programs poll (ibv_comp_channel.fd). It holds the wakeup descriptor of
// each of the channel's CQs (nic.CQ.Wakeup), which the daemon signals
// itself when a CQ armed by ibv_req_notify_cq gets the completion it was
// armed for: a program asleep on the channel, in ibv_get_cq_event, poll
// or epoll, is woken by the daemon, with no thread of its own in between.
// It holds too the read end of a pipe, for the events libsoftnic raises
// itself (deliver): a completion that came while ibv_req_notify_cq armed
// the CQ, which the daemon may not have seen armed, and the events of the
// armed CQs once the daemon is gone.
//
// A thread that waits in ibv_get_cq_event on a blocking channel first
// watches the channel's armed CQs itself for channelWatch (snWatchChannel)
// and takes the first whose completion came, with no system call; it
// sleeps on the channel only after (sn_wait_channel in abi/verbs.c).
//
// Each arming is delivered once: by the thread that takes the daemon's
// wakeup (snTakeWakeup), a watching thread, or libsoftnic itself, whichever
// claims it first. One that claims it without the wakeup withdraws the
// CQ's arming from the daemon, and takes the wakeup if the daemon had
// signalled already (settle): the channel stays readable only while an
// event waits.

// channelWatch is how long ibv_get_cq_event watches the armed CQs before it
// sleeps on the channel. A program that waits for its peer's answer waits
// a round trip and the peer's own turn; between two processes on one
// daemon of a 2-CPU host that is often past nic.DefaultWaitSpin, 50 µs
// (qperf's rc_lat, medians of ten runs: 45.0 µs watching 50 µs, 40.2 µs
// watching 100 µs).
const channelWatch = 100 * time.Microsecond

// settleWait bounds how long a thread that claimed an arming the daemon
// had just signalled waits for the signal, which the daemon sends right
// after it disarms the CQ.
const settleWait = 10 * time.Millisecond

// channel is the Go side of a completion channel: its CQs, by the handle
// their wakeups carry in the epoll set, and their armings not delivered.
type channel struct {
	c       *C.struct_sn_channel
	mu      sync.Mutex
	cqs     map[C.uintptr_t]*cq
	armings []*arming
}

// channels are the open channels, for the events of a device gone.
var channels sync.Map // *channel → struct{}

// snCreateChannel makes the Go side of c, whose epoll set and pipe the
// caller made.
//
//export snCreateChannel
func snCreateChannel(c *C.struct_sn_channel) {
	ch := &channel{c: c, cqs: make(map[C.uintptr_t]*cq)}
	c.h = C.uintptr_t(cgo.NewHandle(ch))
	channels.Store(ch, struct{}{})
}

// snDestroyChannel forgets c, which no CQ uses.
//
//export snDestroyChannel
func snDestroyChannel(c *C.struct_sn_channel) {
	channels.Delete(handleOf[*channel](c.h))
	cgo.Handle(c.h).Delete()
}

// snAddCQ puts the wakeup of c, a CQ made with channel ch, in the
// channel's epoll set.
//
//export snAddCQ
func snAddCQ(ch *C.struct_sn_channel, c *C.struct_sn_cq) C.int {
	q := handleOf[*cq](c.h)
	w, ok := q.c.Wakeup()
	if !ok {
		return C.EOPNOTSUPP
	}
	q.wake, q.channel = w, handleOf[*channel](ch.h)
	q.channel.mu.Lock()
	defer q.channel.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	*(*uint64)(unsafe.Pointer(&ev.Fd)) = uint64(c.h)
	if err := unix.EpollCtl(int(ch.ch.fd), unix.EPOLL_CTL_ADD, w.FD(), &ev); err != nil {
		if errno, ok := err.(unix.Errno); ok {
			return C.int(errno)
		}
		return C.EINVAL
	}
	q.channel.cqs[c.h] = q
	return 0
}

// removeCQ takes q out of its channel's epoll set, before it is destroyed.
func (ch *channel) removeCQ(q *cq) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	unix.EpollCtl(int(ch.c.ch.fd), unix.EPOLL_CTL_DEL, q.wake.FD(), nil)
	delete(ch.cqs, q.cq.h)
}

// restoreCQ puts q back, its destruction refused.
func (ch *channel) restoreCQ(q *cq) { snAddCQ(ch.c, q.cq) }

// arming is a CQ armed for its next completion (ibv_req_notify_cq).
type arming struct {
	q       *cq
	armed   nic.Notification // what the program asked for, as it asked
	claimed atomic.Bool      // the event is delivered, or the arming cancelled
}

// claim reports whether the caller is the one to deliver a's event (or to
// cancel it), and if so, no longer counts a among its CQ's and channel's
// armings.
func (a *arming) claim() bool {
	if !a.claimed.CompareAndSwap(false, true) {
		return false
	}
	q := a.q
	q.armMu.Lock()
	if q.arming == a {
		q.arming = nil
	}
	q.armMu.Unlock()
	ch := q.channel
	ch.mu.Lock()
	for i, b := range ch.armings {
		if b == a {
			ch.armings = append(ch.armings[:i], ch.armings[i+1:]...)
			break
		}
	}
	ch.mu.Unlock()
	return true
}

// settle withdraws from the daemon the arming of q, whose event the caller
// claimed without its wakeup, and takes the wakeup if the daemon signalled
// it already.
func (q *cq) settle() {
	if q.wake.Disarm() {
		q.wake.Take(settleWait)
	}
}

// deliver writes the CQ of a, an arming the caller claimed, to its
// channel's pipe, unless the CQ is being destroyed.
func (a *arming) deliver() {
	var b [8]byte
	*(*uintptr)(unsafe.Pointer(&b)) = uintptr(unsafe.Pointer(a.q.cq))
	ch := a.q.channel
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if a.q.destroyed {
		return
	}
	atomic.AddInt32((*int32)(unsafe.Pointer(&ch.c.pending)), 1)
	unix.Write(int(ch.c.w), b[:])
}

// current returns the CQ's arming not delivered yet, if any.
func (q *cq) current() *arming {
	q.armMu.Lock()
	defer q.armMu.Unlock()
	return q.arming
}

// snReqNotifyCQ is ops.req_notify_cq: the next completion written to the
// CQ, with solicited_only the next solicited one or one in error, is an
// event of the CQ's channel, for ibv_get_cq_event. The completions already
// in the CQ do not count (nic.CQ.Notify): a program that arms the CQ again
// before it polls the completion that woke it is not woken by that one
// again. Arming for any completion a CQ armed for solicited ones widens
// the arming, as in rxe; the other way it stays as wide.
//
//export snReqNotifyCQ
func snReqNotifyCQ(c *C.struct_ibv_cq, solicitedOnly C.int) C.int {
	if c.channel == nil {
		return C.EINVAL
	}
	q := handleOf[*cq]((*C.struct_sn_cq)(unsafe.Pointer(c)).h)
	solicited := solicitedOnly != 0
	q.reqMu.Lock()
	defer q.reqMu.Unlock()
	if old := q.current(); old != nil {
		// As wide already, or its completion came: its event is on its way.
		if !old.armed.SolicitedOnly() || solicited || old.armed.Written() {
			return 0
		}
		old.claim() // widened: the new arming overwrites the daemon's
	}
	a := &arming{q: q, armed: q.c.Notify(solicited)}
	q.armMu.Lock()
	q.arming = a
	q.armMu.Unlock()
	ch := q.channel
	ch.mu.Lock()
	ch.armings = append(ch.armings, a)
	ch.mu.Unlock()
	q.wake.Arm(solicited)
	// A completion written while the CQ was being armed may have found it
	// not armed yet, and the daemon signalled nothing.
	if a.armed.Written() && a.claim() {
		q.settle()
		a.deliver()
	}
	return 0
}

// disarm ends the CQ's arming, if any, without an event, as the CQ is
// destroyed, and takes its events not read out of the channel's pipe, as
// libibverbs's kernel drops a destroyed CQ's events not read: the channel
// never gives a CQ destroyed.
func (q *cq) disarm() {
	q.reqMu.Lock()
	defer q.reqMu.Unlock()
	if a := q.current(); a != nil {
		a.claim()
	}
	q.channel.purge(q)
}

// purge marks q destroyed, so that no event of its is delivered from now
// on, and takes those delivered out of the channel's pipe, putting the
// others back in order. A reader that finds the pipe empty meanwhile
// waits for the next event (sn_read_pipe).
func (ch *channel) purge(q *cq) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	q.destroyed = true
	cq := q.cq
	var kept [][8]byte
	dropped := int32(0)
	for {
		var b [8]byte
		if n, _ := unix.Read(int(ch.c.r), b[:]); n != len(b) {
			break
		}
		if *(*uintptr)(unsafe.Pointer(&b)) == uintptr(unsafe.Pointer(cq)) {
			dropped++
		} else {
			kept = append(kept, b)
		}
	}
	for _, b := range kept {
		unix.Write(int(ch.c.w), b[:])
	}
	atomic.AddInt32((*int32)(unsafe.Pointer(&ch.c.pending)), -dropped)
}

// snWatchChannel watches the armed CQs of channel for channelWatch, giving
// up the CPU between looks, and returns the first whose completion came,
// its event taken; nil when none came, or when the pipe holds an event
// already, for ibv_get_cq_event to sleep on the channel (sn_wait_channel
// in abi/verbs.c).
//
//export snWatchChannel
func snWatchChannel(c *C.struct_sn_channel) *C.struct_sn_cq {
	ch := handleOf[*channel](c.h)
	pending := (*int32)(unsafe.Pointer(&c.pending))
	end := time.Now().Add(channelWatch)
	for atomic.LoadInt32(pending) == 0 && time.Now().Before(end) {
		if a := ch.ready(); a != nil && a.claim() {
			a.q.settle()
			return a.q.cq
		}
		shm.Yield()
	}
	return nil
}

// ready returns an arming of ch whose completion came, if any.
func (ch *channel) ready() *arming {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, a := range ch.armings {
		if a.armed.Written() {
			return a
		}
	}
	return nil
}

// snTakeWakeup takes the wakeup the daemon signalled for the CQ of handle h
// of channel c, which the channel's epoll set reported, and returns the CQ
// if it delivers its arming's event; nil for a wakeup of an arming
// delivered already, or of a CQ destroyed meanwhile. A wakeup that finds
// the arming's completion not come yet (a daemon that signals a CQ armed
// for solicited completions at any) arms the CQ again.
//
//export snTakeWakeup
func snTakeWakeup(c *C.struct_sn_channel, h C.uintptr_t) *C.struct_sn_cq {
	ch := handleOf[*channel](c.h)
	ch.mu.Lock()
	q := ch.cqs[h]
	ch.mu.Unlock()
	if q == nil {
		return nil
	}
	q.wake.Take(0)
	a := q.current()
	if a == nil {
		return nil
	}
	if !a.armed.Written() {
		q.wake.Arm(a.armed.SolicitedOnly())
		if !a.armed.Written() {
			return nil
		}
	}
	if !a.claim() {
		return nil
	}
	// An arming whose wakeup came late (settle gave up on it) leaves the
	// next one armed: withdraw it, or its wakeup would come for nothing.
	q.wake.Disarm()
	return q.cq
}

// deviceGone delivers the events of every arming of dev's CQs: the daemon
// is gone, and no completion will come, nor any wakeup.
func deviceGone(dev *nic.Device) {
	channels.Range(func(k, _ any) bool {
		ch := k.(*channel)
		ch.mu.Lock()
		var gone []*arming
		for _, a := range ch.armings {
			if a.q.dev == dev {
				gone = append(gone, a)
			}
		}
		ch.mu.Unlock()
		for _, a := range gone {
			if a.claim() {
				a.deliver()
			}
		}
		return true
	})
}
