package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// ErrCorrupt is wrapped by the decoders for a slot or a ring whose
// contents no well-behaved peer writes: an unknown opcode or flag, more
// SGEs or inline bytes than the queue takes, non-zero reserved bytes, an
// index beyond the ring.
var ErrCorrupt = errors.New("corrupt shared queue")

var le = binary.LittleEndian

// A send WQE: a 96-byte header, then NumSGE SGEs of 16 bytes (address,
// length, lkey) or, for an inline WR, InlineLen bytes of data.
//
//	 0  wr_id        u64
//	 8  opcode       u8   qp.WROpcode
//	 9  flags        u8   qp.SendFlags
//	10  num_sge      u8
//	11  dest family  u8   UD destination: 0 none, 4 IPv4, 6 IPv6
//	12  inline_len   u32
//	16  imm          u32
//	20  invalidate   u32  SEND WITH INVALIDATE and LOCAL_INV rkey
//	24  remote_addr  u64
//	32  rkey         u32
//	36  dest_qpn     u32
//	40  compare_add  u64
//	48  swap         u64
//	56  qkey         u32
//	60  dest_port    u16
//	62  tclass       u8   the UD destination's traffic class; zero without one
//	63  reserved     u8   zero
//	64  dest_addr    16 bytes (IPv4 as IPv4-mapped IPv6)
//	80  reserved     16 bytes, zero
//	96  SGEs or inline data
//
// A BIND_MW WQE carries its bind request (mr.BindRequest) in the header
// instead, the window's range and key where a WR names its remote range,
// and no SGE or inline data:
//
//	24  addr         u64  the window's start in the region's address space
//	32  window_key   u32
//	40  length       u64
//	80  new_key      u32
//	84  region_key   u32
//	88  access       u32  mr.Access
//	92  reserved     u32  zero
//
// Every other field of a BIND_MW WQE after the flags is zero.
const (
	sendHeaderSize = 96
	sgeSize        = 16
)

// SendSlotSize returns the slot size of a send queue whose WRs carry up to
// maxSGE SGEs or maxInline bytes inline.
func SendSlotSize(maxSGE, maxInline int) int {
	return align8(sendHeaderSize + max(maxSGE*sgeSize, maxInline))
}

func align8(n int) int { return (n + 7) &^ 7 }

// SendLimits bound what a send WQE of a queue may carry.
type SendLimits struct{ MaxSGE, MaxInline int }

// sendFlags are the flags a WQE may carry.
const sendFlags = verbs.Signaled | verbs.Fence | verbs.Solicited | verbs.Inline

// EncodeSend writes wr into slot. It refuses a WR the slot cannot hold.
func EncodeSend(slot []byte, wr *verbs.SendWR) error {
	if wr.Opcode == verbs.WRBindMW {
		return encodeBind(slot, wr)
	}
	n := len(wr.SGL) * sgeSize
	if wr.Flags&verbs.Inline != 0 {
		n = len(wr.Inline)
	}
	switch {
	case len(wr.SGL) > 255 || sendHeaderSize+n > len(slot):
		return fmt.Errorf("WR of %d SGEs, %d bytes inline does not fit a %d-byte slot: %w", len(wr.SGL), len(wr.Inline), len(slot), qp.ErrInvalid)
	}
	h := putHeader(slot, wr)
	le.PutUint32(h[16:], wr.Imm)
	le.PutUint32(h[20:], wr.InvalidateRKey)
	le.PutUint64(h[24:], wr.RemoteAddr)
	le.PutUint32(h[32:], wr.RKey)
	le.PutUint32(h[36:], wr.DestQPN)
	le.PutUint64(h[40:], wr.CompareAdd)
	le.PutUint64(h[48:], wr.Swap)
	le.PutUint32(h[56:], wr.QKey)
	if h[11] = putAddr(h[64:80], h[60:62], wr.Dest); h[11] != 0 {
		h[62] = wr.TrafficClass
	}
	if wr.Flags&verbs.Inline != 0 {
		le.PutUint32(h[12:], uint32(len(wr.Inline)))
		copy(slot[sendHeaderSize:], wr.Inline)
		return nil
	}
	h[10] = byte(len(wr.SGL))
	putSGEs(slot[sendHeaderSize:], wr.SGL)
	return nil
}

