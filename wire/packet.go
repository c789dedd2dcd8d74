package wire

import "encoding/binary"

// ICRCSize is the length of the invariant CRC that ends every packet.
const ICRCSize = 4

// MaxHeaderSize is the largest BTH plus extension headers of any opcode
// (COMPARE SWAP and FETCH ADD: BTH and AtomicETH).
const MaxHeaderSize = BTHSize + AtomicETHSize

// atomicWritePayload is the payload size of ATOMIC WRITE (IBTA Annex A19).
const atomicWritePayload = 8

// Packet is a decoded RoCEv2 packet: views into the buffer passed to Decode,
// nil for the headers the opcode does not carry. A Packet is meant to be
// reused: Decode overwrites every field and allocates nothing.
type Packet struct {
	BTH          BTH
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDT        ImmDT
	IETH         IETH
	DETH         DETH
	FETH         FETH
	Payload      []byte // the payload, without pad and ICRC
	Raw          []byte // the whole packet, BTH through ICRC
}

// Decode parses b, a UDP payload from the BTH to the ICRC, into p. It checks
// every length before any view is used, and returns
//   - ErrTruncated if b ends before the BTH, the extension headers of its
//     opcode, or the ICRC;
//   - ErrBadTVer if the transport header version is not 0;
//   - ErrBadOpCode if the opcode is not one softnic implements;
//   - ErrBadPad if payload and pad are not a multiple of 4 bytes, the pad
//     count exceeds them, or a First or Middle packet is padded;
//   - ErrBadLength if the payload size is not allowed for the opcode: any
//     payload on an opcode that carries none (READ request, ACK, atomics,
//     FLUSH), an empty First or Middle packet, an ATOMIC WRITE of other than
//     8 bytes.
//
// Decode does not check the ICRC, which needs the IP and UDP headers (see
// Envelope), nor anything that needs connection state such as the path MTU.
// On error p is reset to the zero Packet. Decode never panics.
func (p *Packet) Decode(b []byte) error {
	*p = Packet{}
	if len(b) < BTHSize+ICRCSize {
		return ErrTruncated
	}
	bth := BTH(b[:BTHSize])
	if bth.TVer() != 0 {
		return ErrBadTVer
	}
	op := bth.OpCode()
	info := &opTable[op]
	if info.hdrLen == 0 {
		return ErrBadOpCode
	}
	hl := int(info.hdrLen)
	if len(b) < hl+ICRCSize {
		return ErrTruncated
	}
	rest := len(b) - hl - ICRCSize // payload and pad
	if err := checkPayload(info.flags, rest, int(bth.PadCount())); err != nil {
		return err
	}
	p.BTH = bth
	p.RETH = view(b, info, extRETH)
	p.AETH = view(b, info, extAETH)
	p.AtomicETH = view(b, info, extAtomicETH)
	p.AtomicAckETH = view(b, info, extAtomicAckETH)
	p.ImmDT = view(b, info, extImmDT)
	p.IETH = view(b, info, extIETH)
	p.DETH = view(b, info, extDETH)
	p.FETH = view(b, info, extFETH)
	p.Payload = b[hl : hl+rest-int(bth.PadCount()) : hl+rest-int(bth.PadCount())]
	p.Raw = b
	return nil
}

// view returns the extension header e of a packet, or nil if the opcode does
// not carry it. The length has been checked.
func view(b []byte, info *opInfo, e ext) []byte {
	off := int(info.off[e])
	if off == 0 {
		return nil
	}
	return b[off : off+extSize[e] : off+extSize[e]]
}

// checkPayload validates the length of payload plus pad (rest) and the pad
// count of an opcode with the given flags; see Decode.
func checkPayload(flags opFlags, rest, pad int) error {
	if flags&fPayload == 0 {
		switch {
		case pad != 0:
			return ErrBadPad
		case rest != 0:
			return ErrBadLength
		}
		return nil
	}
	switch {
	case rest%4 != 0, pad > rest:
		return ErrBadPad
	case flags&(fFirst|fMiddle) != 0 && pad != 0:
		return ErrBadPad
	case flags&(fFirst|fMiddle) != 0 && rest == 0:
		return ErrBadLength
	case flags&fAtomicWrite != 0 && rest-pad != atomicWritePayload:
		return ErrBadLength
	}
	return nil
}

// OpCode returns the packet's opcode.
func (p *Packet) OpCode() OpCode { return p.BTH.OpCode() }

// ICRC returns the ICRC stored in the packet's last four bytes, which hold it
// little-endian (as rxe writes it: the CRC's bit-reflected byte order). p
// must hold a decoded packet.
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Raw[len(p.Raw)-ICRCSize:]) }

