package udp

import (
	"encoding/binary"
	"net/netip"
	"sync"
)

// The IPv4 identification of received datagrams (Options.IPIDs).
//
// RoCEv2's ICRC covers the IPv4 identification, and recvmsg does not show
// it: softnic peers send 0, but Linux's rxe numbers its datagrams. Where
// the process may (CAP_NET_RAW), a raw IPv4 socket of protocol UDP beside
// the Conn's receives a copy of each datagram to the Conn's port with a
// non-zero identification (a kernel filter keeps those alone, and only
// their first bytes): the IP header, the UDP header and the first
// ipidHead bytes of the payload. The kernel hands a datagram to raw
// sockets before UDP's (ip_protocol_deliver_rcu), so when ReadBatch
// returns a datagram its copy is already queued: IPIDOf reads what is
// queued and finds the datagram by sender, length and first bytes.
//
// A datagram the kernel coalesced with others (GRO) reaches the raw socket
// as one, with the first's header: IPIDOf knows the first and not the
// others. A copy the raw socket had no room for is not known either.

// ipidHead is how many bytes of the UDP payload identify a datagram beside
// its sender and length: the BTH and the first 4 bytes after it, which
// hold the PSN, the QP and the opcode of a RoCEv2 packet.
const ipidHead = 16

// ipidSnap is what the kernel filter keeps of each datagram: the longest
// IPv4 header, the UDP header and ipidHead bytes.
const ipidSnap = 60 + 8 + ipidHead

// ipidKeys bounds the datagrams recorded and not yet asked for; the oldest
// goes first. ipidsPerKey bounds the identifications of equal datagrams (a
// packet and its retransmissions).
const (
	ipidKeys    = 4096
	ipidsPerKey = 4
)

// ipidReadMax bounds the copies one IPIDOf reads, so that a flood of them
// cannot hold the reader there: what is left is read by the next call.
const ipidReadMax = 4 * MaxBatch

// ipidKey identifies a datagram: its sender, its length and its first
// bytes.
type ipidKey struct {
	src  netip.AddrPort
	n    int
	head [ipidHead]byte
}

func keyOf(src netip.AddrPort, datagram []byte) ipidKey {
	k := ipidKey{src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), n: len(datagram)}
	copy(k.head[:], datagram)
	return k
}

// ipids holds the identifications recorded and not yet asked for. The
// goroutine that reads the Conn uses it; mu keeps Close from closing the
// raw socket under a read.
type ipids struct {
	mu     sync.Mutex
	closed bool
	raw    rawIPSocket
	ids    map[ipidKey][]uint16
	order  [ipidKeys]ipidKey // a ring, in the order recorded
	next   int
	buf    []byte
}

func newIPIDs(raw rawIPSocket) *ipids {
	return &ipids{raw: raw, ids: make(map[ipidKey][]uint16), buf: make([]byte, ipidSnap)}
}

// record files the identification of pkt, an IPv4 packet as the raw
// socket gives it (header, UDP header, the start of the payload); what
// does not parse is ignored.
func (t *ipids) record(pkt []byte) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+8 {
		return
	}
	udp := pkt[ihl:]
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < 8 || len(udp) < 8+min(ulen-8, ipidHead) {
		return // no UDP datagram, or a copy cut short
	}
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(pkt[12:16])), binary.BigEndian.Uint16(udp[0:]))
	k := ipidKey{src: src, n: ulen - 8}
	copy(k.head[:], udp[8:min(len(udp), ulen)])
	id := binary.BigEndian.Uint16(pkt[4:])
	if ids, ok := t.ids[k]; ok {
		if len(ids) < ipidsPerKey {
			t.ids[k] = append(ids, id)
		}
		return
	}
	if old := t.order[t.next]; old.n != 0 || old.src.IsValid() {
		delete(t.ids, old)
	}
	t.order[t.next] = k
	t.next = (t.next + 1) % ipidKeys
	t.ids[k] = append(make([]uint16, 0, ipidsPerKey), id)
}

// take returns the first identification recorded for datagram from src
// that ok accepts, and forgets it; known reports whether any was recorded.
func (t *ipids) take(src netip.AddrPort, datagram []byte, ok func(id uint16) bool) (id uint16, known, accepted bool) {
	k := keyOf(src, datagram)
	ids := t.ids[k]
	for i, id := range ids {
		if ok(id) {
			t.ids[k] = append(ids[:i], ids[i+1:]...)
			return id, true, true
		}
	}
	return 0, len(ids) > 0, false
}

// IPIDOf returns the IPv4 identification of datagram, just read from src,
// as the raw socket of Options.IPIDs saw it: the first of those recorded
// for a datagram from src of its length that starts as it does which ok
// accepts (RoCEv2 receivers check the ICRC with it). known reports whether
// any was recorded: without Options.IPIDs (see Features), for identification
// 0, and for a datagram the raw socket missed, none is. Call it from the
// goroutine that reads the Conn.
func (c *Conn) IPIDOf(src netip.AddrPort, datagram []byte, ok func(id uint16) bool) (id uint16, known, accepted bool) {
	if c.ids == nil || !src.Addr().Unmap().Is4() {
		return 0, false, false
	}
	c.ids.mu.Lock()
	defer c.ids.mu.Unlock()
	if c.ids.closed {
		return 0, false, false
	}
	for range ipidReadMax {
		n, err := c.ids.raw.read(c.ids.buf)
		if err != nil || n == 0 {
			break
		}
		c.ids.record(c.ids.buf[:n])
	}
	return c.ids.take(src, datagram, ok)
}

// close closes the raw socket.
func (t *ipids) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		t.raw.close()
	}
}