// putHeader clears the header of slot, writes the fields every WR has and
// returns the header.
func putHeader(slot []byte, wr *verbs.SendWR) []byte {
	h := slot[:sendHeaderSize]
	clear(h)
	le.PutUint64(h[0:], wr.ID)
	h[8], h[9] = byte(wr.Opcode), byte(wr.Flags)
	return h
}

// encodeBind writes a BIND_MW WR into slot.
func encodeBind(slot []byte, wr *verbs.SendWR) error {
	b := wr.Bind
	switch {
	case b == nil:
		return fmt.Errorf("%s without a bind request: %w", wr.Opcode, qp.ErrInvalid)
	case len(wr.SGL) != 0 || len(wr.Inline) != 0 || wr.Flags&verbs.Inline != 0:
		return fmt.Errorf("%s with SGEs or inline data: %w", wr.Opcode, qp.ErrInvalid)
	case len(slot) < sendHeaderSize:
		return fmt.Errorf("%s does not fit a %d-byte slot: %w", wr.Opcode, len(slot), qp.ErrInvalid)
	}
	h := putHeader(slot, wr)
	le.PutUint64(h[24:], b.Addr)
	le.PutUint32(h[32:], b.WindowKey)
	le.PutUint64(h[40:], b.Length)
	le.PutUint32(h[80:], b.NewKey)
	le.PutUint32(h[84:], b.RegionKey)
	le.PutUint32(h[88:], uint32(b.Access))
	return nil
}

// DecodeSend copies the WQE in slot, shared memory the other side may
// still be writing, into wr: its SGL into sgl's backing array (capacity at
// least lim.MaxSGE), its inline data into inline's (capacity at least
// lim.MaxInline), a BIND_MW's request into *bind. Every byte of the slot
// is read once, into private memory, before it is checked. The WR's ID is
// set even when the WQE is refused (ErrCorrupt), so that its failure can
// name it.
func DecodeSend(slot []byte, lim SendLimits, wr *verbs.SendWR, sgl []verbs.SGE, inline []byte, bind *mr.BindRequest) error {
	var h [sendHeaderSize]byte
	if len(slot) < sendHeaderSize {
		return fmt.Errorf("send slot of %d bytes: %w", len(slot), ErrCorrupt)
	}
	copy(h[:], slot)
	*wr = verbs.SendWR{
		ID: le.Uint64(h[0:]), Opcode: verbs.WROpcode(h[8]), Flags: verbs.SendFlags(h[9]),
		Imm: le.Uint32(h[16:]), InvalidateRKey: le.Uint32(h[20:]),
		RemoteAddr: le.Uint64(h[24:]), RKey: le.Uint32(h[32:]), DestQPN: le.Uint32(h[36:]),
		CompareAdd: le.Uint64(h[40:]), Swap: le.Uint64(h[48:]), QKey: le.Uint32(h[56:]), TrafficClass: h[62],
	}
	nSGE, inlineLen := int(h[10]), le.Uint32(h[12:])
	if wr.Opcode == verbs.WRBindMW {
		return decodeBind(&h, wr, bind)
	}
	switch {
	case wr.Opcode < verbs.WRWrite || wr.Opcode > verbs.WRLocalInv:
		return fmt.Errorf("send WQE opcode %d: %w", h[8], ErrCorrupt)
	case wr.Flags&^sendFlags != 0:
		return fmt.Errorf("send WQE flags %#x: %w", h[9], ErrCorrupt)
	case h[63] != 0 || !zero(h[80:96]):
		return fmt.Errorf("send WQE reserved bytes set: %w", ErrCorrupt)
	}
	dest, err := getAddr(h[11], h[64:80], h[60:62])
	switch {
	case err != nil:
		return fmt.Errorf("send WQE destination: %w", err)
	case !dest.IsValid() && wr.TrafficClass != 0:
		return fmt.Errorf("send WQE traffic class without a destination: %w", ErrCorrupt)
	}
	wr.Dest = dest
	body := slot[sendHeaderSize:]
	if wr.Flags&verbs.Inline != 0 {
		if nSGE != 0 || inlineLen > uint32(lim.MaxInline) || int(inlineLen) > len(body) || int(inlineLen) > cap(inline) {
			return fmt.Errorf("send WQE with %d SGEs and %d bytes inline, the queue takes %d: %w", nSGE, inlineLen, lim.MaxInline, ErrCorrupt)
		}
		wr.Inline = inline[:inlineLen]
		copy(wr.Inline, body)
		return nil
	}
	if inlineLen != 0 || nSGE > lim.MaxSGE || nSGE*sgeSize > len(body) || nSGE > cap(sgl) {
		return fmt.Errorf("send WQE with %d SGEs and %d bytes inline, the queue takes %d SGEs: %w", nSGE, inlineLen, lim.MaxSGE, ErrCorrupt)
	}
	wr.SGL = getSGEs(body, sgl[:nSGE])
	return nil
}