// Fields copies the fields of every header p carries into f and zeroes the
// others, so that f.Encode with p.Payload rebuilds the packet: identical bytes
// except for the pad bytes, which Encode zeroes, and the ICRC, which Seal
// computes.
func (p *Packet) Fields(f *Fields) {
	*f = Fields{BTH: p.BTH.Fields()}
	if p.RETH != nil {
		f.RETH = p.RETH.Fields()
	}
	if p.AETH != nil {
		f.AETH = p.AETH.Fields()
	}
	if p.AtomicETH != nil {
		f.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDT != nil {
		f.ImmDT = p.ImmDT.Imm()
	}
	if p.IETH != nil {
		f.IETH = p.IETH.RKey()
	}
	if p.DETH != nil {
		f.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		f.FETH = p.FETH.Fields()
	}
}

// Fields describes a packet to encode: the BTH and whichever extension
// headers its opcode carries (the others are ignored).
type Fields struct {
	BTH          BTHFields
	RETH         RETHFields
	AETH         AETHFields
	AtomicETH    AtomicETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDT        uint32 // immediate data
	IETH         uint32 // R_Key to invalidate
	DETH         DETHFields
	FETH         FETHFields
}

// Len returns the length of the packet f describes with a payload of
// payloadLen bytes: headers, payload, pad to a multiple of 4, and ICRC. For an
// invalid opcode it counts no headers.
func (f *Fields) Len(payloadLen int) int {
	return f.BTH.OpCode.HeaderLen() + payloadLen + padLen(payloadLen) + ICRCSize
}

// padLen returns the pad count for a payload of n bytes.
func padLen(n int) int { return -n & 3 }

// EncodeHeaders writes the headers of a packet with a payload of payloadLen
// bytes into buf, sets the BTH pad count for that payload (whatever
// f.BTH.PadCount says), and zeroes the pad and the ICRC field. It returns the
// offset at which the caller places the payload, so that payload bytes are
// copied once, straight into the packet; buf[:f.Len(payloadLen)] is then the
// packet, ready for Envelope.Seal. It returns
//   - ErrBadOpCode if f.BTH.OpCode is not valid;
//   - ErrBadTVer if f.BTH.TVer is not 0;
//   - ErrBadLength if payloadLen is not allowed for the opcode (see Decode);
//   - ErrShortBuffer if buf is shorter than f.Len(payloadLen).
//
// Header fields wider than their wire field are truncated to it.
func (f *Fields) EncodeHeaders(buf []byte, payloadLen int) (off int, err error) {
	info := &opTable[f.BTH.OpCode]
	if info.hdrLen == 0 {
		return 0, ErrBadOpCode
	}
	if f.BTH.TVer != 0 {
		return 0, ErrBadTVer
	}
	pad := padLen(payloadLen)
	if payloadLen < 0 || checkPayload(info.flags, payloadLen+pad, pad) != nil {
		return 0, ErrBadLength
	}
	hl := int(info.hdrLen)
	n := hl + payloadLen + pad + ICRCSize
	if len(buf) < n {
		return 0, ErrShortBuffer
	}
	bth := BTH(buf[:BTHSize])
	bth.Encode(&f.BTH)
	bth.SetPadCount(uint8(pad))
	if b := view(buf, info, extRETH); b != nil {
		RETH(b).Encode(&f.RETH)
	}
	if b := view(buf, info, extAETH); b != nil {
		AETH(b).Encode(&f.AETH)
	}
	if b := view(buf, info, extAtomicETH); b != nil {
		AtomicETH(b).Encode(&f.AtomicETH)
	}
	if b := view(buf, info, extAtomicAckETH); b != nil {
		AtomicAckETH(b).Encode(&f.AtomicAckETH)
	}
	if b := view(buf, info, extImmDT); b != nil {
		ImmDT(b).SetImm(f.ImmDT)
	}
	if b := view(buf, info, extIETH); b != nil {
		IETH(b).SetRKey(f.IETH)
	}
	if b := view(buf, info, extDETH); b != nil {
		DETH(b).Encode(&f.DETH)
	}
	if b := view(buf, info, extFETH); b != nil {
		FETH(b).Encode(&f.FETH)
	}
	clear(buf[hl+payloadLen : n])
	return hl, nil
}

// Encode writes the packet f describes with the given payload into buf and
// returns its length, f.Len(len(payload)). It returns the errors of
// EncodeHeaders. The ICRC field is left zero: seal the packet with
// Envelope.Seal.
func (f *Fields) Encode(buf []byte, payload []byte) (n int, err error) {
	off, err := f.EncodeHeaders(buf, len(payload))
	if err != nil {
		return 0, err
	}
	copy(buf[off:], payload)
	return f.Len(len(payload)), nil
}
