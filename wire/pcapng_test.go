package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// pcapngFile builds a pcapng file by hand, block by block.
type pcapngFile struct {
	order binary.AppendByteOrder
	b     []byte
}

// block appends a block of type typ with the given body, padded to 4 bytes.
func (f *pcapngFile) block(typ uint32, body []byte) *pcapngFile {
	n := pcapngBlockHeader + (len(body)+3)&^3 + pcapngBlockTrailer
	f.b = f.order.AppendUint32(f.b, typ)
	f.b = f.order.AppendUint32(f.b, uint32(n))
	f.b = append(f.b, body...)
	f.b = append(f.b, make([]byte, -len(body)&3)...)
	f.b = f.order.AppendUint32(f.b, uint32(n))
	return f
}

// section appends a section header block in f's byte order.
func (f *pcapngFile) section() *pcapngFile {
	body := f.order.AppendUint32(nil, pcapngByteOrder)
	body = f.order.AppendUint16(body, 1)
	body = f.order.AppendUint16(body, 0)
	body = f.order.AppendUint64(body, ^uint64(0)) // section length not given
	return f.block(pcapngMagic, body)
}

// iface appends an interface description block with the given options.
func (f *pcapngFile) iface(linkType uint16, snaplen uint32, opts ...[]byte) *pcapngFile {
	body := f.order.AppendUint16(nil, linkType)
	body = f.order.AppendUint16(body, 0)
	body = f.order.AppendUint32(body, snaplen)
	for _, o := range opts {
		body = append(body, o...)
	}
	return f.block(pcapngBlockIDB, body)
}

// option returns an option with its padding.
func (f *pcapngFile) option(code uint16, v []byte) []byte {
	o := f.order.AppendUint16(nil, code)
	o = f.order.AppendUint16(o, uint16(len(v)))
	return append(append(o, v...), make([]byte, -len(v)&3)...)
}

// packet appends an enhanced packet block.
func (f *pcapngFile) packet(iface uint32, ts uint64, data []byte) *pcapngFile {
	body := f.order.AppendUint32(nil, iface)
	body = f.order.AppendUint32(body, uint32(ts>>32))
	body = f.order.AppendUint32(body, uint32(ts))
	body = f.order.AppendUint32(body, uint32(len(data)))
	body = f.order.AppendUint32(body, uint32(len(data)))
	return f.block(pcapngBlockEPB, append(body, data...))
}

// simple appends a simple packet block.
func (f *pcapngFile) simple(data []byte) *pcapngFile {
	return f.block(pcapngBlockSPB, append(f.order.AppendUint32(nil, uint32(len(data))), data...))
}

func newPcapng(order binary.AppendByteOrder) *pcapngFile {
	return (&pcapngFile{order: order}).section()
}

// readAllFrames reads every frame of a capture, cloning what the reader
// reuses.
func readAllFrames(t *testing.T, file []byte) []Frame {
	t.Helper()
	r, err := NewPcapReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var frames []Frame
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		fr.Data, fr.IPUDP, fr.Payload = bytes.Clone(fr.Data), bytes.Clone(fr.IPUDP), bytes.Clone(fr.Payload)
		frames = append(frames, fr)
	}
}

// TestPcapngFormats: enhanced packet blocks in both byte orders on every
// link type the reader knows, as tshark writes them (tshark -i any writes
// Linux cooked v2).
func TestPcapngFormats(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791"), IPID: 7}
	pkt := encodeSample(t, OpRCSendOnly)
	env.Seal(pkt)
	eth := appendFrame(nil, &env, pkt)
	ipFrame := eth[ethHeaderSize:]
	sll := append(append(make([]byte, 14), 0x08, 0x00), ipFrame...)
	sll2 := append(append([]byte{0x08, 0x00}, make([]byte, 18)...), ipFrame...)
	links := []struct {
		name     string
		linkType uint16
		frame    []byte
	}{
		{"Ethernet", linkTypeEthernet, eth},
		{"raw IP", linkTypeRaw, ipFrame},
		{"Linux cooked", linkTypeLinuxSLL, sll},
		{"Linux cooked v2", linkTypeSLL2, sll2},
	}
	for _, order := range []binary.AppendByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, l := range links {
			t.Run(order.(fmt.Stringer).String()+" "+l.name, func(t *testing.T) {
				const ts = 1700000000_123456 // µs, the default resolution
				f := newPcapng(order).iface(l.linkType, 262144).packet(0, ts, l.frame)
				frames := readAllFrames(t, f.b)
				if len(frames) != 1 {
					t.Fatalf("%d frames, want 1", len(frames))
				}
				fr := frames[0]
				if want := time.Unix(1700000000, 123456000).UTC(); !fr.Time.Equal(want) {
					t.Errorf("time %v, want %v", fr.Time, want)
				}
				if !bytes.Equal(fr.Data, l.frame) {
					t.Errorf("data differs")
				}
				if !fr.RoCE || fr.Env != env || !bytes.Equal(fr.Payload, pkt) || fr.ICRC != ICRCOK {
					t.Errorf("RoCE %v env %+v ICRC %v payload %x", fr.RoCE, fr.Env, fr.ICRC, fr.Payload)
				}
			})
		}
	}
}