// decodeBind finishes decoding the BIND_MW WQE whose header is h.
func decodeBind(h *[sendHeaderSize]byte, wr *verbs.SendWR, bind *mr.BindRequest) error {
	switch {
	case wr.Flags&^(sendFlags&^verbs.Inline) != 0:
		return fmt.Errorf("BIND_MW WQE flags %#x: %w", h[9], ErrCorrupt)
	case !zero(h[10:24]) || !zero(h[36:40]) || !zero(h[48:80]) || !zero(h[92:96]):
		return fmt.Errorf("BIND_MW WQE with fields other than its bind request set: %w", ErrCorrupt)
	case bind == nil:
		return fmt.Errorf("BIND_MW WQE where binds are not taken: %w", ErrCorrupt)
	}
	*bind = mr.BindRequest{
		Addr: le.Uint64(h[24:]), WindowKey: le.Uint32(h[32:]), Length: le.Uint64(h[40:]),
		NewKey: le.Uint32(h[80:]), RegionKey: le.Uint32(h[84:]), Access: mr.Access(le.Uint32(h[88:])),
	}
	*wr = verbs.SendWR{ID: wr.ID, Opcode: wr.Opcode, Flags: wr.Flags, Bind: bind}
	return nil
}

// A receive WQE: a 16-byte header, then NumSGE SGEs.
//
//	 0  wr_id     u64
//	 8  num_sge   u8
//	 9  reserved  7 bytes, zero
//	16  SGEs
const recvHeaderSize = 16

// RecvSlotSize returns the slot size of a receive queue of WRs with up to
// maxSGE SGEs.
func RecvSlotSize(maxSGE int) int { return recvHeaderSize + maxSGE*sgeSize }

// EncodeRecv writes wr into slot.
func EncodeRecv(slot []byte, wr *verbs.RecvWR) error {
	if len(wr.SGL) > 255 || recvHeaderSize+len(wr.SGL)*sgeSize > len(slot) {
		return fmt.Errorf("receive WR of %d SGEs does not fit a %d-byte slot: %w", len(wr.SGL), len(slot), qp.ErrInvalid)
	}
	clear(slot[:recvHeaderSize])
	le.PutUint64(slot, wr.ID)
	slot[8] = byte(len(wr.SGL))
	putSGEs(slot[recvHeaderSize:], wr.SGL)
	return nil
}

// DecodeRecv copies the receive WQE in slot into wr, its SGL into sgl's
// backing array (capacity at least maxSGE), as DecodeSend does.
func DecodeRecv(slot []byte, maxSGE int, wr *verbs.RecvWR, sgl []verbs.SGE) error {
	var h [recvHeaderSize]byte
	if len(slot) < recvHeaderSize {
		return fmt.Errorf("receive slot of %d bytes: %w", len(slot), ErrCorrupt)
	}
	copy(h[:], slot)
	*wr = verbs.RecvWR{ID: le.Uint64(h[0:])}
	n := int(h[8])
	switch {
	case !zero(h[9:16]):
		return fmt.Errorf("receive WQE reserved bytes set: %w", ErrCorrupt)
	case n > maxSGE || n > cap(sgl) || recvHeaderSize+n*sgeSize > len(slot):
		return fmt.Errorf("receive WQE with %d SGEs, the queue takes %d: %w", n, maxSGE, ErrCorrupt)
	}
	wr.SGL = getSGEs(slot[recvHeaderSize:], sgl[:n])
	return nil
}

