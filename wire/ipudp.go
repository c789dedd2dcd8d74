package wire

import "encoding/binary"

// The IP and UDP headers softnic sends RoCEv2 in, and which Envelope
// therefore assumes: IPv4 with IHL 5, DF, fragment offset 0, TOS 0, TTL 64,
// protocol UDP, or IPv6 with traffic class and flow label 0, hop limit 64, no
// extension headers; then UDP.
const (
	ipv4HeaderSize = 20
	ipv6HeaderSize = 40
	udpHeaderSize  = 8
	ipv4VersionIHL = 0x45
	ipv4FlagDF     = 0x4000
	ipProtoUDP     = 17
	ipv6Version    = 0x60
	ipTTL          = 64
)

// ipHeaderLen returns the length of the IP header of the envelope's family.
func (e *Envelope) ipHeaderLen() int {
	if e.is4() {
		return ipv4HeaderSize
	}
	return ipv6HeaderSize
}

// putIPHeader writes into h the IP header of a datagram from e.Src to e.Dst
// carrying udpLen bytes of UDP header and payload, and returns its length
// (e.ipHeaderLen()). The IPv4 header checksum is computed. h must be long
// enough.
func (e *Envelope) putIPHeader(h []byte, udpLen int) int {
	if e.is4() {
		h = h[:ipv4HeaderSize]
		clear(h)
		h[0] = ipv4VersionIHL
		h[1] = e.TrafficClass
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderSize+udpLen))
		binary.BigEndian.PutUint16(h[4:], e.IPID)
		binary.BigEndian.PutUint16(h[6:], ipv4FlagDF)
		h[8] = ipTTL
		h[9] = ipProtoUDP
		src, dst := e.Src.Addr().Unmap().As4(), e.Dst.Addr().Unmap().As4()
		copy(h[12:16], src[:])
		copy(h[16:20], dst[:])
		binary.BigEndian.PutUint16(h[10:], ^onesSum(0, h))
		return ipv4HeaderSize
	}
	h = h[:ipv6HeaderSize]
	clear(h)
	h[0] = ipv6Version | e.TrafficClass>>4
	h[1] = e.TrafficClass << 4
	binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
	h[6] = ipProtoUDP
	h[7] = ipTTL
	src, dst := e.Src.Addr().As16(), e.Dst.Addr().As16()
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
	return ipv6HeaderSize
}

// putUDPHeader writes into u the UDP header of a datagram of udpLen bytes
// from e.Src to e.Dst, with checksum 0.
func (e *Envelope) putUDPHeader(u []byte, udpLen int) {
	binary.BigEndian.PutUint16(u[0:], e.Src.Port())
	binary.BigEndian.PutUint16(u[2:], e.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
}

// onesSum adds b to the one's complement sum s (RFC 1071).
func onesSum(s uint32, b []byte) uint16 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// udp6Checksum returns the UDP checksum of datagram (header with checksum 0,
// and payload) under the IPv6 header ip6 (RFC 8200 8.1).
func udp6Checksum(ip6, datagram []byte) uint16 {
	var pseudo uint32
	for i := 8; i < ipv6HeaderSize; i += 2 { // source and destination address
		pseudo += uint32(binary.BigEndian.Uint16(ip6[i:]))
	}
	pseudo += uint32(len(datagram)) + ipProtoUDP
	c := ^onesSum(pseudo, datagram)
	if c == 0 {
		return 0xffff
	}
	return c
}
