package wire

import "encoding/binary"

// BTHSize is the length of the Base Transport Header.
const BTHSize = 12

// BTH is a view of a Base Transport Header (IBTA 9.2; byte 4 as RoCEv2
// Annex A17.3 and rxe use it, with FECN and BECN in its top bits):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |         Partition Key         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  Resv6a   |            Destination QP                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|    Resv7    |        Packet Sequence Number (PSN)           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S: solicited event, M: migration state, Pad: pad count, TVer: transport
// header version (0), F/B: forward/backward explicit congestion notification,
// A: acknowledge request. The ICRC treats byte 4 as variant and masks it.
//
// The accessors do not check the length; Packet.Decode does.
type BTH []byte

const (
	bthOpCode = 0
	bthFlags  = 1 // S, M, Pad, TVer
	bthPKey   = 2
	bthECN    = 4 // F, B, Resv6a
	bthDestQP = 4 // low 24 bits of the word at offset 4
	bthAck    = 8 // A, Resv7
	bthPSN    = 8 // low 24 bits of the word at offset 8

	bthSE        = 0x80
	bthMigReq    = 0x40
	bthPadMask   = 0x30
	bthPadShift  = 4
	bthTVerMask  = 0x0f
	bthFECN      = 0x80
	bthBECN      = 0x40
	bthResv6Mask = 0x3f
	bthAckReq    = 0x80
	bthResv7Mask = 0x7f
	qpnMask      = 1<<24 - 1
)

// BTHFields holds every field of a BTH, reserved bits included, so that
// decoding and encoding round-trips any header byte for byte.
type BTHFields struct {
	OpCode   OpCode
	SE       bool   // solicited event
	MigReq   bool   // migration state
	PadCount uint8  // 0..3; Fields.EncodeHeaders computes it from the payload length
	TVer     uint8  // transport header version, 0
	PKey     uint16 // partition key; rxe uses the default 0xFFFF
	FECN     bool
	BECN     bool
	Resv6a   uint8  // 6 reserved bits
	DestQP   uint32 // 24 bits
	AckReq   bool
	Resv7    uint8 // 7 reserved bits
	PSN      PSN
}

// OpCode returns the opcode.
func (b BTH) OpCode() OpCode { return OpCode(b[bthOpCode]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the migration state bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// PadCount returns the number of pad bytes (0..3) between payload and ICRC.
func (b BTH) PadCount() uint8 { return (b[bthFlags] & bthPadMask) >> bthPadShift }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthECN]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthECN]&bthBECN != 0 }

// Resv6a returns the six reserved bits of byte 4.
func (b BTH) Resv6a() uint8 { return b[bthECN] & bthResv6Mask }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthDestQP:]) & qpnMask }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[bthAck]&bthAckReq != 0 }

// Resv7 returns the seven reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[bthAck] & bthResv7Mask }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[bthPSN:]) & PSNMask) }

// SetOpCode sets the opcode.
func (b BTH) SetOpCode(op OpCode) { b[bthOpCode] = byte(op) }

// SetSE sets the solicited event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], bthSE, v) }

// SetPadCount sets the pad count (taken modulo 4).
func (b BTH) SetPadCount(n uint8) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | (n<<bthPadShift)&bthPadMask
}

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// SetFECN sets the forward congestion notification bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthECN], bthFECN, v) }

// SetBECN sets the backward congestion notification bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthECN], bthBECN, v) }

// SetDestQP sets the destination QP number (its low 24 bits).
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP+1:], qpn) }

// SetAckReq sets the acknowledge request bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAck], bthAckReq, v) }

// SetPSN sets the packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[bthPSN+1:], uint32(p)) }

// Fields returns every field of the header.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		OpCode:   b.OpCode(),
		SE:       b.SE(),
		MigReq:   b.MigReq(),
		PadCount: b.PadCount(),
		TVer:     b.TVer(),
		PKey:     b.PKey(),
		FECN:     b.FECN(),
		BECN:     b.BECN(),
		Resv6a:   b.Resv6a(),
		DestQP:   b.DestQP(),
		AckReq:   b.AckReq(),
		Resv7:    b.Resv7(),
		PSN:      b.PSN(),
	}
}

// Encode writes f into the header. Values wider than their field are
// truncated to it.
func (b BTH) Encode(f *BTHFields) {
	b[bthOpCode] = byte(f.OpCode)
	b[bthFlags] = bit(f.SE, bthSE) | bit(f.MigReq, bthMigReq) |
		(f.PadCount<<bthPadShift)&bthPadMask | f.TVer&bthTVerMask
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	b[bthECN] = bit(f.FECN, bthFECN) | bit(f.BECN, bthBECN) | f.Resv6a&bthResv6Mask
	put24(b[bthDestQP+1:], f.DestQP)
	b[bthAck] = bit(f.AckReq, bthAckReq) | f.Resv7&bthResv7Mask
	put24(b[bthPSN+1:], uint32(f.PSN))
}

// put24 writes the low 24 bits of v big-endian into b[0:3].
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

// get24 reads a 24-bit big-endian value from b[0:3].
func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

// bit returns mask if v is set, else 0.
func bit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}

// setBit sets or clears mask in *b.
func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}
