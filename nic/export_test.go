package nic

import (
	"runtime"
	"time"
)

// HoldProgress takes the progress role of d, an embedded device, as the
// goroutine that processes its packets holds it, until release is called:
// what arrives meanwhile waits in the socket, as it does while that
// goroutine is descheduled.
func HoldProgress(d *Device) (release func()) {
	role := &d.prov.(*embeddedDevice).prog.role
	role.Lock()
	return role.Unlock
}

// Attending reports whether a waiter of c, an embedded CQ, waits for its
// device's socket itself.
func Attending(c *CQ) bool { return c.prov.(*embeddedCQ).attending.Load() > 0 }

// ParkReader takes d's reader, an embedded device's, off the socket for an
// hour, as CQ waiters that keep coming back to the socket do, and returns
// once it is off.
func ParkReader(d *Device) {
	e := d.prov.(*embeddedDevice)
	e.prog.lastAttend.Store(int64(e.now().Add(time.Hour)))
	e.conn.Interrupt()
	for e.prog.attended.Load() > 0 {
		runtime.Gosched()
	}
}

// WaitersAttend reports whether CQ waiters of d, an embedded device, may
// wait for its socket themselves (not with the portable socket layer).
func WaitersAttend(d *Device) bool { return d.prov.(*embeddedDevice).conn.WaitsInterruptibly() }
