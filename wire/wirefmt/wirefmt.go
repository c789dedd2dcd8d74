// Package wirefmt prints RoCEv2 packets for people: the one-line summary
// that softnic decode, the demo and the ladders show for a packet, and the
// listing of every field of every header behind decode -v. Package wire
// decodes the packets; package wire/mad prints the CM MADs they carry to
// QP1 with these lines.
package wirefmt

import (
	"strconv"

	"github.com/softnic/softnic/wire"
)

// AppendSummary appends a one-line description of p to dst, without a
// newline: the opcode name, destination QP, PSN and AckReq bit, the fields of
// every extension header, and the payload length, as in
//
//	RC RDMA Write Only qp=0x000011 psn=0xebcb9b ackreq=1 va=0x0000563c2a3e2000 rkey=0x00005ce0 dmalen=64 payload=64
//
// Package wire/mad's AppendPacketSummary adds the summary of a CM MAD to
// QP1 after it.
//
// It does not allocate if dst has room. p must hold a decoded packet.
func AppendSummary(dst []byte, p *wire.Packet) []byte {
	op := p.OpCode()
	dst = op.AppendString(dst)
	dst = append(dst, " qp="...)
	dst = wire.AppendHex(dst, uint64(p.BTH.DestQP()), 6)
	dst = append(dst, " psn="...)
	dst = wire.AppendHex(dst, uint64(p.BTH.PSN()), 6)
	dst = append(dst, " ackreq="...)
	dst = appendBool(dst, p.BTH.AckReq())
	if p.DETH != nil {
		dst = append(dst, " qkey="...)
		dst = wire.AppendHex(dst, uint64(p.DETH.QKey()), 8)
		dst = append(dst, " srcqp="...)
		dst = wire.AppendHex(dst, uint64(p.DETH.SrcQP()), 6)
	}
	if p.FETH != nil {
		dst = append(dst, " plt="...)
		dst = appendUint(dst, uint64(p.FETH.PlacementType()))
		dst = append(dst, " sel="...)
		dst = appendUint(dst, uint64(p.FETH.SelectivityLevel()))
	}
	if p.RETH != nil {
		dst = append(dst, " va="...)
		dst = wire.AppendHex(dst, p.RETH.VA(), 16)
		dst = append(dst, " rkey="...)
		dst = wire.AppendHex(dst, uint64(p.RETH.RKey()), 8)
		dst = append(dst, " dmalen="...)
		dst = appendUint(dst, uint64(p.RETH.DMALen()))
	}
	if p.AtomicETH != nil {
		dst = append(dst, " va="...)
		dst = wire.AppendHex(dst, p.AtomicETH.VA(), 16)
		dst = append(dst, " rkey="...)
		dst = wire.AppendHex(dst, uint64(p.AtomicETH.RKey()), 8)
		if op == wire.OpRCFetchAdd {
			dst = append(dst, " add="...)
			dst = wire.AppendHex(dst, p.AtomicETH.SwapAdd(), 1)
		} else {
			dst = append(dst, " swap="...)
			dst = wire.AppendHex(dst, p.AtomicETH.SwapAdd(), 1)
			dst = append(dst, " compare="...)
			dst = wire.AppendHex(dst, p.AtomicETH.Compare(), 1)
		}
	}
	if p.AETH != nil {
		dst = append(dst, " syndrome="...)
		dst = p.AETH.Syndrome().AppendString(dst)
		dst = append(dst, " msn="...)
		dst = appendUint(dst, uint64(p.AETH.MSN()))
	}
	if p.AtomicAckETH != nil {
		dst = append(dst, " orig="...)
		dst = wire.AppendHex(dst, p.AtomicAckETH.OrigData(), 1)
	}
	if p.ImmDT != nil {
		dst = append(dst, " imm="...)
		dst = wire.AppendHex(dst, uint64(p.ImmDT.Imm()), 8)
	}
	if p.IETH != nil {
		dst = append(dst, " invrkey="...)
		dst = wire.AppendHex(dst, uint64(p.IETH.RKey()), 8)
	}
	dst = append(dst, " payload="...)
	dst = appendUint(dst, uint64(len(p.Payload)))
	return dst
}

// AppendVerbose appends every field of every header of p to dst, one header
// per line, each line indented by two spaces and ending in a newline, so that
// it can follow an AppendSummary line, and last a line of the payload's
// length, the pad and the ICRC. It does not allocate if dst has room. p must
// hold a decoded packet.
//
// It is AppendVerboseHeaders followed by AppendVerboseTrailer: package
// wire/mad's AppendPacketVerbose puts the lines of a CM MAD to QP1 between
// the two.
func AppendVerbose(dst []byte, p *wire.Packet) []byte {
	return AppendVerboseTrailer(AppendVerboseHeaders(dst, p), p)
}

