package wire

import "encoding/binary"

// Sizes of the immediate data and invalidate headers.
const (
	ImmDTSize = 4
	IETHSize  = 4
)

// ImmDT is a view of the Immediate Data Extended Transport Header (IBTA
// 9.3.6), carried by the last (or only) packet of a SEND or RDMA WRITE with
// immediate:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Immediate Data                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The value is read big-endian, the byte order in which verbs hands
// imm_data to applications (rxe copies it unchanged).
type ImmDT []byte

// Imm returns the immediate data.
func (i ImmDT) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// SetImm sets the immediate data.
func (i ImmDT) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is a view of the Invalidate Extended Transport Header (IBTA 9.3.7),
// carried by SEND with invalidate; it names the R_Key the responder
// invalidates:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          R_Key                                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey sets the R_Key to invalidate.
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }
