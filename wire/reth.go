package wire

import "encoding/binary"

// RETHSize is the length of the RDMA Extended Transport Header.
const RETHSize = 16

// RETH is a view of an RDMA Extended Transport Header (IBTA 9.3.3.1), carried
// by the first packet of an RDMA WRITE, by READ requests, FLUSH and ATOMIC
// WRITE:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (VA)                      |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Remote Key (R_Key)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          DMA Length                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RETH []byte

const (
	rethVA     = 0
	rethRKey   = 8
	rethDMALen = 12
)

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64 // remote virtual address (or offset for zero-based regions)
	RKey   uint32
	DMALen uint32 // length of the whole message in bytes
}

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r[rethVA:]) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[rethRKey:]) }

// DMALen returns the DMA length of the message.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[rethDMALen:]) }

// SetVA sets the remote virtual address.
func (r RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(r[rethVA:], va) }

// SetRKey sets the remote key.
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[rethRKey:], k) }

// SetDMALen sets the DMA length.
func (r RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(r[rethDMALen:], n) }

// Fields returns the header's fields.
func (r RETH) Fields() RETHFields {
	return RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()}
}

// Encode writes f into the header.
func (r RETH) Encode(f *RETHFields) {
	r.SetVA(f.VA)
	r.SetRKey(f.RKey)
	r.SetDMALen(f.DMALen)
}
