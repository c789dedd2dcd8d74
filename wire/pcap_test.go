package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeAll writes packets through a PcapWriter and returns the file.
func writeAll(t *testing.T, ts time.Time, env *Envelope, pkts ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkts {
		if err := w.WritePacket(ts, env, p); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestPcapRoundTrip(t *testing.T) {
	ts := time.Date(2025, 11, 21, 21, 7, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		env  Envelope
	}{
		{"IPv4 ID 0", Envelope{Src: netip.MustParseAddrPort("127.0.0.1:49152"), Dst: netip.MustParseAddrPort("127.0.0.2:4791")}},
		{"IPv4 with ID", Envelope{Src: netip.MustParseAddrPort("10.77.0.12:58177"), Dst: netip.MustParseAddrPort("10.77.0.11:4791"), IPID: 0xf3a1}},
		{"IPv6", Envelope{Src: netip.MustParseAddrPort("[::1]:49152"), Dst: netip.MustParseAddrPort("[::1]:4791")}},
		{"IPv6 global", Envelope{Src: netip.MustParseAddrPort("[fd00::1]:50000"), Dst: netip.MustParseAddrPort("[fd00::2]:4791")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pkts [][]byte
			for _, op := range []OpCode{OpRCWriteOnly, OpRCAck, OpUDSendOnlyImm} {
				p := encodeSample(t, op)
				tt.env.Seal(p)
				pkts = append(pkts, p)
			}
			file := writeAll(t, ts, &tt.env, pkts...)
			r, err := NewPcapReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range pkts {
				fr, err := r.Next()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !fr.RoCE {
					t.Fatalf("frame %d: not recognised as RoCEv2: %x", i, fr.Data)
				}
				if !fr.Time.Equal(ts.Truncate(time.Microsecond)) {
					t.Errorf("time %v, want %v", fr.Time, ts.Truncate(time.Microsecond))
				}
				wantEnv := tt.env
				if fr.Env != wantEnv {
					t.Errorf("envelope %+v, want %+v", fr.Env, wantEnv)
				}
				if !bytes.Equal(fr.Payload, want) {
					t.Errorf("payload %x, want %x", fr.Payload, want)
				}
				icrc, err := ICRCFromHeaders(fr.IPUDP, want[:len(want)-ICRCSize])
				if err != nil || icrc != binary.LittleEndian.Uint32(want[len(want)-ICRCSize:]) {
					t.Errorf("ICRC over the written headers %#08x, %v; Envelope sealed %x", icrc, err, want[len(want)-ICRCSize:])
				}
				checkChecksums(t, fr.Data)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after the last frame: %v, want io.EOF", err)
			}
		})
	}
}

// checkChecksums verifies the IPv4 header checksum, or the UDP checksum of
// an IPv6 frame, and that the MACs are locally administered unicast.
func checkChecksums(t *testing.T, frame []byte) {
	t.Helper()
	for _, mac := range [][]byte{frame[0:6], frame[6:12]} {
		if mac[0]&0x03 != 0x02 {
			t.Errorf("MAC %x is not locally administered unicast", mac)
		}
	}
	ip := frame[ethHeaderSize:]
	switch binary.BigEndian.Uint16(frame[12:]) {
	case ethTypeIPv4:
		if s := onesSum(0, ip[:ipv4HeaderSize]); s != 0xffff {
			t.Errorf("IPv4 header checksum wrong (sum %#04x)", s)
		}
		if got := binary.BigEndian.Uint16(ip[ipv4HeaderSize+6:]); got != 0 {
			t.Errorf("IPv4 UDP checksum %#04x, want 0 as rxe", got)
		}
	case ethTypeIPv6:
		udp := ip[ipv6HeaderSize:]
		var pseudo uint32
		for i := 8; i < ipv6HeaderSize; i += 2 {
			pseudo += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		pseudo += uint32(len(udp)) + ipProtoUDP
		if s := onesSum(pseudo, udp); s != 0xffff {
			t.Errorf("IPv6 UDP checksum wrong (sum %#04x)", s)
		}
	default:
		t.Errorf("EtherType %x", frame[12:14])
	}
}

// pcapFile builds a pcap file by hand.
func pcapFile(order binary.ByteOrder, magic, linkType uint32, frames ...[]byte) []byte {
	h := make([]byte, pcapFileHeaderSize)
	order.PutUint32(h[0:], magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 65535)
	order.PutUint32(h[20:], linkType)
	for i, f := range frames {
		r := make([]byte, pcapRecordHeaderSize)
		order.PutUint32(r[0:], 1000+uint32(i))
		order.PutUint32(r[4:], 500)
		order.PutUint32(r[8:], uint32(len(f)))
		order.PutUint32(r[12:], uint32(len(f)))
		h = append(append(h, r...), f...)
	}
	return h
}

func TestPcapReaderFormats(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791"), IPID: 7}
	pkt := encodeSample(t, OpRCSendOnly)
	eth := appendFrame(nil, &env, pkt)
	ipFrame := eth[ethHeaderSize:]
	vlan := append(append(append([]byte(nil), eth[:12]...), 0x81, 0x00, 0x00, 0x05), eth[12:]...)
	sll := append(append(make([]byte, 14), 0x08, 0x00), ipFrame...)
	sll2 := append(append([]byte{0x08, 0x00}, make([]byte, 18)...), ipFrame...)
	tests := []struct {
		name     string
		order    binary.ByteOrder
		magic    uint32
		linkType uint32
		frame    []byte
		nanos    int
	}{
		{"little-endian µs", binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, eth, 500000},
		{"big-endian µs", binary.BigEndian, pcapMagicMicro, linkTypeEthernet, eth, 500000},
		{"little-endian ns", binary.LittleEndian, pcapMagicNano, linkTypeEthernet, eth, 500},
		{"big-endian ns", binary.BigEndian, pcapMagicNano, linkTypeEthernet, eth, 500},
		{"VLAN tag", binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, vlan, 500000},
		{"Linux cooked", binary.LittleEndian, pcapMagicMicro, linkTypeLinuxSLL, sll, 500000},
		{"Linux cooked v2", binary.LittleEndian, pcapMagicMicro, linkTypeSLL2, sll2, 500000},
		{"raw IP", binary.LittleEndian, pcapMagicMicro, linkTypeRaw, ipFrame, 500000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewPcapReader(bytes.NewReader(pcapFile(tt.order, tt.magic, tt.linkType, tt.frame)))
			if err != nil {
				t.Fatal(err)
			}
			fr, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if want := time.Unix(1000, int64(tt.nanos)).UTC(); !fr.Time.Equal(want) {
				t.Errorf("time %v, want %v", fr.Time, want)
			}
			if !bytes.Equal(fr.Data, tt.frame) {
				t.Errorf("data differs")
			}
			if !fr.RoCE || fr.Env != env || !bytes.Equal(fr.Payload, pkt) {
				t.Errorf("RoCE %v env %+v payload %x", fr.RoCE, fr.Env, fr.Payload)
			}
		})
	}
}

// TestPcapReaderPorts: a datagram is RoCEv2 when either port is 4791 (a
// softnic device answers at the port its peer sent from) or a port added
// with AddPort, whatever it carries; between other ports, a packet whose
// ICRC is wrong is not (TestPcapReaderAnyPort).
func TestPcapReaderPorts(t *testing.T) {
	pkt := encodeSample(t, OpRCAck)
	tests := []struct {
		name     string
		src, dst string
		add      uint16
		roce     bool
	}{
		{"to 4791", "192.0.2.1:49152", "192.0.2.2:4791", 0, true},
		{"from 4791 to another port", "192.0.2.2:4791", "192.0.2.1:49152", 0, true},
		{"between other ports, ICRC wrong", "192.0.2.1:40000", "192.0.2.2:40001", 0, false},
		{"to an added port", "192.0.2.1:40000", "192.0.2.2:40001", 40001, true},
		{"from an added port", "192.0.2.1:40000", "192.0.2.2:40001", 40000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := Envelope{Src: netip.MustParseAddrPort(tt.src), Dst: netip.MustParseAddrPort(tt.dst)}
			r, err := NewPcapReader(bytes.NewReader(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, appendFrame(nil, &env, pkt))))
			if err != nil {
				t.Fatal(err)
			}
			if tt.add != 0 {
				r.AddPort(tt.add)
			}
			fr, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if fr.RoCE != tt.roce || (tt.roce && (fr.Env != env || !bytes.Equal(fr.Payload, pkt))) {
				t.Errorf("RoCE %v env %+v, want RoCE %v env %+v", fr.RoCE, fr.Env, tt.roce, env)
			}
		})
	}
}

// TestPcapReaderAnyPort: between ports that are not RoCEv2's, a datagram
// is RoCEv2 when it decodes as a packet and its ICRC verifies, with the
// captured IP header or under IPv4 identification 0 (softnic's); on
// RoCEv2's ports, an ICRC that verifies only under another identification
// is reported with it.
func TestPcapReaderAnyPort(t *testing.T) {
	badOp := encodeSample(t, OpRCAck)
	badOp[0] = 0xff // no such opcode
	tests := []struct {
		name             string
		src, dst         string
		wireID, sealedID uint16
		pkt              []byte
		corrupt          bool
		roce             bool
		icrc             ICRCStatus
		sealedIPID       uint16
	}{
		{"softnic's ID 0", "192.0.2.1:40000", "192.0.2.2:40001", 0, 0, nil, false, true, ICRCOK, 0},
		{"rxe's numbered ID", "192.0.2.1:40000", "192.0.2.2:40001", 0x1234, 0x1234, nil, false, true, ICRCOK, 0},
		{"IPv6", "[2001:db8::1]:40000", "[2001:db8::2]:40001", 0, 0, nil, false, true, ICRCOK, 0},
		{"sealed with 0, renumbered on the way", "192.0.2.1:40000", "192.0.2.2:40001", 5, 0, nil, false, true, ICRCRecovered, 0},
		{"sealed with 9, renumbered: too weak a check here", "192.0.2.1:40000", "192.0.2.2:40001", 5, 9, nil, false, false, 0, 0},
		{"sealed with 9, renumbered, to 4791", "192.0.2.1:40000", "192.0.2.2:4791", 5, 9, nil, false, true, ICRCRecovered, 9},
		{"ICRC wrong", "192.0.2.1:40000", "192.0.2.2:40001", 0, 0, nil, true, false, 0, 0},
		{"ICRC wrong, to 4791", "192.0.2.1:40000", "192.0.2.2:4791", 0, 0, nil, true, true, ICRCBad, 0},
		{"ICRC right, not a packet", "192.0.2.1:40000", "192.0.2.2:40001", 0, 0, badOp, false, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkt := tt.pkt
			if pkt == nil {
				pkt = encodeSample(t, OpRCWriteOnly)
			}
			pkt = bytes.Clone(pkt)
			sealed := Envelope{Src: netip.MustParseAddrPort(tt.src), Dst: netip.MustParseAddrPort(tt.dst), IPID: tt.sealedID}
			sealed.Seal(pkt)
			if tt.corrupt {
				pkt[len(pkt)-1] ^= 0x40
			}
			captured := sealed
			captured.IPID = tt.wireID
			r, err := NewPcapReader(bytes.NewReader(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, appendFrame(nil, &captured, pkt))))
			if err != nil {
				t.Fatal(err)
			}
			fr, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if fr.RoCE != tt.roce || fr.ICRC != tt.icrc || fr.SealedIPID != tt.sealedIPID {
				t.Errorf("RoCE %v ICRC %v sealed ID %d, want RoCE %v ICRC %v sealed ID %d",
					fr.RoCE, fr.ICRC, fr.SealedIPID, tt.roce, tt.icrc, tt.sealedIPID)
			}
			if fr.RoCE && (fr.Env != captured || !bytes.Equal(fr.Payload, pkt)) {
				t.Errorf("env %+v payload %x, want %+v %x", fr.Env, fr.Payload, captured, pkt)
			}
			if !fr.RoCE && (fr.Payload != nil || fr.IPUDP != nil) {
				t.Errorf("not RoCEv2 but the payload is set: %+v", fr)
			}
		})
	}
}

func TestPcapReaderNotRoCE(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}
	pkt := encodeSample(t, OpRCAck)
	good := appendFrame(nil, &env, pkt)
	edit := func(off int, v ...byte) []byte {
		b := bytes.Clone(good)
		copy(b[off:], v)
		return b
	}
	const ip, udp = ethHeaderSize, ethHeaderSize + ipv4HeaderSize
	tests := []struct {
		name  string
		frame []byte
	}{
		{"ARP", edit(12, 0x08, 0x06)},
		{"TCP", edit(ip+9, 6)},
		{"UDP to another port", edit(udp+2, 0x12, 0xb8)},
		{"UDP between two other ports", edit(udp, 0x12, 0xb9, 0x12, 0xb8)},
		{"IPv4 fragment", edit(ip+6, 0x20, 0x00)},
		{"IPv4 later fragment", edit(ip+6, 0x00, 0x10)},
		{"IPv4 IHL 4", edit(ip, 0x44)},
		{"IP version 5", edit(ip, 0x55)},
		{"UDP length 7", edit(udp+4, 0, 7)},
		{"UDP longer than IP", edit(udp+4, 0xff, 0xff)},
		{"short Ethernet", good[:10]},
		{"short IPv4", good[:ip+19]},
		{"no UDP header", good[:udp+7]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewPcapReader(bytes.NewReader(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, tt.frame)))
			if err != nil {
				t.Fatal(err)
			}
			fr, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if fr.RoCE || fr.Payload != nil || fr.IPUDP != nil {
				t.Errorf("recognised as RoCEv2: %+v", fr)
			}
		})
	}
	t.Run("unknown link type", func(t *testing.T) {
		r, err := NewPcapReader(bytes.NewReader(pcapFile(binary.LittleEndian, pcapMagicMicro, 147, good)))
		if err != nil {
			t.Fatal(err)
		}
		if fr, err := r.Next(); err != nil || fr.RoCE {
			t.Errorf("RoCE %v, err %v", fr.RoCE, err)
		}
	})
}

