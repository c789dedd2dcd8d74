package wire

import "encoding/binary"

// GRHSize is the room a UD receive buffer keeps for the Global Route Header
// in front of the payload (IBTA 11.4.1.2, ibv_post_recv on a UD QP).
const GRHSize = 40

// PutGRH writes what a UD receiver finds in the first GRHSize bytes of its
// buffer for a datagram of pktLen bytes (BTH through ICRC) that arrived in e,
// as rxe writes it on RoCEv2: over IPv4, 20 zero bytes and then the IPv4
// header; over IPv6, the IPv6 header, which has the GRH's layout. grh must
// be GRHSize bytes long.
func (e *Envelope) PutGRH(grh []byte, pktLen int) {
	clear(grh[:GRHSize])
	udpLen := udpHeaderSize + pktLen
	if e.is4() {
		h := grh[GRHSize-ipv4HeaderSize : GRHSize]
		h[0] = ipv4VersionIHL
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderSize+udpLen))
		binary.BigEndian.PutUint16(h[4:], e.IPID)
		binary.BigEndian.PutUint16(h[6:], ipv4FlagDF)
		h[8] = ipTTL
		h[9] = ipProtoUDP
		src, dst := e.Src.Addr().Unmap().As4(), e.Dst.Addr().Unmap().As4()
		copy(h[12:16], src[:])
		copy(h[16:20], dst[:])
		binary.BigEndian.PutUint16(h[10:], ^onesSum(0, h))
		return
	}
	h := grh[:ipv6HeaderSize]
	h[0] = ipv6Version
	binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
	h[6] = ipProtoUDP
	h[7] = ipTTL
	src, dst := e.Src.Addr().As16(), e.Dst.Addr().As16()
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
}
