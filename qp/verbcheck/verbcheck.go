// Package verbcheck checks what the verbs hand a queue pair before the QP
// (package qp) takes it, whatever its peer: a send work request against
// what the QP's send queue takes (SendCaps.Check), which an attached
// process applies to its posts too, so that both refuse the same WRs with
// the same errors, and the attributes of a modify (Attr).
package verbcheck

import (
	"fmt"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// Limits the checks apply.
const (
	MaxMessageSize   = 1 << 31 // bytes in one message, as the IBTA allows
	MaxRdAtomicLimit = 128     // max_rd_atomic and max_dest_rd_atomic
)

// ErrInvalid (EINVAL) is what Check refuses a WR with; it is package mr's
// (and so package qp's) ErrInvalid.
var ErrInvalid = mr.ErrInvalid

// SendCaps is what a QP's send queue takes, whatever its peer: Check
// refuses a send WR beyond it. An attached process checks its posts with
// the same function, so that both refuse the same WRs.
type SendCaps struct {
	Type        verbs.Type
	MaxSGE      int    // max_send_sge
	MaxInline   int    // max_inline_data
	MTU         uint32 // the payload of one packet: a UD message fits in one
	MaxRdAtomic uint8  // max_rd_atomic: 0 refuses READ and atomics
}

// Check returns ErrInvalid for a send WR a QP with capabilities c cannot
// carry: an opcode of another transport, more SGEs or inline bytes than
// it takes, a message too long (for UD, longer than the MTU), an atomic
// without its one 8-byte SGE, a READ or atomic with max_rd_atomic 0, a
// BIND_MW without its request, a UD send without its destination.
func (c SendCaps) Check(wr *verbs.SendWR) error {
	op := wr.Opcode
	ok := false
	switch c.Type {
	case verbs.RC:
		ok = op >= verbs.WRWrite && op <= verbs.WRBindMW
	case verbs.UC:
		ok = op.IsWrite() || op == verbs.WRSend || op == verbs.WRSendImm || op.IsLocal()
	case verbs.UD:
		ok = op == verbs.WRSend || op == verbs.WRSendImm
	}
	if !ok {
		return fmt.Errorf("%s QP cannot post %s: %w", c.Type, op, ErrInvalid)
	}
	if len(wr.SGL) > c.MaxSGE {
		return fmt.Errorf("%d SGEs, max_send_sge is %d: %w", len(wr.SGL), c.MaxSGE, ErrInvalid)
	}
	n := uint64(0)
	if wr.Flags&verbs.Inline != 0 {
		if op.IsReadOrAtomic() || op.IsLocal() {
			return fmt.Errorf("%s cannot be inline: %w", op, ErrInvalid)
		}
		if len(wr.Inline) > c.MaxInline {
			return fmt.Errorf("%d bytes inline, max_inline_data is %d: %w", len(wr.Inline), c.MaxInline, ErrInvalid)
		}
		n = uint64(len(wr.Inline))
	} else {
		for i := range wr.SGL {
			n += uint64(wr.SGL[i].Length)
			if wr.SGL[i].Addr+uint64(wr.SGL[i].Length) < wr.SGL[i].Addr {
				return fmt.Errorf("SGE %d wraps the address space: %w", i, ErrInvalid)
			}
		}
	}
	switch {
	case n > MaxMessageSize:
		return fmt.Errorf("message of %d bytes exceeds %d: %w", n, MaxMessageSize, ErrInvalid)
	case c.Type == verbs.UD && n > uint64(c.MTU):
		return fmt.Errorf("UD message of %d bytes exceeds the MTU %d: %w", n, c.MTU, ErrInvalid)
	case op.IsAtomic() && (len(wr.SGL) != 1 || wr.SGL[0].Length != 8):
		return fmt.Errorf("%s needs one 8-byte SGE for the original value: %w", op, ErrInvalid)
	case op.IsReadOrAtomic() && c.MaxRdAtomic == 0:
		return fmt.Errorf("%s with max_rd_atomic 0: %w", op, ErrInvalid)
	case op == verbs.WRBindMW && wr.Bind == nil:
		return fmt.Errorf("BIND_MW without a bind request: %w", ErrInvalid)
	case c.Type == verbs.UD && (!wr.Dest.IsValid() || wr.DestQPN == 0 || wr.DestQPN > 0xFFFFFF):
		return fmt.Errorf("UD send needs a destination address and QPN: %w", ErrInvalid)
	}
	return nil
}

// Attr returns ErrInvalid for attributes a that no QP takes, of those mask m
// says a modify applies: a path MTU other than 256 to 4096, a timeout,
// retry count or RNR timer beyond its field, more READs and atomics in
// flight than MaxRdAtomicLimit, a QPN or PSN beyond 24 bits, an invalid
// remote address, access flags a QP does not have.
func Attr(a *verbs.Attr, m verbs.AttrMask) error {
	switch {
	case m&verbs.AttrPathMTU != 0 && !validMTU(a.PathMTU):
		return fmt.Errorf("path MTU %d is not 256, 512, 1024, 2048 or 4096: %w", a.PathMTU, ErrInvalid)
	case m&verbs.AttrTimeout != 0 && a.Timeout > 31:
		return fmt.Errorf("timeout %d > 31: %w", a.Timeout, ErrInvalid)
	case m&verbs.AttrRetryCnt != 0 && a.RetryCnt > 7:
		return fmt.Errorf("retry_cnt %d > 7: %w", a.RetryCnt, ErrInvalid)
	case m&verbs.AttrRNRRetry != 0 && a.RNRRetry > 7:
		return fmt.Errorf("rnr_retry %d > 7: %w", a.RNRRetry, ErrInvalid)
	case m&verbs.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return fmt.Errorf("min_rnr_timer %d > 31: %w", a.MinRNRTimer, ErrInvalid)
	case m&verbs.AttrMaxRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomicLimit:
		return fmt.Errorf("max_rd_atomic %d > %d: %w", a.MaxRdAtomic, MaxRdAtomicLimit, ErrInvalid)
	case m&verbs.AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomicLimit:
		return fmt.Errorf("max_dest_rd_atomic %d > %d: %w", a.MaxDestRdAtomic, MaxRdAtomicLimit, ErrInvalid)
	case m&verbs.AttrDestQPN != 0 && (a.DestQPN == 0 || a.DestQPN > 0xFFFFFF):
		return fmt.Errorf("destination QPN %#x: %w", a.DestQPN, ErrInvalid)
	case m&verbs.AttrRemote != 0 && (!a.Remote.IsValid() || a.Remote.Port() == 0):
		return fmt.Errorf("remote address %v: %w", a.Remote, ErrInvalid)
	case m&verbs.AttrAccessFlags != 0 && a.AccessFlags&^(mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic|mr.LocalWrite) != 0:
		return fmt.Errorf("QP access flags %v: %w", a.AccessFlags, ErrInvalid)
	case m&verbs.AttrRQPSN != 0 && a.RQPSN > wire.PSNMask, m&verbs.AttrSQPSN != 0 && a.SQPSN > wire.PSNMask:
		return fmt.Errorf("PSN beyond 24 bits: %w", ErrInvalid)
	}
	return nil
}

// validMTU reports whether n is an IBTA path MTU.
func validMTU(n int) bool {
	return n == 256 || n == 512 || n == 1024 || n == 2048 || n == 4096
}
