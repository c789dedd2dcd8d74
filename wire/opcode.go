package wire

import "strconv"

// OpCode is the BTH opcode: the transport (bits 7-5) and the operation
// (bits 4-0), IBTA 9.2.1 Table 38.
type OpCode uint8

// The opcodes Linux rxe sends and accepts. Reliable Connection:
const (
	OpRCSendFirst          OpCode = 0x00
	OpRCSendMiddle         OpCode = 0x01
	OpRCSendLast           OpCode = 0x02
	OpRCSendLastImm        OpCode = 0x03
	OpRCSendOnly           OpCode = 0x04
	OpRCSendOnlyImm        OpCode = 0x05
	OpRCWriteFirst         OpCode = 0x06
	OpRCWriteMiddle        OpCode = 0x07
	OpRCWriteLast          OpCode = 0x08
	OpRCWriteLastImm       OpCode = 0x09
	OpRCWriteOnly          OpCode = 0x0A
	OpRCWriteOnlyImm       OpCode = 0x0B
	OpRCReadRequest        OpCode = 0x0C
	OpRCReadResponseFirst  OpCode = 0x0D
	OpRCReadResponseMiddle OpCode = 0x0E
	OpRCReadResponseLast   OpCode = 0x0F
	OpRCReadResponseOnly   OpCode = 0x10
	OpRCAck                OpCode = 0x11
	OpRCAtomicAck          OpCode = 0x12
	OpRCCompareSwap        OpCode = 0x13
	OpRCFetchAdd           OpCode = 0x14
	OpRCSendLastInv        OpCode = 0x16
	OpRCSendOnlyInv        OpCode = 0x17
	OpRCFlush              OpCode = 0x1C // IBTA Annex A19 (persistent memory)
	OpRCAtomicWrite        OpCode = 0x1D // IBTA Annex A19
)

// Unreliable Connection: the SEND and RDMA WRITE opcodes of RC with the
// transport bits 001.
const (
	OpUCSendFirst    OpCode = 0x20
	OpUCSendMiddle   OpCode = 0x21
	OpUCSendLast     OpCode = 0x22
	OpUCSendLastImm  OpCode = 0x23
	OpUCSendOnly     OpCode = 0x24
	OpUCSendOnlyImm  OpCode = 0x25
	OpUCWriteFirst   OpCode = 0x26
	OpUCWriteMiddle  OpCode = 0x27
	OpUCWriteLast    OpCode = 0x28
	OpUCWriteLastImm OpCode = 0x29
	OpUCWriteOnly    OpCode = 0x2A
	OpUCWriteOnlyImm OpCode = 0x2B
)

// Unreliable Datagram: SEND only, transport bits 011.
const (
	OpUDSendOnly    OpCode = 0x64
	OpUDSendOnlyImm OpCode = 0x65
)

// opTransportShift moves the transport bits of an opcode down to a Transport.
const opTransportShift = 5

// Transport is the service type named by the top three opcode bits.
type Transport uint8

// The transports softnic implements; the values are the opcode's bits 7-5.
const (
	TransportRC Transport = 0 // Reliable Connection
	TransportUC Transport = 1 // Unreliable Connection
	TransportUD Transport = 3 // Unreliable Datagram
)

// String returns "RC", "UC", "UD", or "Transport(n)" for the others.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportUD:
		return "UD"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// ext names one extension header in the opcode table.
type ext uint8

const (
	extRETH ext = iota
	extAETH
	extAtomicETH
	extAtomicAckETH
	extImmDT
	extIETH
	extDETH
	extFETH
	numExt
)

var extSize = [numExt]int{
	extRETH:         RETHSize,
	extAETH:         AETHSize,
	extAtomicETH:    AtomicETHSize,
	extAtomicAckETH: AtomicAckETHSize,
	extImmDT:        ImmDTSize,
	extIETH:         IETHSize,
	extDETH:         DETHSize,
	extFETH:         FETHSize,
}

// opFlags describe an opcode beyond its headers.
type opFlags uint16

const (
	fPayload opFlags = 1 << iota // may carry a payload
	fFirst
	fMiddle
	fLast
	fOnly // a message of one packet, including every single-packet operation
	fSend
	fWrite
	fReadRequest
	fReadResponse
	fAck // Acknowledge or Atomic Acknowledge
	fAtomic
	fFlush
	fAtomicWrite
	fRequest // sent by the requester
)

