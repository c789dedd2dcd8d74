package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Classic pcap (https://www.tcpdump.org/manpages/pcap-savefile.5.html): a
// 24-byte file header, then per packet a 16-byte record header and the
// captured bytes.
//
//	file header                          record header
//	 0: magic 0xa1b2c3d4 (µs)             0: seconds
//	    or   0xa1b23c4d (ns)              4: microseconds (or nanoseconds)
//	 4: version 2.4                       8: captured length
//	 8: thiszone, 12: sigfigs            12: original length
//	16: snaplen, 20: link type
const (
	pcapFileHeaderSize   = 24
	pcapRecordHeaderSize = 16
	pcapMagicMicro       = 0xa1b2c3d4
	pcapMagicNano        = 0xa1b23c4d
	pcapngMagic          = 0x0a0d0d0a // section header block of pcapng
	pcapVersionMajor     = 2
	pcapVersionMinor     = 4
	pcapSnaplen          = 262144 // tcpdump's largest snapshot length
	maxPcapRecord        = pcapSnaplen
)

// Link types (https://www.tcpdump.org/linktypes.html) the reader understands.
const (
	linkTypeEthernet = 1
	linkTypeRaw      = 101 // IPv4 or IPv6, no link header
	linkTypeLinuxSLL = 113 // tcpdump -i any
	linkTypeSLL2     = 276 // tcpdump -i any, since libpcap 1.10
)

// Ethernet and IP constants for framing.
const (
	ethHeaderSize  = 14
	ethTypeIPv4    = 0x0800
	ethTypeIPv6    = 0x86dd
	ethTypeVLAN    = 0x8100
	ethTypeQinQ    = 0x88a8
	vlanTagSize    = 4
	sllHeaderSize  = 16
	sll2HeaderSize = 20
	maxUDPPayload  = 0xffff - ipv4HeaderSize - udpHeaderSize
)

// PcapWriter writes RoCEv2 packets to a classic pcap stream (microsecond
// timestamps, Ethernet link type), each framed in Ethernet, IPv4 or IPv6, and
// UDP so that Wireshark and tshark dissect it as RoCEv2 ("RRoCE"). The frames
// carry what the envelope says: addresses, ports and, for IPv4, DF and the
// IPv4 ID; TTL (hop limit) 64; IPv4 header checksum computed; UDP checksum 0
// on IPv4 as rxe sends it, computed on IPv6 where it is mandatory; MAC
// addresses derived from the IP addresses with the locally administered bit
// set. A PcapWriter is safe for concurrent use.
type PcapWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte // record header and frame, reused
}

// NewPcapWriter writes the pcap file header to w and returns a writer for
// the packets. It returns the error of w.Write.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	var h [pcapFileHeaderSize]byte
	le := binary.LittleEndian
	le.PutUint32(h[0:], pcapMagicMicro)
	le.PutUint16(h[4:], pcapVersionMajor)
	le.PutUint16(h[6:], pcapVersionMinor)
	le.PutUint32(h[16:], pcapSnaplen)
	le.PutUint32(h[20:], linkTypeEthernet)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("wire: pcap header: %w", err)
	}
	return &PcapWriter{w: w}, nil
}

// WritePacket writes pkt, a RoCEv2 packet from the BTH through the ICRC, sent
// from env.Src to env.Dst at ts, as one record in a single Write. It returns
// an error wrapping ErrBadLength if pkt does not fit in a UDP datagram, or
// the error of the underlying Write. It does not allocate once its buffer
// has grown to the largest packet.
func (w *PcapWriter) WritePacket(ts time.Time, env *Envelope, pkt []byte) error {
	if len(pkt) > maxUDPPayload {
		return fmt.Errorf("%w: %d bytes do not fit in a UDP datagram", ErrBadLength, len(pkt))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := slices.Grow(w.buf[:0], pcapRecordHeaderSize)[:pcapRecordHeaderSize]
	b = appendFrame(b, env, pkt)
	n := uint32(len(b) - pcapRecordHeaderSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(ts.Unix()))
	le.PutUint32(b[4:], uint32(ts.Nanosecond()/1000))
	le.PutUint32(b[8:], n)
	le.PutUint32(b[12:], n)
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("wire: pcap record: %w", err)
	}
	return nil
}

