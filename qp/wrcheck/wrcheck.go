// Package wrcheck checks a send work request against what a queue pair's
// send queue takes, whatever its peer: the embedded QP (package qp) refuses
// a post with it, and an attached process checks its posts with the same
// function before they reach the daemon, so that both refuse the same WRs
// with the same errors.
package wrcheck

import (
	"fmt"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
)

// MaxMessageSize is the most bytes one message carries, as the IBTA allows.
const MaxMessageSize = 1 << 31

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
