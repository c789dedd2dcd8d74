package nic

// SetGuardRate sets how many R_Key refusals a second a source earns back on
// d (guardRate by default), so that a test's hold outlasts the test.
func SetGuardRate(d *Device, perSecond float64) { d.prov.(*embeddedDevice).guard.rate = perSecond }
