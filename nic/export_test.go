package nic

// SetGuardRate sets how many R_Key refusals a second a source earns back on
// d (guardRate by default), so that a test's hold outlasts the test.
func SetGuardRate(d *Device, perSecond float64) { d.prov.(*embeddedDevice).guard.rate = perSecond }

// HoldProgress takes the progress role of d, an embedded device, as the
// goroutine that processes its packets holds it, until release is called:
// what arrives meanwhile waits in the socket, as it does while that
// goroutine is descheduled.
func HoldProgress(d *Device) (release func()) {
	role := &d.prov.(*embeddedDevice).prog.role
	role.Lock()
	return role.Unlock
}
