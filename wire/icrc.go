package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The invariant CRC (ICRC, IBTA Annex A17.8) protects the fields of a RoCEv2
// packet that no router may change. It is CRC-32 (the IEEE 802.3 polynomial,
// as Ethernet's FCS) computed over
//
//	8 bytes of 0xFF              (stand-in for the InfiniBand LRH)
//	IPv4 header                  TOS, TTL and header checksum set to all ones
//	 or IPv6 header              traffic class, flow label and hop limit all ones
//	UDP header                   checksum set to all ones
//	BTH                          byte 4 (FECN, BECN, Resv6a) set to all ones
//	extension headers, payload, pad
//
// and appended to the packet little-endian, the byte order rxe uses (the
// CRC's natural, bit-reflected order). Every other byte of the IP and UDP
// headers is covered: addresses, ports, lengths, and the IPv4 identification.
//
// # The IPv4 identification trap
//
// The sender must know the exact IPv4 ID the kernel will put on the datagram
// before it computes the ICRC. softnic sends through an ordinary unconnected
// UDP socket with DF set (IP_MTU_DISCOVER = IP_PMTUDISC_DO) and sendto: Linux
// then gives the datagram ID 0 (ip_select_ident_segs() sets ID 0 on DF
// datagrams of a socket with no connected destination), so softnic computes
// the ICRC with Envelope.IPID 0. A connected UDP socket would draw IDs from a
// per-socket counter, and without DF the kernel picks a hashed ID; either
// breaks the ICRC.
//
// A receiver reading from a UDP socket does not see the sender's IP header.
// softnic checks incoming packets against the header it assumes: IPv4 with
// ID 0, DF, no options, and the addresses, ports and length recvmsg
// reported. That matches softnic peers and any sender that behaves like
// softnic. rxe itself uses a non-zero, per-packet incrementing ID, so its
// packets only verify with the ID taken from the real header (a capture, or a
// raw socket); see ICRCFromHeaders.
type Envelope struct {
	Src, Dst netip.AddrPort // IPv4 (4-in-6 mapped addresses count as IPv4) or IPv6
	IPID     uint16         // IPv4 identification: 0 for senders using unconnected UDP sockets with DF
}

// The IPv4 header Envelope assumes: version 4, IHL 5, DF, fragment offset 0,
// protocol UDP. TOS, TTL and checksum are masked by the ICRC.
const (
	ipv4HeaderSize = 20
	ipv6HeaderSize = 40
	udpHeaderSize  = 8
	ipv4VersionIHL = 0x45
	ipv4FlagDF     = 0x4000
	ipProtoUDP     = 17
	ipv6Version    = 0x60
)

// icrcSeed is the CRC after the 8 bytes of 0xFF that stand in for the LRH.
var icrcSeed = updateIEEE(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// pseudoHeader holds the masked IP, UDP and BTH bytes that start the ICRC.
type pseudoHeader [ipv6HeaderSize + udpHeaderSize + BTHSize]byte

// is4 reports whether the envelope is IPv4. If either address is a true IPv6
// address both are treated as IPv6, IPv4 ones in their mapped form.
func (e *Envelope) is4() bool {
	return e.Src.Addr().Unmap().Is4() && e.Dst.Addr().Unmap().Is4()
}

// ICRC returns the ICRC of pkt, a packet from the BTH through the pad without
// the ICRC field, sent from e.Src to e.Dst in a datagram of the header Envelope
// assumes. It does not allocate.
func (e *Envelope) ICRC(pkt []byte) uint32 {
	var h pseudoHeader
	udpLen := udpHeaderSize + len(pkt) + ICRCSize
	var n int
	if e.is4() {
		ip := h[:ipv4HeaderSize]
		ip[0] = ipv4VersionIHL
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HeaderSize+udpLen))
		binary.BigEndian.PutUint16(ip[4:], e.IPID)
		binary.BigEndian.PutUint16(ip[6:], ipv4FlagDF)
		ip[9] = ipProtoUDP
		src, dst := e.Src.Addr().Unmap().As4(), e.Dst.Addr().Unmap().As4()
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
		maskIPv4(ip)
		n = ipv4HeaderSize
	} else {
		ip := h[:ipv6HeaderSize]
		ip[0] = ipv6Version
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = ipProtoUDP
		src, dst := e.Src.Addr().As16(), e.Dst.Addr().As16()
		copy(ip[8:], src[:])
		copy(ip[24:], dst[:])
		maskIPv6(ip)
		n = ipv6HeaderSize
	}
	udp := h[n : n+udpHeaderSize]
	binary.BigEndian.PutUint16(udp[0:], e.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], e.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	maskUDP(udp)
	return icrc(&h, n+udpHeaderSize, pkt)
}