// TestPcapngTimestamps: the interface's resolution (a power of 10 or of 2)
// and offset apply to its packets.
func TestPcapngTimestamps(t *testing.T) {
	le := &pcapngFile{order: binary.LittleEndian}
	tests := []struct {
		name string
		opts [][]byte
		ts   uint64
		want time.Time
	}{
		{"default µs", nil, 1_500_000, time.Unix(1, 500_000_000)},
		{"ns", [][]byte{le.option(pcapngOptTSResol, []byte{9})}, 2_000_000_007, time.Unix(2, 7)},
		{"seconds", [][]byte{le.option(pcapngOptTSResol, []byte{0})}, 42, time.Unix(42, 0)},
		{"2^-20 s", [][]byte{le.option(pcapngOptTSResol, []byte{0x80 | 20})}, 3<<20 | 1<<19, time.Unix(3, 500_000_000)},
		{"10^-19 s", [][]byte{le.option(pcapngOptTSResol, []byte{19})}, 10_000_000_000_000_000_000 - 1, time.Unix(0, 999_999_999)},
		{"offset", [][]byte{le.option(pcapngOptTSOffset, binary.LittleEndian.AppendUint64(nil, 1000))}, 1, time.Unix(1000, 1000)},
		{"resolution and offset, other options skipped", [][]byte{
			le.option(2, []byte("eth0")), le.option(pcapngOptTSResol, []byte{9}),
			le.option(pcapngOptTSOffset, binary.LittleEndian.AppendUint64(nil, 5)), le.option(pcapngOptEnd, nil),
		}, 3, time.Unix(5, 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPcapng(binary.LittleEndian).iface(linkTypeEthernet, 0, tt.opts...).packet(0, tt.ts, make([]byte, 60))
			frames := readAllFrames(t, f.b)
			if len(frames) != 1 || !frames[0].Time.Equal(tt.want) {
				t.Errorf("frames %+v, want one at %v", frames, tt.want)
			}
		})
	}
}

// TestPcapngBlocks: blocks other than packets are skipped, simple packet
// blocks are read on the first interface (cut to its snapshot length), a
// packet names its interface, and a new section, in another byte order,
// starts its interfaces afresh.
func TestPcapngBlocks(t *testing.T) {
	env := Envelope{Src: netip.MustParseAddrPort("192.0.2.1:49152"), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}
	pkt := encodeSample(t, OpRCAck)
	env.Seal(pkt)
	eth := appendFrame(nil, &env, pkt)
	raw := eth[ethHeaderSize:]
	f := newPcapng(binary.LittleEndian).
		block(4, make([]byte, 12)).                           // name resolution
		iface(linkTypeEthernet, uint32(len(eth)-2)).          // interface 0: cuts 2 bytes
		iface(linkTypeRaw, 0).                                // interface 1
		simple(eth).                                          // on interface 0, no time
		block(0x40000bad, []byte("a custom block, skipped")). // custom
		packet(1, 7, raw).
		block(5, make([]byte, 20)) // interface statistics
	big := &pcapngFile{order: binary.BigEndian}
	big.section().iface(linkTypeRaw, 0).packet(0, 9, raw)
	f.b = append(f.b, big.b...)

	frames := readAllFrames(t, f.b)
	if len(frames) != 3 {
		t.Fatalf("%d frames, want 3", len(frames))
	}
	if fr := frames[0]; !fr.Time.IsZero() || !bytes.Equal(fr.Data, eth[:len(eth)-2]) || !fr.RoCE || fr.ICRC != ICRCBad {
		t.Errorf("simple packet: time %v, %d bytes, RoCE %v, ICRC %v; want no time, %d bytes cut short, RoCE, BAD",
			fr.Time, len(fr.Data), fr.RoCE, fr.ICRC, len(eth)-2)
	}
	for i, want := range []time.Time{time.Unix(0, 7000), time.Unix(0, 9000)} {
		if fr := frames[1+i]; !fr.Time.Equal(want) || !bytes.Equal(fr.Data, raw) || !fr.RoCE || fr.ICRC != ICRCOK {
			t.Errorf("packet %d: time %v RoCE %v ICRC %v, want %v on the raw interface", 2+i, fr.Time, fr.RoCE, fr.ICRC, want)
		}
	}
}

