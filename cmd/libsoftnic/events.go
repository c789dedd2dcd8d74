//go:build libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/shm"
)

// A completion channel's events reach the program in one of two ways.
//
// A goroutine per armed CQ waits for the completion (nic.Notification)
// and writes the CQ to the channel's pipe, which ibv_get_cq_event reads,
// and which a program that waits in poll or epoll sees readable.
//
// A thread that waits in ibv_get_cq_event on a blocking channel first
// watches the channel's armed CQs itself for channelWatch (snGetCQEvent),
// and takes the first whose completion came. The goroutine is scheduled
// only once another thread takes it from the processor the caller holds,
// and the pipe then wakes the caller: two thread wakeups per event, which
// the watch saves (qperf's rc_lat with events, both ends on one daemon,
// medians of ten runs: 64.3 µs through the pipe alone, 38.9 µs with the
// watch; 25.2 µs polling).
//
// Each arming is delivered once: by the goroutine or by the watching
// thread, whichever claims it first.

// channelWatch is how long ibv_get_cq_event watches the armed CQs before it
// sleeps on the pipe. A program that waits for its peer's answer waits a
// round trip and the peer's own turn; between two processes on one
// daemon of a 2-CPU host that is often past nic.DefaultWaitSpin, 50 µs
// (qperf's rc_lat, medians of ten runs: 45.0 µs watching 50 µs, 40.2 µs
// watching 100 µs).
const channelWatch = 100 * time.Microsecond

// arming is a CQ armed for its next completion (ibv_req_notify_cq).
type arming struct {
	q         *cq
	channel   *C.struct_sn_channel
	armed     nic.Notification
	solicited bool
	claimed   atomic.Bool // the event is delivered, or the arming cancelled
	stop      context.CancelFunc
}

// claim reports whether the caller is the one to deliver a's event (or to
// cancel it), and if so, no longer counts a among its CQ's and channel's
// armings.
func (a *arming) claim() bool {
	if !a.claimed.CompareAndSwap(false, true) {
		return false
	}
	a.q.armMu.Lock()
	if a.q.arming == a {
		a.q.arming = nil
	}
	a.q.armMu.Unlock()
	armings.remove(a)
	return true
}

// armings are the armings not yet delivered, by channel, for the threads
// that watch them (snGetCQEvent).
var armings armingSet

type armingSet struct {
	mu sync.Mutex
	by map[*C.struct_sn_channel][]*arming
}

func (s *armingSet) add(a *arming) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = make(map[*C.struct_sn_channel][]*arming)
	}
	s.by[a.channel] = append(s.by[a.channel], a)
}

func (s *armingSet) remove(a *arming) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.by[a.channel]
	for i, b := range all {
		if b == a {
			all[i] = all[len(all)-1]
			all[len(all)-1] = nil
			all = all[:len(all)-1]
			break
		}
	}
	if len(all) == 0 {
		delete(s.by, a.channel)
	} else {
		s.by[a.channel] = all
	}
}

// ready returns an arming of channel whose completion came, if any.
func (s *armingSet) ready(channel *C.struct_sn_channel) *arming {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.by[channel] {
		if a.armed.Written() {
			return a
		}
	}
	return nil
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
	q.armMu.Lock()
	old := q.arming
	q.armMu.Unlock()
	if old != nil && !old.claimed.Load() { // one claimed is over: its event is on its way
		if !old.solicited || solicited {
			return 0
		}
		old.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &arming{q: q, channel: (*C.struct_sn_channel)(unsafe.Pointer(c.channel)),
		armed: q.c.Notify(solicited), solicited: solicited, stop: cancel}
	q.armMu.Lock()
	q.arming = a
	q.armMu.Unlock()
	armings.add(a)
	q.notifying.Go(func() { a.notify(ctx) })
	return 0
}

// notify waits for the completion a is armed for, then, unless a thread
// watching the channel took it, writes the CQ's address to the channel's
// pipe.
func (a *arming) notify(ctx context.Context) {
	if err := a.armed.Wait(ctx); err != nil && ctx.Err() != nil {
		return
	}
	if a.claim() {
		a.deliver()
	}
}

// deliver writes a's event to its channel's pipe.
func (a *arming) deliver() {
	var b [8]byte
	*(*uintptr)(unsafe.Pointer(&b)) = uintptr(unsafe.Pointer(a.q.cq))
	atomic.AddInt32((*int32)(unsafe.Pointer(&a.channel.pending)), 1)
	unix.Write(int(a.channel.w), b[:])
}

// cancel ends a without an event, unless it was delivered already.
func (a *arming) cancel() {
	if a.claim() {
		a.stop()
	}
}

// disarm ends the CQ's arming, if any, without an event, and waits for
// the goroutines of its armings, one that is writing its event too.
func (q *cq) disarm() {
	q.reqMu.Lock()
	defer q.reqMu.Unlock()
	q.armMu.Lock()
	a := q.arming
	q.armMu.Unlock()
	if a != nil {
		a.cancel()
	}
	q.notifying.Wait()
}

// snGetCQEvent watches the armed CQs of channel for channelWatch, giving up
// the CPU between looks, and returns the first whose completion came,
// its event taken; nil when none came, or when the pipe holds an event
// already, for ibv_get_cq_event to wait on the pipe (sn_watch_channel in
// abi/verbs.c).
//
//export snGetCQEvent
func snGetCQEvent(channel *C.struct_sn_channel) *C.struct_sn_cq {
	pending := (*int32)(unsafe.Pointer(&channel.pending))
	end := time.Now().Add(channelWatch)
	for atomic.LoadInt32(pending) == 0 && time.Now().Before(end) {
		if a := armings.ready(channel); a != nil && a.claim() {
			a.stop()
			return a.q.cq
		}
		shm.Yield()
	}
	return nil
}