// appendFrame appends the Ethernet frame carrying pkt in the datagram env
// describes. pkt fits in a UDP datagram.
func appendFrame(b []byte, env *Envelope, pkt []byte) []byte {
	udpLen := udpHeaderSize + len(pkt)
	eth, ip := len(b), len(b)+ethHeaderSize
	udp := ip + env.ipHeaderLen()
	b = slices.Grow(b, udp+udpHeaderSize-eth+len(pkt))[:udp+udpHeaderSize]
	putMAC(b[eth:eth+6], env.Dst.Addr())
	putMAC(b[eth+6:eth+12], env.Src.Addr())
	etherType := uint16(ethTypeIPv6)
	if env.is4() {
		etherType = ethTypeIPv4
	}
	binary.BigEndian.PutUint16(b[eth+12:], etherType)
	env.putIPHeader(b[ip:udp], udpLen)
	env.putUDPHeader(b[udp:], udpLen)
	b = append(b, pkt...)
	if etherType == ethTypeIPv6 { // the UDP checksum is optional only over IPv4
		binary.BigEndian.PutUint16(b[udp+6:], udp6Checksum(b[ip:udp], b[udp:]))
	}
	return b
}

// putMAC writes a locally administered unicast MAC address derived from the
// last five bytes of addr: 02:00:a.b.c.d for IPv4 a.b.c.d.
func putMAC(mac []byte, addr netip.Addr) {
	a := addr.Unmap().As16()
	mac[0] = 0x02
	copy(mac[1:], a[11:])
}

// PcapReader reads frames from a capture file: classic pcap in either byte
// order, with microsecond or nanosecond timestamps, or pcapng (pcapng.go),
// the default format of Wireshark and tshark. It recognises RoCEv2
// datagrams over IPv4 or IPv6 on Ethernet (with or without VLAN tags),
// Linux cooked (tcpdump -i any, v1 and v2) and raw IP captures: UDP from or
// to port 4791 or a port added with AddPort, as Wireshark does (a softnic
// device answers at the port a peer sent from, so a datagram from 4791 to
// another port counts), and UDP on any other port whose payload decodes as
// a packet and whose ICRC verifies (see Frame.RoCE). A datagram that
// carries several packets back to back, a UDP GSO send captured whole, is
// returned as a frame per packet (Frame.Piece).
type PcapReader struct {
	ports    []uint16 // RoCEv2 ports besides 4791
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	linkType uint32
	hdr      [pcapRecordHeaderSize]byte
	buf      []byte
	records  int
	ng       *pcapng  // the pcapng state; nil for classic pcap
	pkt      Packet   // decodes the payloads of datagrams on other ports
	gso      gsoState // the packets of a UDP GSO datagram not returned yet (gso.go)
}

// Frame is one packet of a capture file. Its slices point into the
// reader's buffer and are valid until the next call to Next.
type Frame struct {
	Time time.Time // the zero Time for a pcapng simple packet block, which has none
	Data []byte    // the captured link-layer frame
	// RoCE reports a RoCEv2 packet in an IPv4 or IPv6 UDP datagram that
	// is not a fragment: one from or to a RoCEv2 port whatever its
	// contents, or one on other ports whose payload decodes (Packet.Decode)
	// and whose ICRC verifies with the headers as captured or under IPv4
	// identification 0, the one softnic seals with. (A checksum that
	// verifies only under another identification found by
	// Envelope.RecoverIPID is not enough there: 1 in 65,536 random
	// datagrams would pass.) Env, IPUDP, Payload and ICRC are set only
	// when RoCE is.
	RoCE    bool
	Env     Envelope // addresses, ports and the IPv4 ID as captured
	IPUDP   []byte   // the captured IP header and UDP header, for ICRCFromHeaders
	Payload []byte   // the UDP payload (BTH through ICRC); shorter if the capture was cut
	// ICRC says whether Payload's ICRC verifies; SealedIPID is the IPv4
	// identification it verifies under when ICRC is ICRCRecovered.
	ICRC       ICRCStatus
	SealedIPID uint16
	// Piece and Pieces number the packets of a UDP datagram that carries
	// several back to back, a UDP GSO send captured before the kernel cut
	// it (gso.go): Next returns each as a frame of its own, with the same
	// Data and Time, its own Payload, and IPUDP with its own lengths.
	// Both are 0 for a datagram that carries one packet.
	Piece, Pieces int
}

// ICRCStatus says whether a captured packet's ICRC verifies.
type ICRCStatus uint8

