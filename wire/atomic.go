package wire

import "encoding/binary"

// Sizes of the atomic headers.
const (
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
)

// AtomicETH is a view of an Atomic Extended Transport Header (IBTA 9.3.3.2),
// carried by COMPARE SWAP and FETCH ADD requests:
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
//	|                 Swap (or Add) Data                            |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Compare Data                                  |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicETH []byte

const (
	atomicVA      = 0
	atomicRKey    = 8
	atomicSwapAdd = 12
	atomicCompare = 20
)

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64 // 8-byte aligned remote address
	RKey    uint32
	SwapAdd uint64 // the swap value of COMPARE SWAP, the addend of FETCH ADD
	Compare uint64 // the compare value of COMPARE SWAP; unused by FETCH ADD
}

// VA returns the remote virtual address.
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a[atomicVA:]) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[atomicRKey:]) }

// SwapAdd returns the swap (COMPARE SWAP) or add (FETCH ADD) operand.
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[atomicSwapAdd:]) }

// Compare returns the compare operand.
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[atomicCompare:]) }

// SetVA sets the remote virtual address.
func (a AtomicETH) SetVA(va uint64) { binary.BigEndian.PutUint64(a[atomicVA:], va) }

// SetRKey sets the remote key.
func (a AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(a[atomicRKey:], k) }

// SetSwapAdd sets the swap or add operand.
func (a AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(a[atomicSwapAdd:], v) }

// SetCompare sets the compare operand.
func (a AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(a[atomicCompare:], v) }

// Fields returns the header's fields.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
}

// Encode writes f into the header.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	a.SetVA(f.VA)
	a.SetRKey(f.RKey)
	a.SetSwapAdd(f.SwapAdd)
	a.SetCompare(f.Compare)
}

// AtomicAckETH is a view of an Atomic Acknowledge Extended Transport Header
// (IBTA 9.3.5.3), which follows the AETH of an ATOMIC ACKNOWLEDGE and holds
// the value the target held before the operation:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Original Remote Data                       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicAckETH []byte

// AtomicAckETHFields holds the field of an AtomicAckETH.
type AtomicAckETHFields struct {
	OrigData uint64
}

// OrigData returns the original remote data.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// SetOrigData sets the original remote data.
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// Fields returns the header's field.
func (a AtomicAckETH) Fields() AtomicAckETHFields {
	return AtomicAckETHFields{OrigData: a.OrigData()}
}

// Encode writes f into the header.
func (a AtomicAckETH) Encode(f *AtomicAckETHFields) { a.SetOrigData(f.OrigData) }
