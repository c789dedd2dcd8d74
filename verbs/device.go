package verbs

import "strconv"

// DeviceAttr is what a device supports, as ibv_query_device reports it
// in struct ibv_device_attr (field names in the comments). A limit softnic
// bounds by nothing but memory is math.MaxInt32, the most the C field
// holds.
type DeviceAttr struct {
	FWVer        string // fw_ver
	NodeGUID     uint64 // node_guid: the CA GUID the connection manager sends
	SysImageGUID uint64 // sys_image_guid
	MaxMRSize    uint64 // max_mr_size
	PageSizeCap  uint64 // page_size_cap
	VendorID     uint32 // vendor_id
	VendorPartID uint32 // vendor_part_id
	HWVer        uint32 // hw_ver
	MaxQP        int    // max_qp
	MaxQPWR      int    // max_qp_wr: WRs of one send or receive queue
	Caps         DeviceCaps
	MaxSGE       int // max_sge
	MaxSGERd     int // max_sge_rd
	MaxCQ        int // max_cq
	MaxCQE       int // max_cqe
	MaxMR        int // max_mr
	MaxPD        int // max_pd
	// MaxQPRdAtom and MaxQPInitRdAtom bound the READs and atomics one QP
	// has outstanding as responder and as requester (max_qp_rd_atom,
	// max_qp_init_rd_atom); MaxResRdAtom those of all QPs as responders
	// (max_res_rd_atom).
	MaxQPRdAtom, MaxQPInitRdAtom, MaxResRdAtom int
	AtomicCap                                  AtomicCap
	MaxMW                                      int // max_mw
	MaxSRQ                                     int // max_srq
	MaxSRQWR                                   int // max_srq_wr
	MaxSRQSGE                                  int // max_srq_sge
	MaxPKeys                                   int // max_pkeys
	// MaxMcastGrp, MaxMcastQPAttach and MaxTotalMcastQPAttach bound the
	// multicast groups of the device, the QPs attached to one group and
	// the attachments of all (max_mcast_grp, max_mcast_qp_attach,
	// max_total_mcast_qp_attach).
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAttach int
	// LocalCAAckDelay is the exponent of the time the device takes to
	// acknowledge (4.096 µs × 2^n; local_ca_ack_delay).
	LocalCAAckDelay uint8
	PhysPortCnt     uint8 // phys_port_cnt
}

// DeviceCaps are the device_cap_flags of ibv_query_device, with the
// values of enum ibv_device_cap_flags.
type DeviceCaps uint32

// The capabilities softnic has.
const (
	CapSysImageGUID   DeviceCaps = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID
	CapRCRNRNakGen    DeviceCaps = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN: RC responders send RNR NAKs
	CapSRQResize      DeviceCaps = 1 << 13 // IBV_DEVICE_SRQ_RESIZE
	CapMemWindow      DeviceCaps = 1 << 17 // IBV_DEVICE_MEM_WINDOW
	CapMemWindowType2 DeviceCaps = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
)

// AtomicCap is how atomic operations are atomic (enum ibv_atomic_cap).
type AtomicCap uint8

const (
	AtomicNone AtomicCap = iota // IBV_ATOMIC_NONE
	AtomicHCA                   // IBV_ATOMIC_HCA: among the device's own atomics
	AtomicGlob                  // IBV_ATOMIC_GLOB: also with the CPUs' atomics
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "AtomicCap(" + strconv.Itoa(int(a)) + ")"
}