// AppendVerboseHeaders appends the header lines of AppendVerbose.
func AppendVerboseHeaders(dst []byte, p *wire.Packet) []byte {
	b := p.BTH
	dst = append(dst, "  BTH opcode="...)
	dst = wire.AppendHex(dst, uint64(b.OpCode()), 2)
	dst = append(dst, " se="...)
	dst = appendBool(dst, b.SE())
	dst = append(dst, " m="...)
	dst = appendBool(dst, b.MigReq())
	dst = append(dst, " padcnt="...)
	dst = appendUint(dst, uint64(b.PadCount()))
	dst = append(dst, " tver="...)
	dst = appendUint(dst, uint64(b.TVer()))
	dst = append(dst, " pkey="...)
	dst = wire.AppendHex(dst, uint64(b.PKey()), 4)
	dst = append(dst, " fecn="...)
	dst = appendBool(dst, b.FECN())
	dst = append(dst, " becn="...)
	dst = appendBool(dst, b.BECN())
	dst = append(dst, " resv6a="...)
	dst = wire.AppendHex(dst, uint64(b.Resv6a()), 2)
	dst = append(dst, " destqp="...)
	dst = wire.AppendHex(dst, uint64(b.DestQP()), 6)
	dst = append(dst, " ackreq="...)
	dst = appendBool(dst, b.AckReq())
	dst = append(dst, " resv7="...)
	dst = wire.AppendHex(dst, uint64(b.Resv7()), 2)
	dst = append(dst, " psn="...)
	dst = wire.AppendHex(dst, uint64(b.PSN()), 6)
	dst = append(dst, '\n')
	if d := p.DETH; d != nil {
		dst = append(dst, "  DETH qkey="...)
		dst = wire.AppendHex(dst, uint64(d.QKey()), 8)
		dst = append(dst, " resv8="...)
		dst = wire.AppendHex(dst, uint64(d.Resv8()), 2)
		dst = append(dst, " srcqp="...)
		dst = wire.AppendHex(dst, uint64(d.SrcQP()), 6)
		dst = append(dst, '\n')
	}
	if f := p.FETH; f != nil {
		v := f.Fields()
		dst = append(dst, "  FETH plt="...)
		dst = appendUint(dst, uint64(v.PlacementType))
		dst = append(dst, " sel="...)
		dst = appendUint(dst, uint64(v.SelectivityLevel))
		dst = append(dst, " resv="...)
		dst = wire.AppendHex(dst, uint64(v.Resv), 8)
		dst = append(dst, '\n')
	}
	if r := p.RETH; r != nil {
		dst = append(dst, "  RETH va="...)
		dst = wire.AppendHex(dst, r.VA(), 16)
		dst = append(dst, " rkey="...)
		dst = wire.AppendHex(dst, uint64(r.RKey()), 8)
		dst = append(dst, " dmalen="...)
		dst = appendUint(dst, uint64(r.DMALen()))
		dst = append(dst, '\n')
	}
	if a := p.AtomicETH; a != nil {
		dst = append(dst, "  AtomicETH va="...)
		dst = wire.AppendHex(dst, a.VA(), 16)
		dst = append(dst, " rkey="...)
		dst = wire.AppendHex(dst, uint64(a.RKey()), 8)
		dst = append(dst, " swapadd="...)
		dst = wire.AppendHex(dst, a.SwapAdd(), 16)
		dst = append(dst, " compare="...)
		dst = wire.AppendHex(dst, a.Compare(), 16)
		dst = append(dst, '\n')
	}
	if a := p.AETH; a != nil {
		dst = append(dst, "  AETH syndrome="...)
		dst = wire.AppendHex(dst, uint64(a.Syndrome()), 2)
		dst = append(dst, ' ')
		dst = a.Syndrome().AppendString(dst)
		dst = append(dst, " msn="...)
		dst = appendUint(dst, uint64(a.MSN()))
		dst = append(dst, '\n')
	}
	if a := p.AtomicAckETH; a != nil {
		dst = append(dst, "  AtomicAckETH orig="...)
		dst = wire.AppendHex(dst, a.OrigData(), 16)
		dst = append(dst, '\n')
	}
	if i := p.ImmDT; i != nil {
		dst = append(dst, "  ImmDT imm="...)
		dst = wire.AppendHex(dst, uint64(i.Imm()), 8)
		dst = append(dst, '\n')
	}
	if i := p.IETH; i != nil {
		dst = append(dst, "  IETH rkey="...)
		dst = wire.AppendHex(dst, uint64(i.RKey()), 8)
		dst = append(dst, '\n')
	}
	return dst
}

// AppendVerboseTrailer appends the last line of AppendVerbose: the
// payload's length, the pad and the ICRC.
func AppendVerboseTrailer(dst []byte, p *wire.Packet) []byte {
	dst = append(dst, "  payload="...)
	dst = appendUint(dst, uint64(len(p.Payload)))
	dst = append(dst, " pad="...)
	dst = appendUint(dst, uint64(p.BTH.PadCount()))
	dst = append(dst, " icrc="...)
	dst = wire.AppendHex(dst, uint64(p.ICRC()), 8)
	return append(dst, '\n')
}

// appendBool appends 1 or 0.
func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, '1')
	}
	return append(dst, '0')
}

// appendUint appends v in decimal.
func appendUint(dst []byte, v uint64) []byte { return strconv.AppendUint(dst, v, 10) }
