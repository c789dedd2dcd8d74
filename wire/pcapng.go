package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"time"
)

// pcapng (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-03.html),
// the default format of Wireshark and tshark: a sequence of blocks, each
//
//	 0: block type
//	 4: block total length (a multiple of 4, header and trailer included)
//	 8: body, padded to 4 bytes
//	-4: block total length again
//
// in the byte order of the section it belongs to. A section starts with a
// section header block, whose byte-order magic gives the order; interface
// description blocks then number the interfaces of the section (link type,
// snapshot length, timestamp resolution and offset), and each packet block
// names its interface. The reader takes enhanced and simple packet blocks and
// skips every other block (name resolution, statistics, decryption secrets,
// custom blocks).
//
//	section header (0x0a0d0d0a)   interface description (1)   enhanced packet (6)
//	 8: byte-order magic           8: link type (2 bytes)       8: interface ID
//	12: major 1, minor (2+2)      10: reserved (2 bytes)       12: timestamp, high 32 bits
//	16: section length (8)        12: snapshot length          16: timestamp, low 32 bits
//	24: options                   16: options                  20: captured length
//	                                                            24: original length
//	simple packet (3)                                           28: data, options
//	 8: original length
//	12: data (captured length from the block length and the snapshot length)
const (
	pcapngBlockHeader   = 8  // type and length
	pcapngBlockTrailer  = 4  // length again
	pcapngSHBBody       = 16 // byte-order magic through section length
	pcapngIDBBody       = 8  // link type through snapshot length
	pcapngEPBBody       = 20 // interface ID through original length
	pcapngSPBBody       = 4  // original length
	pcapngByteOrder     = 0x1a2b3c4d
	pcapngVersionMajor  = 1
	pcapngBlockIDB      = 1
	pcapngBlockSPB      = 3
	pcapngBlockEPB      = 6
	pcapngOptEnd        = 0
	pcapngOptTSResol    = 9  // if_tsresol: 1 byte
	pcapngOptTSOffset   = 14 // if_tsoffset: 8 bytes, seconds
	pcapngDefaultResol  = 6  // microseconds
	pcapngMaxInterfaces = 1 << 16
	// maxPcapngBlock bounds the blocks the reader holds in memory: a
	// packet of the largest snapshot length with room for options. Other
	// blocks are skipped without being held, whatever their length.
	maxPcapngBlock = maxPcapRecord + 64<<10
)

// pcapng is a PcapReader's state in a pcapng file: the current section's
// byte order and interfaces.
type pcapng struct {
	ifaces []pcapngIface
	blocks int // the number of the block being read, for error messages
}

// pcapngIface is an interface of the current section.
type pcapngIface struct {
	linkType uint32
	snaplen  uint32
	units    uint64 // timestamp units per second
	offset   int64  // seconds added to every timestamp
}

// startSection reads a section header block whose first bytes, head (at
// least the block header and the byte-order magic), have been read.
func (r *PcapReader) startSection(head []byte) error {
	switch magic := binary.LittleEndian.Uint32(head[pcapngBlockHeader:]); magic {
	case pcapngByteOrder:
		r.order = binary.LittleEndian
	case bits.ReverseBytes32(pcapngByteOrder):
		r.order = binary.BigEndian
	default:
		return fmt.Errorf("%w: pcapng block %d: byte-order magic %#08x", ErrNotPcap, r.ng.blocks, magic)
	}
	n := r.order.Uint32(head[4:])
	if n < pcapngBlockHeader+pcapngSHBBody+pcapngBlockTrailer || n%4 != 0 || n > maxPcapngBlock {
		return fmt.Errorf("%w: pcapng block %d: section header of %d bytes", ErrNotPcap, r.ng.blocks, n)
	}
	b := r.grow(int(n))
	copy(b, head)
	if err := r.readFull(b[len(head):]); err != nil {
		return err
	}
	if err := r.checkTrailer(b); err != nil {
		return err
	}
	if major := r.order.Uint16(b[12:]); major != pcapngVersionMajor {
		return fmt.Errorf("%w: pcapng version %d.%d", ErrNotPcap, major, r.order.Uint16(b[14:]))
	}
	r.ng.ifaces = r.ng.ifaces[:0]
	return nil
}

// nextBlock reads blocks until a packet block and returns its frame.
func (r *PcapReader) nextBlock() (Frame, error) {
	for {
		r.ng.blocks++
		var h [pcapngBlockHeader + 4]byte // and the byte-order magic of a section header
		if _, err := io.ReadFull(r.r, h[:pcapngBlockHeader]); err != nil {
			if errors.Is(err, io.EOF) {
				return Frame{}, io.EOF
			}
			return Frame{}, r.blockError(err)
		}
		typ := r.order.Uint32(h[:])
		if typ == pcapngMagic { // the same in either byte order
			if err := r.readFull(h[pcapngBlockHeader:]); err != nil {
				return Frame{}, err
			}
			if err := r.startSection(h[:]); err != nil {
				return Frame{}, err
			}
			continue
		}
		n := r.order.Uint32(h[4:])
		if n < pcapngBlockHeader+pcapngBlockTrailer || n%4 != 0 {
			return Frame{}, fmt.Errorf("%w: pcapng block %d: length %d", ErrNotPcap, r.ng.blocks, n)
		}
		switch typ {
		case pcapngBlockIDB, pcapngBlockEPB, pcapngBlockSPB:
		default:
			if _, err := io.CopyN(io.Discard, r.r, int64(n)-pcapngBlockHeader); err != nil {
				return Frame{}, r.blockError(err)
			}
			continue
		}
		if n > maxPcapngBlock {
			return Frame{}, fmt.Errorf("%w: pcapng block %d claims %d bytes", ErrNotPcap, r.ng.blocks, n)
		}
		b := r.grow(int(n))
		copy(b, h[:pcapngBlockHeader])
		if err := r.readFull(b[pcapngBlockHeader:]); err != nil {
			return Frame{}, err
		}
		if err := r.checkTrailer(b); err != nil {
			return Frame{}, err
		}
		body := b[pcapngBlockHeader : len(b)-pcapngBlockTrailer]
		switch typ {
		case pcapngBlockIDB:
			if err := r.addInterface(body); err != nil {
				return Frame{}, err
			}
		case pcapngBlockEPB:
			return r.enhancedPacket(body)
		case pcapngBlockSPB:
			return r.simplePacket(body)
		}
	}
}