const (
	// ICRCBad: it does not verify under any IPv4 identification, the
	// headers cannot carry one (IPv4 options, IPv6 extension headers), or
	// the packet was cut short by the capture. A receiver drops it.
	ICRCBad ICRCStatus = iota
	// ICRCOK: it verifies with the IP and UDP headers as captured.
	ICRCOK
	// ICRCRecovered: it verifies only under another IPv4 identification,
	// Frame.SealedIPID (Envelope.RecoverIPID): the sender sealed it with
	// that one and something on the way renumbered the datagram, as Linux
	// does to the segments of a UDP GSO send. A receiver that recovers the
	// identification (nic.Config.RecoverIPID) accepts it; rxe does not.
	ICRCRecovered
)

// String returns "ok", "BAD" or "recovered".
func (s ICRCStatus) String() string {
	switch s {
	case ICRCOK:
		return "ok"
	case ICRCRecovered:
		return "recovered"
	}
	return "BAD"
}

// NewPcapReader reads the file header of a classic pcap file, or the
// first section header block of a pcapng file, from r. It returns an error
// wrapping ErrNotPcap if r starts with neither, or the read error.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	var h [pcapFileHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: shorter than a pcap file header", ErrNotPcap)
		}
		return nil, fmt.Errorf("wire: pcap header: %w", err)
	}
	pr := &PcapReader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[:]) == pcapMagicMicro:
		pr.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[:]) == pcapMagicMicro:
		pr.order = binary.BigEndian
	case binary.LittleEndian.Uint32(h[:]) == pcapMagicNano:
		pr.order, pr.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[:]) == pcapMagicNano:
		pr.order, pr.nano = binary.BigEndian, true
	case binary.LittleEndian.Uint32(h[:]) == pcapngMagic:
		pr.ng = &pcapng{blocks: 1}
		if err := pr.startSection(h[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w: shorter than its pcapng section header", ErrNotPcap)
			}
			return nil, err
		}
		return pr, nil
	default:
		return nil, fmt.Errorf("%w: unknown magic number %#08x", ErrNotPcap, binary.BigEndian.Uint32(h[:]))
	}
	pr.linkType = pr.order.Uint32(h[20:]) & 0x0fffffff // the top bits may carry FCS flags
	return pr, nil
}

