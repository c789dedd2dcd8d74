package nic

import (
	"github.com/softnic/softnic/verbs"
)

// DeviceAttr is what a device supports, as ibv_query_device reports it
// (package verbs's).
type DeviceAttr = verbs.DeviceAttr

// DeviceCaps are the device_cap_flags of ibv_query_device (package verbs's).
type DeviceCaps = verbs.DeviceCaps

// The capabilities softnic has.
const (
	CapSysImageGUID   = verbs.CapSysImageGUID   // IBV_DEVICE_SYS_IMAGE_GUID
	CapRCRNRNakGen    = verbs.CapRCRNRNakGen    // IBV_DEVICE_RC_RNR_NAK_GEN: RC responders send RNR NAKs
	CapSRQResize      = verbs.CapSRQResize      // IBV_DEVICE_SRQ_RESIZE
	CapMemWindow      = verbs.CapMemWindow      // IBV_DEVICE_MEM_WINDOW
	CapMemWindowType2 = verbs.CapMemWindowType2 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
)

// AtomicCap is how atomic operations are atomic (enum ibv_atomic_cap;
// package verbs's).
type AtomicCap = verbs.AtomicCap

const (
	AtomicNone = verbs.AtomicNone // IBV_ATOMIC_NONE
	AtomicHCA  = verbs.AtomicHCA  // IBV_ATOMIC_HCA: among the device's own atomics
	AtomicGlob = verbs.AtomicGlob // IBV_ATOMIC_GLOB: also with the CPUs' atomics
)

// Query returns what the device supports, as ibv_query_device does. An
// attached device's limits are the daemon's device's within what the
// daemon lets one process hold (attachd.Config.Limits, in package nic/attachd).
func (d *Device) Query() DeviceAttr { return d.prov.Query() }
