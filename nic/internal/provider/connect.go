package provider

import (
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// ConnectOptions are the attributes a QP is moved through INIT → RTR → RTS
// with (nic.QP.Connect, and the connection manager with the attributes it
// negotiated). Zero fields take the defaults noted.
type ConnectOptions struct {
	// LocalPSN is the first PSN this QP sends; RemotePSN the first it
	// expects (the peer's LocalPSN).
	LocalPSN, RemotePSN wire.PSN
	// MTU is the path MTU (default: Device.PathMTU toward the peer).
	MTU int
	// Access is what the peer may do to this QP's memory (default remote
	// read, write and atomic).
	Access mr.Access
	// Timeout is the local ACK timeout exponent (default 14: 4.096 µs ×
	// 2^14 ≈ 67 ms, what perftest and rdma_cm use).
	Timeout uint8
	// RetryCnt and RNRRetry bound retransmissions (default 7 each: forever,
	// as rxe does).
	RetryCnt, RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code (default 12: 0.64 ms).
	MinRNRTimer uint8
	// MaxRdAtomic and MaxDestRdAtomic bound outstanding READ/ATOMICs as
	// requester and responder (default 16 each).
	MaxRdAtomic, MaxDestRdAtomic uint8
	// QKey is a UD QP's Q_Key (default 0x11111111).
	QKey uint32
	// TrafficClass is the IP header's DSCP and ECN byte of the QP's packets
	// (verbs.Attr.TrafficClass; default 0).
	TrafficClass uint8
}

// SetDefaults sets o's zero fields to their defaults; pathMTU is the
// default MTU.
func (o *ConnectOptions) SetDefaults(pathMTU int) {
	def := func(v *uint8, x uint8) {
		if *v == 0 {
			*v = x
		}
	}
	if o.MTU == 0 {
		o.MTU = pathMTU
	}
	if o.Access == 0 {
		o.Access = mr.RemoteRead | mr.RemoteWrite | mr.RemoteAtomic
	}
	def(&o.Timeout, 14)
	def(&o.RetryCnt, 7)
	def(&o.RNRRetry, 7)
	def(&o.MinRNRTimer, CMMinRNRTimer)
	def(&o.MaxRdAtomic, 16)
	def(&o.MaxDestRdAtomic, 16)
	if o.QKey == 0 {
		o.QKey = 0x11111111
	}
}

// Connect moves q from RESET to RTS, connected to QP remoteQPN at remote,
// with exactly the attributes in o (no defaults: the connection manager
// passes negotiated values, some of which may be zero); deviceMTU is the
// largest path MTU of q's device.
func Connect(q QP, deviceMTU int, remote netip.AddrPort, remoteQPN uint32, o *ConnectOptions) error {
	if o.MTU > deviceMTU {
		return fmt.Errorf("path MTU %d exceeds the device MTU %d: %w", o.MTU, deviceMTU, mr.ErrInvalid)
	}
	steps := []struct {
		attr verbs.Attr
		mask verbs.AttrMask
	}{
		{verbs.Attr{State: verbs.Init, AccessFlags: o.Access, QKey: o.QKey}, verbs.AttrState | verbs.AttrAccessFlags},
		{verbs.Attr{State: verbs.RTR, Remote: remote, TrafficClass: o.TrafficClass, PathMTU: o.MTU, DestQPN: remoteQPN,
			RQPSN: o.RemotePSN, MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer},
			verbs.AttrState | verbs.AttrRemote | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
		{verbs.Attr{State: verbs.RTS, SQPSN: o.LocalPSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
			RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic}, verbs.AttrState | verbs.AttrSQPSN},
	}
	switch q.Type() {
	case verbs.RC:
		steps[1].mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		steps[2].mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxRdAtomic
	case verbs.UD:
		steps[0].mask = verbs.AttrState | verbs.AttrQKey
		steps[1].mask = verbs.AttrState | verbs.AttrPathMTU
	}
	for _, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("connect QP %#x to %v QP %#x: %w", q.Num(), remote, remoteQPN, err)
		}
	}
	return nil
}

// Defaults of the connection manager, those of Linux's rdma_cm.
const (
	CMDefaultRdAtomic   = 16 // responder resources and initiator depth asked for
	CMDefaultRetry      = 7  // transport retry_cnt and rnr_retry
	CMDefaultAckTimeout = 14 // local ACK timeout: 4.096 µs × 2^14 ≈ 67 ms
	CMDefaultCMTimeout  = 20 // CM response timeout: 4.096 µs × 2^20 ≈ 4.3 s (CMA_CM_RESPONSE_TIMEOUT)
	CMDefaultCMRetries  = 15 // CMA_MAX_CM_RETRIES
	CMDefaultBacklog    = 128
	// CMMinRNRTimer is the RNR NAK timer of connected QPs, QP.Connect's
	// default (0.64 ms). Linux's CM leaves it 0, which codes 655 ms.
	CMMinRNRTimer = 12
)