// opInfo is one row of the opcode table.
type opInfo struct {
	name   string
	flags  opFlags
	hdrLen uint8         // BTH plus extension headers; 0 marks an unsupported opcode
	off    [numExt]uint8 // offset of each extension header from the BTH; 0 if absent
}

// opTable is indexed by opcode. Which extension headers follow the BTH, and in
// which order, is IBTA 9.2 Table 37 ("Base Transport Header and Extended
// Transport Headers"); FLUSH and ATOMIC WRITE are Annex A19. The rows match
// rxe's rxe_opcode table. Names are the ones Wireshark shows in its Info
// column (OpCodeMap in packet-infiniband.c, trailing blanks dropped; checked
// against tshark 4.0 by TestTshark), except for FLUSH and ATOMIC WRITE, which
// Wireshark 4.0 calls "Unknown OpCode".
var opTable = buildOpTable()

func buildOpTable() *[256]opInfo {
	t := new([256]opInfo)
	def := func(op OpCode, name string, flags opFlags, exts ...ext) {
		row := opInfo{name: name, flags: flags}
		n := BTHSize
		for _, e := range exts {
			row.off[e] = uint8(n)
			n += extSize[e]
		}
		row.hdrLen = uint8(n)
		t[op] = row
	}
	const (
		send  = fSend | fRequest | fPayload
		write = fWrite | fRequest | fPayload
		resp  = fReadResponse | fPayload
	)
	// SEND and RDMA WRITE are the same for RC and UC.
	for _, base := range []OpCode{OpRCSendFirst, OpUCSendFirst} {
		tr := Transport(base>>opTransportShift).String() + " "
		def(base+0x00, tr+"Send First", send|fFirst)
		def(base+0x01, tr+"Send Middle", send|fMiddle)
		def(base+0x02, tr+"Send Last", send|fLast)
		def(base+0x03, tr+"Send Last Immediate", send|fLast, extImmDT)
		def(base+0x04, tr+"Send Only", send|fOnly)
		def(base+0x05, tr+"Send Only Immediate", send|fOnly, extImmDT)
		def(base+0x06, tr+"RDMA Write First", write|fFirst, extRETH)
		def(base+0x07, tr+"RDMA Write Middle", write|fMiddle)
		def(base+0x08, tr+"RDMA Write Last", write|fLast)
		def(base+0x09, tr+"RDMA Write Last Immediate", write|fLast, extImmDT)
		def(base+0x0A, tr+"RDMA Write Only", write|fOnly, extRETH)
		def(base+0x0B, tr+"RDMA Write Only Immediate", write|fOnly, extRETH, extImmDT)
	}
	def(OpRCReadRequest, "RC RDMA Read Request", fReadRequest|fRequest|fOnly, extRETH)
	def(OpRCReadResponseFirst, "RC RDMA Read Response First", resp|fFirst, extAETH)
	def(OpRCReadResponseMiddle, "RC RDMA Read Response Middle", resp|fMiddle)
	def(OpRCReadResponseLast, "RC RDMA Read Response Last", resp|fLast, extAETH)
	def(OpRCReadResponseOnly, "RC RDMA Read Response Only", resp|fOnly, extAETH)
	def(OpRCAck, "RC Acknowledge", fAck|fOnly, extAETH)
	def(OpRCAtomicAck, "RC Atomic Acknowledge", fAck|fOnly, extAETH, extAtomicAckETH)
	def(OpRCCompareSwap, "RC Compare Swap", fAtomic|fRequest|fOnly, extAtomicETH)
	def(OpRCFetchAdd, "RC Fetch Add", fAtomic|fRequest|fOnly, extAtomicETH)
	def(OpRCSendLastInv, "RC Send Last Invalidate", send|fLast, extIETH)
	def(OpRCSendOnlyInv, "RC Send Only Invalidate", send|fOnly, extIETH)
	def(OpRCFlush, "RC Flush", fFlush|fRequest|fOnly, extFETH, extRETH)
	def(OpRCAtomicWrite, "RC Atomic Write", fAtomicWrite|fRequest|fOnly|fPayload, extRETH)
	def(OpUDSendOnly, "UD Send Only", send|fOnly, extDETH)
	def(OpUDSendOnlyImm, "UD Send Only Immediate", send|fOnly, extDETH, extImmDT)
	return t
}

func (op OpCode) has(f opFlags) bool { return opTable[op].flags&f != 0 }

func (op OpCode) hasExt(e ext) bool { return opTable[op].off[e] != 0 }

// Valid reports whether op is one of the opcodes softnic implements.
func (op OpCode) Valid() bool { return opTable[op].hdrLen != 0 }

