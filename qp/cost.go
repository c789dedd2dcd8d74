package qp

import (
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
)

// The heap a QP, CQ or SRQ allocates when it is made, for whoever makes
// them on another's behalf (the softnic daemon for an attached process)
// and must know what a request costs before it grants it. Each counts the
// arrays New, NewCQ and NewSRQ allocate, at their largest: a responder's
// READ and atomic resources are sized when the QP is connected, up to
// MaxRdAtomicLimit.

// HeapCost returns the bytes a QP of cfg allocates for its queues; zero
// sizes stand for the defaults, as in New.
func HeapCost(cfg Config) int64 {
	def := func(v, d int) int64 {
		if v == 0 {
			return int64(d)
		}
		return int64(v)
	}
	sendWR, sendSGE, inline := def(cfg.MaxSendWR, DefaultMaxWR), def(cfg.MaxSendSGE, DefaultMaxSGE), def(cfg.MaxInline, DefaultMaxInline)
	recvSGE := def(cfg.MaxRecvSGE, DefaultMaxSGE)
	n := sendWR*(int64(unsafe.Sizeof(sendWQE{}))+inline) + sendWR*sendSGE*int64(unsafe.Sizeof(verbs.SGE{})+unsafe.Sizeof(mr.Span{}))
	if cfg.SRQ == nil {
		n += queueCost(def(cfg.MaxRecvWR, DefaultMaxWR), recvSGE)
	}
	n += max(recvSGE, MaxSGE) * int64(unsafe.Sizeof(verbs.SGE{})+unsafe.Sizeof(mr.Span{}))
	n += MaxRdAtomicLimit*int64(unsafe.Sizeof(resource{})) + (2*MaxRdAtomicLimit+8)*int64(unsafe.Sizeof(response{}))
	return n + int64(unsafe.Sizeof(QP{}))
}

// CQHeapCost returns the bytes a CQ of depth entries allocates.
func CQHeapCost(depth int) int64 {
	return int64(depth)*int64(unsafe.Sizeof(verbs.WC{})) + int64(unsafe.Sizeof(CQ{}))
}

// SRQHeapCost returns the bytes an SRQ of depth work requests of up to
// maxSGE elements allocates.
func SRQHeapCost(depth, maxSGE int) int64 {
	return queueCost(int64(depth), int64(maxSGE)) + int64(unsafe.Sizeof(SRQ{}))
}

// queueCost is the bytes of a receive queue (newRecvQueue).
func queueCost(depth, maxSGE int64) int64 {
	return depth*int64(unsafe.Sizeof(recvWQE{})) + depth*maxSGE*int64(unsafe.Sizeof(verbs.SGE{}))
}
