package embedded

import (
	"net/netip"
	"runtime"
	"time"

	"github.com/softnic/softnic/nic/internal/hooks"
	"github.com/softnic/softnic/qp"
)

// The tests of package embedded_test, which open devices through package
// nic, reach a device's embedded provider through the daemon's hook
// (hooks.Embedded).

// HoldProgress takes the progress role of d, as the goroutine that
// processes its packets holds it, until release is called: what arrives
// meanwhile waits in the socket, as it does while that goroutine is
// descheduled.
func HoldProgress(d hooks.Device) (release func()) {
	role := &d.(*Device).prog.role
	role.Lock()
	return role.Unlock
}

// Attending reports whether a CQ waiter of d waits for its socket itself
// (the reader does not: see ParkReader).
func Attending(d hooks.Device) bool { return d.(*Device).prog.attended.Load() > 0 }

// ParkReader takes d's reader off the socket for an hour, as CQ waiters
// that keep coming back to the socket do, and returns once it is off.
func ParkReader(d hooks.Device) {
	e := d.(*Device)
	e.prog.lastAttend.Store(int64(e.now().Add(time.Hour)))
	e.conn.Interrupt()
	for e.prog.attended.Load() > 0 {
		runtime.Gosched()
	}
}

// WaitersAttend reports whether CQ waiters of d may wait for its socket
// themselves (not with the portable socket layer).
func WaitersAttend(d hooks.Device) bool { return d.(*Device).conn.WaitsInterruptibly() }

// SourceFor is the address d sends from toward dst.
func SourceFor(d hooks.Device, dst netip.AddrPort) netip.AddrPort {
	return d.(*Device).sourceFor(dst)
}

// PollUnderWay makes d look as it does while an application's poll
// processes a batch (drive), from now on, and takes the reader off the
// socket; the poll ends, without another, when end is called, which wakes
// the reader to look.
func PollUnderWay(d hooks.Device) (end func()) {
	e := d.(*Device)
	p := &e.prog
	p.driving.Store(true)
	p.lastPoll.Store(int64(e.now()))
	e.conn.Interrupt()
	return func() {
		p.driving.Store(false)
		e.resumeReader()
	}
}

// StallTimers keeps d's timer goroutine busy until release is called, as
// a goroutine that gets no CPU is, and returns once it is.
func StallTimers(d hooks.Device) (release func()) {
	e := d.(*Device)
	running, done := make(chan struct{}), make(chan struct{})
	e.timers.Add(e.now(), wakeup{fn: func(qp.Time) {
		close(running)
		<-done
	}})
	<-running
	return func() { close(done) }
}

// RingAll rings the doorbell of every QP of d, as a poll rings those of
// the QPs posted to while an application polled (ringDoorbells).
func RingAll(d hooks.Device) {
	e := d.(*Device)
	p := &e.prog
	for _, pq := range e.QPs() {
		q := pq.(*QP)
		q.mu.Lock()
		if !q.rung {
			q.rung = true
			p.doorbells.mu.Lock()
			p.doorbells.qps = append(p.doorbells.qps, q)
			p.doorbells.mu.Unlock()
		}
		q.mu.Unlock()
	}
	b := e.getBatch()
	e.ringDoorbells(b)
	e.putBatch(b)
}