// A completion (CQE), 64 bytes.
//
//	 0  wr_id             u64
//	 8  status            u8   qp.WCStatus
//	 9  opcode            u8   qp.WCOpcode
//	10  flags             u8   qp.WCFlags
//	11  src family        u8   UD receives: 0 none, 4 IPv4, 6 IPv6
//	12  byte_len          u32
//	16  qpn               u32
//	20  imm               u32
//	24  invalidated_rkey  u32
//	28  src_qpn           u32
//	32  src_addr          16 bytes
//	48  src_port          u16
//	50  reserved          14 bytes, zero
const CQESize = 64

// EncodeCQE writes wc into slot.
func EncodeCQE(slot []byte, wc *verbs.WC) {
	s := slot[:CQESize]
	clear(s)
	le.PutUint64(s[0:], wc.ID)
	s[8], s[9], s[10] = byte(wc.Status), byte(wc.Opcode), byte(wc.Flags)
	le.PutUint32(s[12:], wc.ByteLen)
	le.PutUint32(s[16:], wc.QPN)
	le.PutUint32(s[20:], wc.Imm)
	le.PutUint32(s[24:], wc.InvalidatedRKey)
	le.PutUint32(s[28:], wc.SrcQPN)
	s[11] = putAddr(s[32:48], s[48:50], wc.Src)
}

// DecodeCQE copies the completion in slot into wc.
func DecodeCQE(slot []byte, wc *verbs.WC) error {
	var s [CQESize]byte
	if len(slot) < CQESize {
		return fmt.Errorf("completion slot of %d bytes: %w", len(slot), ErrCorrupt)
	}
	copy(s[:], slot)
	*wc = verbs.WC{
		ID: le.Uint64(s[0:]), Status: verbs.WCStatus(s[8]), Opcode: verbs.WCOpcode(s[9]), Flags: verbs.WCFlags(s[10]),
		ByteLen: le.Uint32(s[12:]), QPN: le.Uint32(s[16:]), Imm: le.Uint32(s[20:]),
		InvalidatedRKey: le.Uint32(s[24:]), SrcQPN: le.Uint32(s[28:]),
	}
	if !zero(s[50:]) {
		return fmt.Errorf("completion reserved bytes set: %w", ErrCorrupt)
	}
	src, err := getAddr(s[11], s[32:48], s[48:50])
	wc.Src = src
	return err
}

func putSGEs(b []byte, sgl []verbs.SGE) {
	for i := range sgl {
		e := b[i*sgeSize:]
		le.PutUint64(e, sgl[i].Addr)
		le.PutUint32(e[8:], sgl[i].Length)
		le.PutUint32(e[12:], sgl[i].LKey)
	}
}

func getSGEs(b []byte, sgl []verbs.SGE) []verbs.SGE {
	for i := range sgl {
		e := b[i*sgeSize:]
		sgl[i] = verbs.SGE{Addr: le.Uint64(e), Length: le.Uint32(e[8:]), LKey: le.Uint32(e[12:])}
	}
	return sgl
}

// putAddr writes a into addr (16 bytes) and port (2), and returns its
// family byte.
func putAddr(addr, port []byte, a netip.AddrPort) byte {
	if !a.IsValid() {
		return 0
	}
	ip := a.Addr()
	b := ip.As16()
	copy(addr, b[:])
	le.PutUint16(port, a.Port())
	if ip.Is4() {
		return 4
	}
	return 6
}

func getAddr(family byte, addr, port []byte) (netip.AddrPort, error) {
	ip := netip.AddrFrom16([16]byte(addr))
	switch family {
	case 0:
		if !zero(addr) || le.Uint16(port) != 0 {
			return netip.AddrPort{}, fmt.Errorf("address without a family: %w", ErrCorrupt)
		}
		return netip.AddrPort{}, nil
	case 4:
		if !ip.Is4In6() {
			return netip.AddrPort{}, fmt.Errorf("IPv4 address %v: %w", ip, ErrCorrupt)
		}
		ip = ip.Unmap()
	case 6:
	default:
		return netip.AddrPort{}, fmt.Errorf("address family %d: %w", family, ErrCorrupt)
	}
	return netip.AddrPortFrom(ip, le.Uint16(port)), nil
}

func zero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
