package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode. Whatever it accepts must
// re-encode from its Fields and payload to the same bytes, apart from the
// pad bytes and the ICRC, which Fields do not describe and Encode zeroes; and
// the re-encoded packet must decode to the same Fields. Whatever it rejects
// must be rejected with one of its documented errors. The corpus starts with
// every golden packet and a packet of every opcode.
func FuzzDecode(f *testing.F) {
	for _, op := range validOpCodes() {
		f.Add(encodeSample(f, op))
	}
	shared, _ := filepath.Glob(filepath.Join(goldenDir, "*.pcap"))
	padded, _ := filepath.Glob(filepath.Join(paddedDir, "*.pcap"))
	for _, path := range append(padded, shared...) {
		for _, fr := range readGolden(f, path) {
			f.Add(fr.payload)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Decode(b); err != nil {
			if !isDecodeError(err) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		var fields Fields
		p.Fields(&fields)
		out := make([]byte, fields.Len(len(p.Payload)))
		n, err := fields.Encode(out, p.Payload)
		if err != nil {
			t.Fatalf("Encode of a decoded packet: %v", err)
		}
		want := bytes.Clone(b)
		clear(want[len(want)-ICRCSize-int(p.BTH.PadCount()):])
		if !bytes.Equal(out[:n], want) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", out[:n], want)
		}
		var q Packet
		if err := q.Decode(out[:n]); err != nil {
			t.Fatalf("decode of the re-encoded packet: %v", err)
		}
		var again Fields
		q.Fields(&again)
		if again != fields {
			t.Fatalf("fields changed:\n%+v\n%+v", fields, again)
		}
	})
}

// FuzzPcapReader feeds arbitrary files to the pcap and pcapng reader and
// the packets it finds to Decode and ICRCFromHeaders: no input may panic
// them, and errors must be typed.
func FuzzPcapReader(f *testing.F) {
	if files, _ := filepath.Glob(filepath.Join(goldenDir, "*.pcap")); len(files) > 0 {
		b, err := os.ReadFile(files[0])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}
	var frames [][]byte
	for _, op := range validOpCodes() {
		frames = append(frames, appendFrame(nil, &env, encodeSample(f, op)))
	}
	f.Add(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, frames...))
	f.Add(pcapFile(binary.BigEndian, pcapMagicNano, linkTypeRaw, frames[0][ethHeaderSize:]))
	le := newPcapng(binary.LittleEndian)
	le.iface(linkTypeEthernet, 0, le.option(pcapngOptTSResol, []byte{9}))
	for i, fr := range frames {
		le.packet(0, uint64(i), fr)
	}
	f.Add(le.b)
	lo := Envelope{Src: netip.MustParseAddrPort("127.0.0.1:40000"), Dst: netip.MustParseAddrPort("127.0.0.1:40001")}
	var gso []byte
	for i := range 3 {
		p := encodeSample(f, OpRCWriteMiddle)
		BTH(p).SetPSN(PSN(i))
		lo.Seal(p)
		gso = append(gso, p...)
	}
	f.Add(pcapFile(binary.LittleEndian, pcapMagicMicro, linkTypeEthernet, appendFrame(nil, &lo, gso)))
	sll2 := append([]byte{0x08, 0x00}, make([]byte, sll2HeaderSize-2)...)
	f.Add(newPcapng(binary.BigEndian).iface(linkTypeSLL2, 64).simple(append(sll2, frames[1][ethHeaderSize:]...)).b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewPcapReader(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrNotPcap) {
				t.Fatalf("NewPcapReader: untyped error %v", err)
			}
			return
		}
		var p Packet
		for range 1000 {
			fr, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrNotPcap) {
					t.Fatalf("Next: untyped error %v", err)
				}
				return
			}
			if !fr.RoCE {
				continue
			}
			if p.Decode(fr.Payload) == nil {
				_, _ = ICRCFromHeaders(fr.IPUDP, fr.Payload[:len(fr.Payload)-ICRCSize])
				_ = fr.Env.Check(fr.Payload)
			}
		}
	})
}
