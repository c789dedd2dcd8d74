package wire

import "encoding/binary"

// FETHSize is the length of the FLUSH Extended Transport Header.
const FETHSize = 4

// FETH is a view of the FLUSH Extended Transport Header (IBTA Annex A19,
// laid out as rxe's rxe_feth), which comes before the RETH of a FLUSH:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Reserved                    |SEL|  PLT  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// PLT is the placement type (bit 0: global visibility, bit 1: persistence)
// and SEL the selectivity level (0: the memory range, 1: the whole region).
type FETH []byte

const (
	fethPLTMask  = 0x0000000f
	fethSELMask  = 0x00000030
	fethSELShift = 4
	fethResvMask = ^uint32(fethPLTMask | fethSELMask)
)

// FETHFields holds every field of a FETH, the reserved bits included.
type FETHFields struct {
	PlacementType    uint8  // 4 bits
	SelectivityLevel uint8  // 2 bits
	Resv             uint32 // the reserved bits 31..6, in place (low 6 bits 0)
}

func (f FETH) word() uint32 { return binary.BigEndian.Uint32(f) }

// PlacementType returns the placement type bits.
func (f FETH) PlacementType() uint8 { return uint8(f.word() & fethPLTMask) }

// SelectivityLevel returns the selectivity level.
func (f FETH) SelectivityLevel() uint8 { return uint8(f.word() & fethSELMask >> fethSELShift) }

// SetPlacementType sets the placement type (its low 4 bits).
func (f FETH) SetPlacementType(t uint8) {
	binary.BigEndian.PutUint32(f, f.word()&^fethPLTMask|uint32(t)&fethPLTMask)
}

// SetSelectivityLevel sets the selectivity level (its low 2 bits).
func (f FETH) SetSelectivityLevel(l uint8) {
	binary.BigEndian.PutUint32(f, f.word()&^fethSELMask|uint32(l)<<fethSELShift&fethSELMask)
}

// Fields returns every field of the header.
func (f FETH) Fields() FETHFields {
	return FETHFields{
		PlacementType:    f.PlacementType(),
		SelectivityLevel: f.SelectivityLevel(),
		Resv:             f.word() & fethResvMask,
	}
}

// Encode writes v into the header; values wider than their field are
// truncated to it.
func (f FETH) Encode(v *FETHFields) {
	binary.BigEndian.PutUint32(f, v.Resv&fethResvMask|
		uint32(v.SelectivityLevel)<<fethSELShift&fethSELMask|
		uint32(v.PlacementType)&fethPLTMask)
}