// Seal computes the ICRC of pkt, a whole packet from the BTH through the
// ICRC field, and writes it into the last four bytes. It does nothing if pkt
// is shorter than ICRCSize. It does not allocate.
func (e *Envelope) Seal(pkt []byte) {
	if len(pkt) < ICRCSize {
		return
	}
	n := len(pkt) - ICRCSize
	binary.LittleEndian.PutUint32(pkt[n:], e.ICRC(pkt[:n]))
}

// Check verifies the ICRC of pkt, a whole packet from the BTH through the
// ICRC field. It returns ErrTruncated if pkt is shorter than a BTH and an
// ICRC, ErrBadICRC if the ICRC does not match, and nil otherwise. It does not
// allocate.
func (e *Envelope) Check(pkt []byte) error {
	if len(pkt) < BTHSize+ICRCSize {
		return ErrTruncated
	}
	n := len(pkt) - ICRCSize
	if e.ICRC(pkt[:n]) != binary.LittleEndian.Uint32(pkt[n:]) {
		return ErrBadICRC
	}
	return nil
}

// ICRCFromHeaders returns the ICRC of pkt (BTH through pad, without the ICRC
// field) carried behind ipudp, the IP and UDP headers exactly as captured: an
// IPv4 header without options or an IPv6 header without extension headers,
// followed by the UDP header. It returns ErrTruncated if ipudp or pkt is too
// short, and ErrBadIPHeader if ipudp is not such a pair of headers (rxe
// computes the ICRC over a fixed 20- or 40-byte IP header, so options and
// extension headers have no defined ICRC). It does not allocate.
func ICRCFromHeaders(ipudp []byte, pkt []byte) (uint32, error) {
	if len(ipudp) < 1 || len(pkt) < BTHSize {
		return 0, ErrTruncated
	}
	var h pseudoHeader
	var n int
	switch ipudp[0] >> 4 {
	case 4:
		n = ipv4HeaderSize
		if len(ipudp) < n+udpHeaderSize {
			return 0, ErrTruncated
		}
		if ipudp[0] != ipv4VersionIHL || ipudp[9] != ipProtoUDP || len(ipudp) != n+udpHeaderSize {
			return 0, ErrBadIPHeader
		}
		copy(h[:], ipudp)
		maskIPv4(h[:n])
	case 6:
		n = ipv6HeaderSize
		if len(ipudp) < n+udpHeaderSize {
			return 0, ErrTruncated
		}
		if ipudp[6] != ipProtoUDP || len(ipudp) != n+udpHeaderSize {
			return 0, ErrBadIPHeader
		}
		copy(h[:], ipudp)
		maskIPv6(h[:n])
	default:
		return 0, ErrBadIPHeader
	}
	maskUDP(h[n : n+udpHeaderSize])
	return icrc(&h, n+udpHeaderSize, pkt), nil
}

// icrc finishes the ICRC: h[:n] holds the masked IP and UDP headers; the BTH
// is copied after them and masked, the rest of pkt follows unchanged.
func icrc(h *pseudoHeader, n int, pkt []byte) uint32 {
	bth := h[n : n+copy(h[n:], pkt[:min(len(pkt), BTHSize)])]
	if len(bth) > bthECN {
		bth[bthECN] = 0xff
	}
	crc := updateIEEE(icrcSeed, h[:n+len(bth)])
	return crc32.Update(crc, crc32.IEEETable, pkt[len(bth):])
}

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p) one byte at a time. It
// serves the few dozen header bytes: unlike crc32.Update, whose assembly
// makes its argument escape, it lets the pseudo-header live on the stack.
func updateIEEE(crc uint32, p []byte) uint32 {
	crc = ^crc
	for _, b := range p {
		crc = crc32.IEEETable[byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// maskIPv4 sets TOS, TTL and header checksum to all ones.
func maskIPv4(ip []byte) {
	ip[1] = 0xff
	ip[8] = 0xff
	ip[10], ip[11] = 0xff, 0xff
}

// maskIPv6 sets traffic class, flow label and hop limit to all ones.
func maskIPv6(ip []byte) {
	ip[0] |= 0x0f
	ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff
	ip[7] = 0xff
}

// maskUDP sets the UDP checksum to all ones.
func maskUDP(udp []byte) { udp[6], udp[7] = 0xff, 0xff }
