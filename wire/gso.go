package wire

import "encoding/binary"

// A capture taken where a sender's UDP GSO send is still whole holds one
// datagram that carries several packets back to back: tcpdump on loopback
// sees softnic's coalesced sends so (nic/udp cuts a run of packets of one
// size, and a shorter last, into one send, which the receiving socket cuts
// again). The ICRC at the datagram's end is the last piece's alone. The
// reader finds the packets by their own evidence: at a candidate size, the
// next packet's BTH must look like the first's (a valid opcode, version 0,
// the same partition key), and each piece's ICRC must verify with the IP
// and UDP headers the kernel gives it when it cuts the send (their lengths
// are the piece's; the identification is the one captured, which the
// sender sealed every piece with). At most maxGSOTries candidates are
// checked, so that a hostile datagram costs a bounded number of CRCs.

// gsoState holds the pieces of a cut datagram that Next has not returned.
type gsoState struct {
	f    Frame  // the datagram
	rest []byte // the payload not yet returned
	size int    // the pieces' size, the last's excepted
	k, n int    // the pieces returned, and all of them
	hdr  [ipv6HeaderSize + udpHeaderSize]byte
}

// maxGSOTries bounds the candidate sizes whose pieces gsoSize checks.
const maxGSOTries = 8

// gsoSize returns the size of the packets a UDP payload carries back to
// back when it carries more than one whose ICRCs verify under ipudp with
// each piece's lengths; 0 otherwise. It does not allocate.
func gsoSize(ipudp, payload []byte) int {
	if len(payload) < 2*(BTHSize+ICRCSize) || len(ipudp) > ipv6HeaderSize+udpHeaderSize {
		return 0
	}
	first := BTH(payload[:BTHSize])
	if !first.OpCode().Valid() {
		return 0
	}
	tries := 0
	for s := first.OpCode().HeaderLen() + ICRCSize; s+BTHSize+ICRCSize <= len(payload) && tries < maxGSOTries; s += 4 {
		next := BTH(payload[s : s+BTHSize])
		if next.TVer() != 0 || !next.OpCode().Valid() || next.PKey() != first.PKey() {
			continue
		}
		tries++
		if piecesVerify(ipudp, payload, s) {
			return s
		}
	}
	return 0
}

// piecesVerify reports whether every piece of size s of payload (the last
// shorter) has an ICRC that verifies under ipudp with its lengths.
func piecesVerify(ipudp, payload []byte, s int) bool {
	var h [ipv6HeaderSize + udpHeaderSize]byte
	hdr := h[:copy(h[:], ipudp)]
	for off := 0; off < len(payload); off += s {
		piece := payload[off:min(off+s, len(payload))]
		if len(piece) < BTHSize+ICRCSize || !setPieceLengths(hdr, len(piece)) {
			return false
		}
		n := len(piece) - ICRCSize
		icrc, err := ICRCFromHeaders(hdr, piece[:n])
		if err != nil || icrc != binary.LittleEndian.Uint32(piece[n:]) {
			return false
		}
	}
	return true
}

// setPieceLengths writes into hdr, captured IP and UDP headers, the
// lengths of a datagram carrying n bytes of UDP payload. It reports false
// for headers that are neither IPv4 nor IPv6 of the sizes ICRCFromHeaders
// takes.
func setPieceLengths(hdr []byte, n int) bool {
	switch {
	case len(hdr) == ipv4HeaderSize+udpHeaderSize && hdr[0]>>4 == 4:
		binary.BigEndian.PutUint16(hdr[2:], uint16(ipv4HeaderSize+udpHeaderSize+n))
	case len(hdr) == ipv6HeaderSize+udpHeaderSize && hdr[0]>>4 == 6:
		binary.BigEndian.PutUint16(hdr[4:], uint16(udpHeaderSize+n))
	default:
		return false
	}
	binary.BigEndian.PutUint16(hdr[len(hdr)-udpHeaderSize+4:], uint16(udpHeaderSize+n))
	return true
}

// startGSO keeps f's payload, which carries packets of size s back to back,
// for nextPiece to return one by one.
func (r *PcapReader) startGSO(f *Frame, s int) {
	r.gso = gsoState{f: *f, rest: f.Payload, size: s, n: (len(f.Payload) + s - 1) / s}
}

// nextPiece returns the next packet of the datagram startGSO kept, as a
// frame of its own: the datagram's frame, with the piece as its payload
// and the headers the kernel gives it.
func (r *PcapReader) nextPiece() Frame {
	g := &r.gso
	piece := g.rest[:min(g.size, len(g.rest))]
	g.rest = g.rest[len(piece):]
	g.k++
	f := g.f
	f.Payload = piece
	n := copy(g.hdr[:], g.f.IPUDP)
	setPieceLengths(g.hdr[:n], len(piece))
	f.IPUDP = g.hdr[:n:n]
	f.ICRC, f.SealedIPID = ICRCOK, 0
	f.Piece, f.Pieces = g.k, g.n
	f.RoCE = true
	return f
}
