package wire

// GRHSize is the room a UD receive buffer keeps for the Global Route Header
// in front of the payload (IBTA 11.4.1.2, ibv_post_recv on a UD QP).
const GRHSize = 40

// PutGRH writes what a UD receiver finds in the first GRHSize bytes of its
// buffer for a datagram of pktLen bytes (BTH through ICRC) that arrived in e,
// as rxe writes it on RoCEv2: over IPv4, 20 zero bytes and then the IPv4
// header; over IPv6, the IPv6 header, which has the GRH's layout. grh must
// be GRHSize bytes long.
func (e *Envelope) PutGRH(grh []byte, pktLen int) {
	grh = grh[:GRHSize]
	clear(grh)
	e.putIPHeader(grh[GRHSize-e.ipHeaderLen():], udpHeaderSize+pktLen)
}
