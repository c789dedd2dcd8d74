package wire

import "encoding/binary"

// DETHSize is the length of the Datagram Extended Transport Header.
const DETHSize = 8

// DETH is a view of a Datagram Extended Transport Header (IBTA 9.3.2),
// carried by every UD packet:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Queue Key (Q_Key)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Resv8     |              Source QP                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DETH []byte

const (
	dethQKey  = 0
	dethResv8 = 4
	dethSrcQP = 5
)

// DETHFields holds every field of a DETH, the reserved byte included.
type DETHFields struct {
	QKey  uint32
	Resv8 uint8
	SrcQP uint32 // 24 bits
}

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d[dethQKey:]) }

// Resv8 returns the reserved byte.
func (d DETH) Resv8() uint8 { return d[dethResv8] }

// SrcQP returns the 24-bit source QP number.
func (d DETH) SrcQP() uint32 { return get24(d[dethSrcQP:]) }

// SetQKey sets the queue key.
func (d DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(d[dethQKey:], k) }

// SetSrcQP sets the source QP number (its low 24 bits).
func (d DETH) SetSrcQP(qpn uint32) { put24(d[dethSrcQP:], qpn) }

// Fields returns every field of the header.
func (d DETH) Fields() DETHFields {
	return DETHFields{QKey: d.QKey(), Resv8: d.Resv8(), SrcQP: d.SrcQP()}
}

// Encode writes f into the header; SrcQP is truncated to 24 bits.
func (d DETH) Encode(f *DETHFields) {
	d.SetQKey(f.QKey)
	d[dethResv8] = f.Resv8
	d.SetSrcQP(f.SrcQP)
}
