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

// FuzzPcapReader feeds arbitrary files to the pcap and pcapng reader and
// the packets it finds to Decode and ICRCFromHeaders: no input may panic
// them, and errors must be typed.
func FuzzPcapReader(f *testing.F) {
	if files, _ := filepath.Glob(filepath.Join("testdata", "rxe", "*.pcap")); len(files) > 0 { // an rxe capture
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
