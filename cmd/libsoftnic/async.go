//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

// Asynchronous events (ibv_get_async_event): IBV_EVENT_QP_FATAL when a QP
// enters the error state by itself (nic.Config.OnQPError: a retry count
// exceeded, a remote access error …), IBV_EVENT_SRQ_LIMIT_REACHED when
// an SRQ reaches the limit ibv_modify_srq armed (nic.Config.OnSRQLimit),
// IBV_EVENT_DEVICE_FATAL when the daemon goes away. They wait in the
// context's queue, here, so that ibv_destroy_qp and ibv_destroy_srq can
// take back those of their QP or SRQ that the program has not read; the context's async_fd, a pipe, holds one byte while the queue is
// not empty, so that the program can poll it. Once the daemon is gone and
// its events are read, ibv_get_async_event fails with EIO and the
// descriptor stays readable, as a disassociated device's does in Linux
// (whose read answers EIO once the queue is empty), so that a program
// waiting for events sees the end rather than wait forever.

// asyncEvents is a context's queue of asynchronous events.
type asyncEvents struct {
	mu     sync.Mutex
	queue  []C.struct_sn_async_event
	qps    map[*nic.QP]*C.struct_sn_qp   // the context's QPs, for OnQPError
	srqs   map[*nic.SRQ]*C.struct_sn_srq // the context's SRQs, for OnSRQLimit
	r, w   int                           // the pipe: async_fd and async_w
	gone   bool                          // the daemon went away: IBV_EVENT_DEVICE_FATAL was queued
	stop   chan struct{}                 // closed by ibv_close_device
	closed chan struct{}                 // closed when the watcher returns
}

func newAsyncEvents(r, w int) *asyncEvents {
	return &asyncEvents{qps: make(map[*nic.QP]*C.struct_sn_qp), srqs: make(map[*nic.SRQ]*C.struct_sn_srq),
		r: r, w: w, stop: make(chan struct{}), closed: make(chan struct{})}
}

// pushLocked queues an event, making the pipe readable if it was not.
func (e *asyncEvents) pushLocked(ev C.struct_sn_async_event) {
	if len(e.queue) == 0 {
		unix.Write(e.w, []byte{0})
	}
	e.queue = append(e.queue, ev)
}

// drainedLocked takes the pipe's byte once the queue is empty, unless
// the daemon is gone.
func (e *asyncEvents) drainedLocked() {
	if len(e.queue) == 0 && !e.gone {
		var b [1]byte
		unix.Read(e.r, b[:])
	}
}

// qpError is nic.Config.OnQPError: the QP's IBV_EVENT_QP_FATAL.
func (e *asyncEvents) qpError(q *nic.QP, _ verbs.WCStatus) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sq := e.qps[q]; sq != nil {
		e.pushLocked(C.struct_sn_async_event{_type: C.IBV_EVENT_QP_FATAL, obj: unsafe.Pointer(sq)}) // its ibv_qp
	}
}

// srqLimit is nic.Config.OnSRQLimit: the SRQ's
// IBV_EVENT_SRQ_LIMIT_REACHED.
func (e *asyncEvents) srqLimit(s *nic.SRQ) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ss := e.srqs[s]; ss != nil {
		e.pushLocked(C.struct_sn_async_event{_type: C.IBV_EVENT_SRQ_LIMIT_REACHED, obj: unsafe.Pointer(&ss.srq)})
	}
}

// watch raises IBV_EVENT_DEVICE_FATAL when the daemon goes away, unless
// the context is closed first.
func (e *asyncEvents) watch(dev *nic.Device) {
	defer close(e.closed)
	select {
	case <-dev.Done():
		select {
		case <-e.stop:
			return
		default:
		}
		e.mu.Lock()
		e.pushLocked(C.struct_sn_async_event{_type: C.IBV_EVENT_DEVICE_FATAL})
		e.gone = true
		e.mu.Unlock()
		deviceGone(dev)
	case <-e.stop:
	}
}

// qpNumbered returns the context's QP numbered qpn, nil if none is.
func (e *asyncEvents) qpNumbered(qpn uint32) *nic.QP {
	e.mu.Lock()
	defer e.mu.Unlock()
	for q := range e.qps {
		if q.Num() == qpn {
			return q
		}
	}
	return nil
}

// addQP makes the QP's errors events of the context.
func (e *asyncEvents) addQP(q *nic.QP, sq *C.struct_sn_qp) {
	e.mu.Lock()
	e.qps[q] = sq
	e.mu.Unlock()
}

// removeQP forgets a QP being destroyed and takes back its events the
// program has not read; it returns how many it has read, for which
// ibv_destroy_qp waits for ibv_ack_async_event.
func (e *asyncEvents) removeQP(q *nic.QP) C.uint32_t {
	e.mu.Lock()
	defer e.mu.Unlock()
	sq := e.qps[q]
	delete(e.qps, q)
	if sq == nil {
		return 0
	}
	e.dropLocked(unsafe.Pointer(sq)) // its ibv_qp
	return sq.async_events
}

// addSRQ makes the SRQ's limit an event of the context.
func (e *asyncEvents) addSRQ(s *nic.SRQ, ss *C.struct_sn_srq) {
	e.mu.Lock()
	e.srqs[s] = ss
	e.mu.Unlock()
}

// removeSRQ is removeQP for an SRQ being destroyed (ibv_destroy_srq).
func (e *asyncEvents) removeSRQ(s *nic.SRQ) C.uint32_t {
	e.mu.Lock()
	defer e.mu.Unlock()
	ss := e.srqs[s]
	delete(e.srqs, s)
	if ss == nil {
		return 0
	}
	e.dropLocked(unsafe.Pointer(&ss.srq))
	return ss.async_events
}

// dropLocked takes back the events of obj, a QP or SRQ, not read yet.
func (e *asyncEvents) dropLocked(obj unsafe.Pointer) {
	kept := e.queue[:0]
	for _, ev := range e.queue {
		if ev.obj != obj {
			kept = append(kept, ev)
		}
	}
	if len(kept) < len(e.queue) {
		clear(e.queue[len(kept):])
		e.queue = kept
		e.drainedLocked()
	}
}

// snNextAsyncEvent takes the oldest event into ev, counting it as read
// for its QP or SRQ; it returns 1 if there was one, 0 if there is none yet, and
// -1 if there will be none: the daemon is gone.
//
//export snNextAsyncEvent
func snNextAsyncEvent(ctx *C.struct_ibv_context, ev *C.struct_sn_async_event) C.int {
	e := deviceOf(ctx).async
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) == 0 {
		if e.gone {
			return -1
		}
		return 0
	}
	*ev = e.queue[0]
	e.queue = e.queue[1:]
	e.drainedLocked()
	switch ev._type {
	case C.IBV_EVENT_QP_FATAL:
		(*C.struct_sn_qp)(ev.obj).async_events++
	case C.IBV_EVENT_SRQ_LIMIT_REACHED:
		(*C.struct_sn_srq)(ev.obj).async_events++
	}
	return 1
}
