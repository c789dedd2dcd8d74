package nic

import (
	"math"
	"os"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/qp"
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

func (d *embeddedDevice) Query() DeviceAttr {
	guid := cm.GUID(d.local)
	maxQP := d.maxQPs() - 1 // QP1, the connection manager's, holds one
	return DeviceAttr{
		FWVer:           "softnic",
		NodeGUID:        guid,
		SysImageGUID:    guid,
		MaxMRSize:       mr.MaxRegionSize,
		PageSizeCap:     uint64(os.Getpagesize()),
		VendorID:        0xffffff, // none assigned, as rxe's
		MaxQP:           maxQP,
		MaxQPWR:         qp.MaxQPWR,
		Caps:            CapSysImageGUID | CapRCRNRNakGen | CapSRQResize | CapMemWindow | CapMemWindowType2,
		MaxSGE:          qp.MaxSGE,
		MaxSGERd:        qp.MaxSGE,
		MaxCQ:           math.MaxInt32,
		MaxCQE:          qp.MaxCQE,
		MaxMR:           mr.MaxKeys,
		MaxPD:           math.MaxInt32,
		MaxQPRdAtom:     qp.MaxRdAtomicLimit,
		MaxQPInitRdAtom: qp.MaxRdAtomicLimit,
		MaxResRdAtom:    qp.MaxRdAtomicLimit * maxQP,
		// What rxe reports, and all a program may count on: atomic among
		// the device's own atomics.
		AtomicCap:       AtomicHCA,
		MaxMW:           mr.MaxKeys,
		MaxSRQ:          math.MaxInt32,
		MaxSRQWR:        qp.MaxSRQWR,
		MaxSRQSGE:       qp.MaxSGE,
		MaxPKeys:        1,
		LocalCAAckDelay: 15, // rxe's
		PhysPortCnt:     1,
	}
}
