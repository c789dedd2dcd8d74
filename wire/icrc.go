package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// Envelope is what the invariant CRC needs to know of the IP and UDP headers
// around a packet: addresses, ports and the IPv4 identification.
//
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
// packets verify only with the ID taken from the real header (a capture or a
// raw socket, see ICRCFromHeaders) or with the ID RecoverIPID works out from
// the ICRC, at the price of a weaker check.
type Envelope struct {
	Src, Dst netip.AddrPort // IPv4 (4-in-6 mapped addresses count as IPv4) or IPv6
	IPID     uint16         // IPv4 identification: 0 for senders using unconnected UDP sockets with DF
	// TrafficClass is the IPv4 TOS or IPv6 Traffic Class byte (DSCP and
	// ECN). The ICRC masks it, so it may change on the way.
	TrafficClass uint8
}

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
// the ICRC field, sent from e.Src to e.Dst in a datagram with the headers
// softnic sends (IPv4: no options, DF, e.IPID; see ipudp.go). It does not
// allocate.
func (e *Envelope) ICRC(pkt []byte) uint32 {
	var h pseudoHeader
	udpLen := udpHeaderSize + len(pkt) + ICRCSize
	n := e.putIPHeader(h[:], udpLen)
	if n == ipv4HeaderSize {
		maskIPv4(h[:n])
	} else {
		maskIPv6(h[:n])
	}
	e.putUDPHeader(h[n:], udpLen)
	maskUDP(h[n : n+udpHeaderSize])
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
	return updateBulk(crc, pkt[len(bth):])
}

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p) for the few dozen
// header bytes: unlike crc32.Update, whose assembly makes its argument
// escape, it lets the pseudo-header live on the stack. It processes eight
// bytes per step with the slicing-by-8 tables (Intel, "A Systematic Approach
// to Building High Performance Software-based CRC Generators", 2005).
func updateIEEE(crc uint32, p []byte) uint32 {
	t := slicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// slicing8 holds in t[k][b] the CRC of byte b followed by k zero bytes.
var slicing8 = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for b := range 256 {
		crc := t[0][b]
		for k := 1; k < 8; k++ {
			crc = t[0][crc&0xff] ^ crc>>8
			t[k][b] = crc
		}
	}
	return t
}()

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