// addInterface reads an interface description block's body.
func (r *PcapReader) addInterface(body []byte) error {
	if len(body) < pcapngIDBBody {
		return r.malformed("interface description of %d bytes", len(body))
	}
	if len(r.ng.ifaces) == pcapngMaxInterfaces {
		return r.malformed("more than %d interfaces", pcapngMaxInterfaces)
	}
	iface := pcapngIface{
		linkType: uint32(r.order.Uint16(body)),
		snaplen:  r.order.Uint32(body[4:]),
		units:    1e6,
	}
	for opts := body[pcapngIDBBody:]; len(opts) >= 4; {
		code, n := r.order.Uint16(opts), int(r.order.Uint16(opts[2:]))
		if code == pcapngOptEnd {
			break
		}
		if 4+n > len(opts) {
			return r.malformed("option %d of %d bytes overruns the block", code, n)
		}
		v := opts[4 : 4+n]
		switch {
		case code == pcapngOptTSResol && n == 1:
			units, ok := tsUnits(v[0])
			if !ok {
				return r.malformed("timestamp resolution %#02x", v[0])
			}
			iface.units = units
		case code == pcapngOptTSOffset && n == 8:
			iface.offset = int64(r.order.Uint64(v))
		}
		opts = opts[min(len(opts), 4+(n+3)&^3):]
	}
	r.ng.ifaces = append(r.ng.ifaces, iface)
	return nil
}

// tsUnits returns the timestamp units per second of an if_tsresol value:
// 10^v, or 2^(v&0x7f) when the top bit is set.
func tsUnits(v byte) (uint64, bool) {
	if v&0x80 != 0 {
		if v&0x7f > 63 {
			return 0, false
		}
		return 1 << (v & 0x7f), true
	}
	if v > 19 {
		return 0, false
	}
	u := uint64(1)
	for range v {
		u *= 10
	}
	return u, true
}

// enhancedPacket returns the frame of an enhanced packet block's body.
func (r *PcapReader) enhancedPacket(body []byte) (Frame, error) {
	if len(body) < pcapngEPBBody {
		return Frame{}, r.malformed("enhanced packet block of %d bytes", len(body))
	}
	id := r.order.Uint32(body)
	if id >= uint32(len(r.ng.ifaces)) {
		return Frame{}, r.malformed("packet on interface %d of %d", id, len(r.ng.ifaces))
	}
	iface := &r.ng.ifaces[id]
	ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
	n := r.order.Uint32(body[12:])
	if uint64(n) > uint64(len(body)-pcapngEPBBody) {
		return Frame{}, r.malformed("captured length %d overruns the block", n)
	}
	data := body[pcapngEPBBody : pcapngEPBBody+int(n)]
	return r.frame(iface.time(ts), iface.linkType, data), nil
}

// simplePacket returns the frame of a simple packet block's body: a packet
// on the section's first interface, with no timestamp.
func (r *PcapReader) simplePacket(body []byte) (Frame, error) {
	if len(body) < pcapngSPBBody {
		return Frame{}, r.malformed("simple packet block of %d bytes", len(body))
	}
	if len(r.ng.ifaces) == 0 {
		return Frame{}, r.malformed("simple packet block before any interface")
	}
	iface := &r.ng.ifaces[0]
	n := uint64(r.order.Uint32(body))
	n = min(n, uint64(len(body)-pcapngSPBBody))
	if iface.snaplen != 0 {
		n = min(n, uint64(iface.snaplen))
	}
	return r.frame(time.Time{}, iface.linkType, body[pcapngSPBBody:pcapngSPBBody+int(n)]), nil
}

// time converts a timestamp of the interface's resolution.
func (i *pcapngIface) time(ts uint64) time.Time {
	sec, rem := ts/i.units, ts%i.units
	hi, lo := bits.Mul64(rem, 1e9)
	ns, _ := bits.Div64(hi, lo, i.units) // rem < units, so hi < units
	return time.Unix(int64(sec)+i.offset, int64(ns)).UTC()
}

// grow returns the reader's buffer resized to n bytes.
func (r *PcapReader) grow(n int) []byte {
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	return r.buf[:n]
}

// readFull reads the rest of the current block into b.
func (r *PcapReader) readFull(b []byte) error {
	if _, err := io.ReadFull(r.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return r.blockError(err)
	}
	return nil
}

// checkTrailer checks that block b ends with its length.
func (r *PcapReader) checkTrailer(b []byte) error {
	if t := r.order.Uint32(b[len(b)-pcapngBlockTrailer:]); t != uint32(len(b)) {
		return r.malformed("block length %d, trailer %d", len(b), t)
	}
	return nil
}

func (r *PcapReader) blockError(err error) error {
	return fmt.Errorf("wire: pcapng block %d: %w", r.ng.blocks, err)
}

func (r *PcapReader) malformed(format string, a ...any) error {
	return fmt.Errorf("%w: pcapng block %d: %s", ErrNotPcap, r.ng.blocks, fmt.Sprintf(format, a...))
}