// Next returns the next frame. It returns io.EOF after the last one, an
// error wrapping io.ErrUnexpectedEOF if the file ends inside a record or
// block, one wrapping ErrNotPcap if a record claims more than 256 KiB or a
// pcapng block is malformed, or the read error.
func (r *PcapReader) Next() (Frame, error) {
	if len(r.gso.rest) > 0 {
		return r.nextPiece(), nil
	}
	if r.ng != nil {
		return r.nextBlock()
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("wire: pcap record %d header: %w", r.records+1, err)
	}
	r.records++
	sec, frac := r.order.Uint32(r.hdr[0:]), r.order.Uint32(r.hdr[4:])
	n := r.order.Uint32(r.hdr[8:])
	if n > maxPcapRecord {
		return Frame{}, fmt.Errorf("%w: record %d claims %d bytes", ErrNotPcap, r.records, n)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	data := r.buf[:n]
	if _, err := io.ReadFull(r.r, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("wire: pcap record %d: %w", r.records, err)
	}
	if !r.nano {
		frac *= 1000
	}
	return r.frame(time.Unix(int64(sec), int64(frac)).UTC(), r.linkType, data), nil
}

// frame returns the Frame of data, a frame of the given link type
// captured at t.
func (r *PcapReader) frame(t time.Time, linkType uint32, data []byte) Frame {
	f := Frame{Time: t, Data: data}
	if !parseFrame(&f, linkType, data) {
		return f
	}
	f.ICRC, f.SealedIPID = checkCapturedICRC(f.IPUDP, &f.Env, f.Payload)
	if f.ICRC == ICRCBad {
		if s := gsoSize(f.IPUDP, f.Payload); s > 0 {
			r.startGSO(&f, s)
			return r.nextPiece()
		}
	}
	port := r.isRoCEPort(f.Env.Src.Port()) || r.isRoCEPort(f.Env.Dst.Port())
	if !port && (r.pkt.Decode(f.Payload) != nil || f.ICRC != ICRCOK && (f.ICRC != ICRCRecovered || f.SealedIPID != 0)) {
		return Frame{Time: t, Data: data}
	}
	f.RoCE = true
	return f
}

// checkCapturedICRC returns whether pkt's ICRC verifies with the captured
// headers ipudp, and else whether, and under which identification, it
// verifies in env with another IPv4 identification.
func checkCapturedICRC(ipudp []byte, env *Envelope, pkt []byte) (ICRCStatus, uint16) {
	if len(pkt) < BTHSize+ICRCSize {
		return ICRCBad, 0
	}
	n := len(pkt) - ICRCSize
	if icrc, err := ICRCFromHeaders(ipudp, pkt[:n]); err != nil {
		return ICRCBad, 0 // options or extension headers: no ICRC is defined
	} else if icrc == binary.LittleEndian.Uint32(pkt[n:]) {
		return ICRCOK, 0
	}
	if id, ok := env.RecoverIPID(pkt); ok && env.is4() {
		return ICRCRecovered, id
	}
	return ICRCBad, 0
}

// AddPort makes the reader take UDP port as a RoCEv2 port too, whatever
// the datagrams carry, as Wireshark's Decode As does.
func (r *PcapReader) AddPort(port uint16) { r.ports = append(r.ports, port) }

func (r *PcapReader) isRoCEPort(p uint16) bool {
	return p == UDPPort || slices.Contains(r.ports, p)
}

// parseFrame sets f's Env, IPUDP and Payload and returns true if data, a
// frame of the given link type, carries an unfragmented UDP datagram.
func parseFrame(f *Frame, linkType uint32, data []byte) bool {
	var etherType uint16
	switch linkType {
	case linkTypeEthernet:
		if len(data) < ethHeaderSize {
			return false
		}
		etherType = binary.BigEndian.Uint16(data[12:])
		data = data[ethHeaderSize:]
		for (etherType == ethTypeVLAN || etherType == ethTypeQinQ) && len(data) >= vlanTagSize {
			etherType = binary.BigEndian.Uint16(data[2:])
			data = data[vlanTagSize:]
		}
	case linkTypeLinuxSLL:
		if len(data) < sllHeaderSize {
			return false
		}
		etherType = binary.BigEndian.Uint16(data[14:])
		data = data[sllHeaderSize:]
	case linkTypeSLL2:
		if len(data) < sll2HeaderSize {
			return false
		}
		etherType = binary.BigEndian.Uint16(data[0:])
		data = data[sll2HeaderSize:]
	case linkTypeRaw:
		if len(data) == 0 {
			return false
		}
		switch data[0] >> 4 {
		case 4:
			etherType = ethTypeIPv4
		case 6:
			etherType = ethTypeIPv6
		}
	default:
		return false
	}
	var (
		src, dst netip.Addr
		ipID     uint16
		tclass   uint8
		ipLen    int // IP header
		totalLen int // IP header and payload, as the header says
	)
	switch etherType {
	case ethTypeIPv4:
		if len(data) < ipv4HeaderSize || data[0]>>4 != 4 {
			return false
		}
		ipLen = int(data[0]&0x0f) * 4
		totalLen = int(binary.BigEndian.Uint16(data[2:]))
		fragment := binary.BigEndian.Uint16(data[6:])&0x3fff != 0 // MF or an offset
		if ipLen < ipv4HeaderSize || data[9] != ipProtoUDP || fragment {
			return false
		}
		ipID, tclass = binary.BigEndian.Uint16(data[4:]), data[1]
		src = netip.AddrFrom4([4]byte(data[12:16]))
		dst = netip.AddrFrom4([4]byte(data[16:20]))
	case ethTypeIPv6:
		if len(data) < ipv6HeaderSize || data[0]>>4 != 6 || data[6] != ipProtoUDP {
			return false
		}
		ipLen, tclass = ipv6HeaderSize, data[0]<<4|data[1]>>4
		totalLen = ipv6HeaderSize + int(binary.BigEndian.Uint16(data[4:]))
		src = netip.AddrFrom16([16]byte(data[8:24]))
		dst = netip.AddrFrom16([16]byte(data[24:40]))
	default:
		return false
	}
	if len(data) < ipLen+udpHeaderSize || totalLen < ipLen+udpHeaderSize {
		return false
	}
	udp := data[ipLen : ipLen+udpHeaderSize]
	sport, dport := binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:])
	udpLen := int(binary.BigEndian.Uint16(udp[4:]))
	if udpLen < udpHeaderSize || ipLen+udpLen > totalLen {
		return false
	}
	end := min(ipLen+udpLen, len(data)) // Ethernet may pad; the capture may cut
	f.Env = Envelope{
		Src:  netip.AddrPortFrom(src, sport),
		Dst:  netip.AddrPortFrom(dst, dport),
		IPID: ipID, TrafficClass: tclass,
	}
	hdrEnd := ipLen + udpHeaderSize
	f.IPUDP = data[:hdrEnd:hdrEnd]
	f.Payload = data[hdrEnd:end:end]
	return true
}