// TestPcapReaderTrim: Ethernet padding after the datagram is not payload; a
// capture cut short leaves a short payload.
func TestPcapReaderTrim(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}
	pkt := encodeSample(t, OpRCAck)
	frame := appendFrame(nil, &env, pkt)
	padded := append(bytes.Clone(frame), make([]byte, 6)...)
	cut := frame[:len(frame)-3]
	r, err := NewPcapReader(bytes.NewReader(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, padded, cut)))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := r.Next()
	if err != nil || !bytes.Equal(fr.Payload, pkt) {
		t.Errorf("padded frame: payload %x, %v; want %x", fr.Payload, err, pkt)
	}
	fr, err = r.Next()
	if err != nil || !fr.RoCE || !bytes.Equal(fr.Payload, pkt[:len(pkt)-3]) {
		t.Errorf("cut frame: RoCE %v payload %x, %v", fr.RoCE, fr.Payload, err)
	}
}

func TestPcapReaderErrors(t *testing.T) {
	good := pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, make([]byte, 60))
	huge := bytes.Clone(good)
	binary.LittleEndian.PutUint32(huge[pcapFileHeaderSize+8:], maxPcapRecord+1)
	tests := []struct {
		name     string
		file     []byte
		openErr  error
		msg      string
		firstErr error
	}{
		{"empty", nil, ErrNotPcap, "shorter than", nil},
		{"text", []byte("this is a text file, not a capture at all\n"), ErrNotPcap, "magic", nil},
		{"pcapng without a byte-order magic", append([]byte{0x0a, 0x0d, 0x0d, 0x0a}, make([]byte, 28)...), ErrNotPcap, "pcapng block 1: byte-order magic", nil},
		{"record header cut", good[:pcapFileHeaderSize+10], nil, "", io.ErrUnexpectedEOF},
		{"record data cut", good[:len(good)-1], nil, "", io.ErrUnexpectedEOF},
		{"record too large", huge, nil, "", ErrNotPcap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewPcapReader(bytes.NewReader(tt.file))
			if !errors.Is(err, tt.openErr) || (tt.openErr == nil) != (err == nil) {
				t.Fatalf("NewPcapReader: %v, want %v", err, tt.openErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("error %q does not mention %q", err, tt.msg)
				}
				return
			}
			if _, err := r.Next(); !errors.Is(err, tt.firstErr) {
				t.Errorf("Next: %v, want %v", err, tt.firstErr)
			}
		})
	}
}

// failingWriter fails after n bytes.
type failingWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

func TestPcapWriterErrors(t *testing.T) {
	if _, err := NewPcapWriter(&failingWriter{}); !errors.Is(err, errDiskFull) {
		t.Errorf("NewPcapWriter: %v, want the write error", err)
	}
	w, err := NewPcapWriter(&failingWriter{n: pcapFileHeaderSize})
	if err != nil {
		t.Fatal(err)
	}
	env := Envelope{Src: netip.MustParseAddrPort("[::1]:1"), Dst: netip.MustParseAddrPort("[::1]:4791")}
	if err := w.WritePacket(time.Now(), &env, encodeSample(t, OpRCAck)); !errors.Is(err, errDiskFull) {
		t.Errorf("WritePacket: %v, want the write error", err)
	}
	if err := w.WritePacket(time.Now(), &env, make([]byte, maxUDPPayload+1)); !errors.Is(err, ErrBadLength) {
		t.Errorf("WritePacket of %d bytes: %v, want ErrBadLength", maxUDPPayload+1, err)
	}
}

// TestPcapWriterConcurrent: records written from several goroutines are not
// interleaved.
func TestPcapWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := Envelope{Src: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(49152+g)), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
			for range each {
				p := encodeSample(t, OpRCWriteOnly)
				env.Seal(p)
				if err := w.WritePacket(time.Now(), &env, p); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	r, err := NewPcapReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		fr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := fr.Env.Check(fr.Payload); err != nil || !fr.RoCE {
			t.Fatalf("frame %d: RoCE %v, ICRC %v", n, fr.RoCE, err)
		}
		n++
	}
	if n != writers*each {
		t.Errorf("%d frames, want %d", n, writers*each)
	}
}