// String returns the name Wireshark shows, such as "RC RDMA Write Only", or
// "Unknown (0x%02x)" for an opcode softnic does not implement.
func (op OpCode) String() string {
	if name := opTable[op].name; name != "" {
		return name
	}
	return string(op.AppendString(nil))
}

// AppendString appends what String returns, without allocating.
func (op OpCode) AppendString(dst []byte) []byte {
	if name := opTable[op].name; name != "" {
		return append(dst, name...)
	}
	dst = append(dst, "Unknown ("...)
	return append(AppendHex(dst, uint64(op), 2), ')')
}

// Transport returns the service type of op's top three bits.
func (op OpCode) Transport() Transport { return Transport(op >> opTransportShift) }

// HeaderLen returns the length of the BTH and the extension headers op
// carries, or 0 if op is not valid.
func (op OpCode) HeaderLen() int { return int(opTable[op].hdrLen) }

// HasRETH reports whether op carries an RDMA Extended Transport Header.
func (op OpCode) HasRETH() bool { return op.hasExt(extRETH) }

// HasAETH reports whether op carries an ACK Extended Transport Header.
func (op OpCode) HasAETH() bool { return op.hasExt(extAETH) }

// HasAtomicETH reports whether op carries an Atomic Extended Transport Header.
func (op OpCode) HasAtomicETH() bool { return op.hasExt(extAtomicETH) }

// HasAtomicAckETH reports whether op carries an Atomic ACK Extended Transport
// Header.
func (op OpCode) HasAtomicAckETH() bool { return op.hasExt(extAtomicAckETH) }

// HasImmDT reports whether op carries immediate data.
func (op OpCode) HasImmDT() bool { return op.hasExt(extImmDT) }

// HasIETH reports whether op carries an Invalidate Extended Transport Header.
func (op OpCode) HasIETH() bool { return op.hasExt(extIETH) }

// HasDETH reports whether op carries a Datagram Extended Transport Header.
func (op OpCode) HasDETH() bool { return op.hasExt(extDETH) }

// HasFETH reports whether op carries a FLUSH Extended Transport Header.
func (op OpCode) HasFETH() bool { return op.hasExt(extFETH) }

// HasPayload reports whether op may carry a payload.
func (op OpCode) HasPayload() bool { return op.has(fPayload) }

// IsFirst reports whether op is the first packet of a multi-packet message.
func (op OpCode) IsFirst() bool { return op.has(fFirst) }

// IsMiddle reports whether op is a middle packet of a multi-packet message.
func (op OpCode) IsMiddle() bool { return op.has(fMiddle) }

// IsLast reports whether op is the last packet of a multi-packet message.
func (op OpCode) IsLast() bool { return op.has(fLast) }

// IsOnly reports whether op is a message of one packet: a SEND, RDMA WRITE or
// READ response Only, and every single-packet operation (READ request,
// atomics, FLUSH, ATOMIC WRITE, acknowledgements). An Only packet is neither
// First nor Last here, so exactly one of IsFirst, IsMiddle, IsLast and IsOnly
// holds for a valid opcode.
func (op OpCode) IsOnly() bool { return op.has(fOnly) }

// IsSend reports whether op is a SEND packet (RC, UC or UD).
func (op OpCode) IsSend() bool { return op.has(fSend) }

// IsWrite reports whether op is an RDMA WRITE packet (not ATOMIC WRITE).
func (op OpCode) IsWrite() bool { return op.has(fWrite) }

// IsReadRequest reports whether op is an RDMA READ request.
func (op OpCode) IsReadRequest() bool { return op.has(fReadRequest) }

// IsReadResponse reports whether op is an RDMA READ response packet.
func (op OpCode) IsReadResponse() bool { return op.has(fReadResponse) }

// IsAck reports whether op is an Acknowledge or an Atomic Acknowledge.
func (op OpCode) IsAck() bool { return op.has(fAck) }

// IsAtomic reports whether op is a COMPARE SWAP or FETCH ADD request.
func (op OpCode) IsAtomic() bool { return op.has(fAtomic) }

// IsFlush reports whether op is a FLUSH request.
func (op OpCode) IsFlush() bool { return op.has(fFlush) }

// IsAtomicWrite reports whether op is an ATOMIC WRITE request.
func (op OpCode) IsAtomicWrite() bool { return op.has(fAtomicWrite) }

// IsRequest reports whether op is sent by a requester (rather than being a
// response or acknowledgement sent by a responder).
func (op OpCode) IsRequest() bool { return op.has(fRequest) }