func TestPcapngErrors(t *testing.T) {
	le := binary.LittleEndian
	good := newPcapng(le).iface(linkTypeEthernet, 0).packet(0, 1, make([]byte, 60)).b
	const shb = 28       // the section header block's length
	const epb = shb + 20 // where the packet block starts, after the interface block
	edit := func(b []byte, off int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	tests := []struct {
		name    string
		file    []byte
		openErr error
		nextErr error
		msg     string
	}{
		{"byte-order magic", edit(good, 8, 0x11223344), ErrNotPcap, nil, "byte-order magic"},
		{"version 2", edit(good, 12, 2), ErrNotPcap, nil, "version 2"},
		{"section header too short", edit(good, 4, 12), ErrNotPcap, nil, "section header of 12 bytes"},
		{"section header cut", good[:26], ErrNotPcap, nil, "shorter than its pcapng section header"},
		{"section trailer", edit(good, 24, 99), ErrNotPcap, nil, "trailer 99"},
		{"block length not a multiple of 4", edit(good, shb+4, 22), nil, ErrNotPcap, "length 22"},
		{"block shorter than its header", edit(good, shb+4, 8), nil, ErrNotPcap, "length 8"},
		{"interface block cut", good[:shb+12], nil, io.ErrUnexpectedEOF, "block 2"},
		{"interface trailer", edit(good, shb+16, 24), nil, ErrNotPcap, "trailer 24"},
		{"packet header cut", good[:epb+5], nil, io.ErrUnexpectedEOF, "block 3"},
		{"packet data cut", good[:len(good)-1], nil, io.ErrUnexpectedEOF, "block 3"},
		{"unknown interface", edit(good, epb+8, 1), nil, ErrNotPcap, "interface 1 of 1"},
		{"captured length overruns", edit(good, epb+20, 61), nil, ErrNotPcap, "captured length 61"},
		{"huge packet block", edit(good, epb+4, maxPcapngBlock+4), nil, ErrNotPcap, "claims"},
		{"packet before an interface", newPcapng(le).packet(0, 1, make([]byte, 60)).b, nil, ErrNotPcap, "interface 0 of 0"},
		{"simple packet before an interface", newPcapng(le).simple(make([]byte, 60)).b, nil, ErrNotPcap, "before any interface"},
		{"option overruns", newPcapng(le).block(pcapngBlockIDB, []byte{1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 8, 0, 6, 0, 0, 0}).b,
			nil, ErrNotPcap, "overruns"},
		{"timestamp resolution", newPcapng(le).iface(1, 0, (&pcapngFile{order: le}).option(pcapngOptTSResol, []byte{20})).b,
			nil, ErrNotPcap, "resolution 0x14"},
		{"section cut in a later section", append(bytes.Clone(good), good[:20]...), nil, io.ErrUnexpectedEOF, "block 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewPcapReader(bytes.NewReader(tt.file))
			if tt.openErr != nil {
				if !errors.Is(err, tt.openErr) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("NewPcapReader: %v, want %v mentioning %q", err, tt.openErr, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for {
				_, err = r.Next()
				if err != nil {
					break
				}
			}
			if !errors.Is(err, tt.nextErr) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Next: %v, want %v mentioning %q", err, tt.nextErr, tt.msg)
			}
		})
	}
}
