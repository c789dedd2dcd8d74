package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/wire"
)

// perftest's out-of-band exchange over TCP ("Data ex. method: Ethernet"),
// as perftest 4.5 (Debian bookworm's 4.5-0.17, version string "6.06")
// runs it before and after the RDMA traffic. The exchange is lock-step:
// each message is answered by one of the same size, the client writing
// first. In order:
//
//	16 bytes   the version, "6.06" padded with NULs
//	 4 bytes   the cycle buffer (page) size, big-endian; both take the larger
//	 4 bytes   the cache line size, big-endian; both take the larger
//	 2 bytes   the port's active MTU as an ibv_mtu number in ASCII and a NUL
//	           ("3\0" for 1024); both take the smaller
//	108 bytes  a key record (keyRecord): QP number, PSN, rkey, address, GID;
//	           the first carries the connection data, later ones are
//	           barriers, as many as the test's phases need (barriers)
//	8 bytes ×5 after the traffic of the RDMA WRITE, READ and ATOMIC
//	           bandwidth tests: the client's results (bwReport)
//	 5 bytes   "done\0", written by both before they close the connection
//
// Only the formats of perftest 5.33 and later are spoken (a 2-byte MTU,
// 8-byte iteration counts); perftest itself refuses peers older than 5.70.

// Sizes and defaults of the exchange.
const (
	oobVersion      = "6.06" // the perftest version whose exchange softnic speaks
	oobVersionSize  = 16
	oobKeySize      = 108 // KEY_MSG_SIZE_GID
	oobMTUSize      = 2
	oobWordSize     = 4
	oobResultSize   = 8
	oobResultFields = 5
	DefaultOOBPort  = 18515
	// defaultCycleBuffer and defaultCacheLine are what softnic announces:
	// perftest sends the page size and the CPU's cache line.
	defaultCycleBuffer = 4096
	defaultCacheLine   = 64
	// minPeerVersion is the oldest peer whose formats softnic reads.
	minPeerVersion = 5.33
)

// oobDone is the message each side writes before it closes the connection.
var oobDone = []byte("done\x00")

// errOOB marks a malformed message of the out-of-band exchange.
var errOOB = errors.New("malformed perftest message")

// keyRecord is one side's connection data (perftest's pingpong_dest), sent
// as 108 bytes of text:
//
//	LLLL:OOOO:QQQQQQ:PPPPPP:RRRRRRRR:VVVVVVVVVVVVVVVV:gg:gg:...:gg:SSSSSSSS:\0
//
// in hexadecimal: LID, outstanding reads (the READs and atomics this side
// takes as responder), QPN, PSN, rkey, the buffer's address, the 16 bytes
// of the GID and the SRQ number.
type keyRecord struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      wire.PSN
	RKey     uint32
	VAddr    uint64
	GID      wire.GID
	SRQN     uint32
}

// marshal formats the record, NUL-padded to oobKeySize bytes.
func (k *keyRecord) marshal() []byte {
	b := make([]byte, 0, oobKeySize)
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x:", k.LID, k.OutReads, k.QPN&0xFFFFFF, uint32(k.PSN), k.RKey, k.VAddr)
	for _, g := range k.GID {
		b = fmt.Appendf(b, "%02x:", g)
	}
	b = fmt.Appendf(b, "%08x:", k.SRQN)
	return b[:oobKeySize]
}

// keyFields is the number of colon-separated fields of a key record: six,
// the GID's sixteen bytes, the SRQ number.
const keyFields = 6 + 16 + 1

// parseKeyRecord reads a record sent by marshal or by perftest. Each field
// is a hexadecimal number of at most its width; the record ends at its
// first NUL. It returns an error wrapping errOOB for anything else.
func parseKeyRecord(b []byte) (keyRecord, error) {
	var k keyRecord
	if len(b) != oobKeySize {
		return k, fmt.Errorf("%w: key record of %d bytes, want %d", errOOB, len(b), oobKeySize)
	}
	text, _, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return k, fmt.Errorf("%w: key record without a NUL", errOOB)
	}
	fields := strings.Split(strings.TrimSuffix(string(text), ":"), ":")
	if len(fields) != keyFields {
		return k, fmt.Errorf("%w: key record %q has %d fields, want %d", errOOB, text, len(fields), keyFields)
	}
	var err error
	field := func(i, bits int) uint64 {
		v, ferr := strconv.ParseUint(fields[i], 16, bits)
		if ferr != nil && err == nil {
			err = fmt.Errorf("%w: key record field %d %q: not a %d-bit hexadecimal number", errOOB, i+1, fields[i], bits)
		}
		return v
	}
	k.LID = uint16(field(0, 16))
	k.OutReads = uint16(field(1, 16))
	k.QPN = uint32(field(2, 24))
	k.PSN = wire.PSN(field(3, 24))
	k.RKey = uint32(field(4, 32))
	k.VAddr = field(5, 64)
	for i := range k.GID {
		k.GID[i] = byte(field(6+i, 8))
	}
	k.SRQN = uint32(field(keyFields-1, 32))
	return k, err
}

// bwReport is the result a bandwidth test's client hands the server after
// the traffic (perftest's bw_report_data): the server prints it. Each
// field travels as 8 big-endian bytes, the floating-point ones as their
// IEEE 754 bits.
type bwReport struct {
	Size    uint64
	Iters   uint64
	PeakMBs float64 // MiB/s
	AvgMBs  float64 // MiB/s
	MsgRate float64 // million messages per second
}

// fields returns the report as the five words of the exchange.
func (r *bwReport) fields() [oobResultFields]uint64 {
	return [...]uint64{r.Size, r.Iters, math.Float64bits(r.PeakMBs), math.Float64bits(r.AvgMBs), math.Float64bits(r.MsgRate)}
}

func reportFromFields(f [oobResultFields]uint64) bwReport {
	return bwReport{f[0], f[1], math.Float64frombits(f[2]), math.Float64frombits(f[3]), math.Float64frombits(f[4])}
}

// oobConn is the out-of-band connection of one side.
type oobConn struct {
	conn   net.Conn
	client bool
}

// exchange sends msg and returns the peer's message of the same size, in
// perftest's order: the client writes first and then reads, the server
// reads first and then answers.
func (o *oobConn) exchange(msg []byte) ([]byte, error) {
	peer := make([]byte, len(msg))
	if o.client {
		if _, err := o.conn.Write(msg); err != nil {
			return nil, err
		}
	}
	if _, err := io.ReadFull(o.conn, peer); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("the peer closed the connection while %d bytes were expected: %w", len(msg), err)
		}
		return nil, err
	}
	if !o.client {
		if _, err := o.conn.Write(msg); err != nil {
			return nil, err
		}
	}
	return peer, nil
}

// oobParams is what the opening of the exchange settles: both sides use
// the larger cycle buffer and cache line and the smaller MTU.
type oobParams struct {
	peerVersion float64
	cycleBuffer int
	cacheLine   int
	mtu         wire.MTU
}

// open runs the exchange's opening: version, cycle buffer, cache line and
// MTU, announcing mtu.
func (o *oobConn) open(mtu wire.MTU) (oobParams, error) {
	var p oobParams
	v := make([]byte, oobVersionSize)
	copy(v, oobVersion)
	peer, err := o.exchange(v)
	if err != nil {
		return p, fmt.Errorf("version: %w", err)
	}
	if p.peerVersion, err = parseVersion(peer); err != nil {
		return p, err
	}
	if p.peerVersion < minPeerVersion {
		return p, fmt.Errorf("the peer is perftest %g; softnic speaks the exchange of %g and later", p.peerVersion, minPeerVersion)
	}
	if p.cycleBuffer, err = o.exchangeMax(defaultCycleBuffer); err != nil {
		return p, fmt.Errorf("cycle buffer: %w", err)
	}
	if p.cacheLine, err = o.exchangeMax(defaultCacheLine); err != nil {
		return p, fmt.Errorf("cache line: %w", err)
	}
	if p.mtu, err = o.exchangeMTU(mtu); err != nil {
		return p, fmt.Errorf("MTU: %w", err)
	}
	return p, nil
}

// parseVersion reads a version string such as "6.06": the number before
// the first NUL.
func parseVersion(b []byte) (float64, error) {
	text, _, _ := bytes.Cut(b, []byte{0})
	v, err := strconv.ParseFloat(string(text), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: version %q", errOOB, text)
	}
	return v, nil
}

// maxOOBSystemValue bounds the cycle buffer and cache line a peer may
// announce: both size the buffers softnic registers.
const maxOOBSystemValue = 1 << 20

// exchangeMax exchanges a 4-byte big-endian value and returns the larger
// of the two, perftest's rule for the cycle buffer and the cache line.
func (o *oobConn) exchangeMax(mine int) (int, error) {
	b := binary.BigEndian.AppendUint32(nil, uint32(mine))
	peer, err := o.exchange(b)
	if err != nil {
		return 0, err
	}
	v := int(binary.BigEndian.Uint32(peer))
	if v <= 0 || v > maxOOBSystemValue || v&(v-1) != 0 {
		return 0, fmt.Errorf("%w: %d is not a power of two up to %d", errOOB, v, maxOOBSystemValue)
	}
	return max(mine, v), nil
}

// exchangeMTU exchanges the MTU numbers and returns the smaller MTU.
func (o *oobConn) exchangeMTU(mine wire.MTU) (wire.MTU, error) {
	peer, err := o.exchange([]byte{'0' + byte(mine), 0})
	if err != nil {
		return 0, err
	}
	m := wire.MTU(peer[0] - '0')
	if peer[1] != 0 || m.Bytes() == 0 {
		return 0, fmt.Errorf("%w: MTU %q is not an ibv_mtu from 1 (256) to 5 (4096)", errOOB, peer)
	}
	return min(mine, m), nil
}

// exchangeKeys sends k and returns the peer's record.
func (o *oobConn) exchangeKeys(k *keyRecord) (keyRecord, error) {
	peer, err := o.exchange(k.marshal())
	if err != nil {
		return keyRecord{}, err
	}
	return parseKeyRecord(peer)
}

// barrier exchanges key records without looking at the peer's: perftest
// uses its hand-shake as a barrier between the phases of a test.
func (o *oobConn) barrier(k *keyRecord) error {
	_, err := o.exchange(k.marshal())
	return err
}

// exchangeReports sends mine and returns the peer's report, one field at
// a time as perftest does.
func (o *oobConn) exchangeReports(mine *bwReport) (bwReport, error) {
	var peer [oobResultFields]uint64
	for i, f := range mine.fields() {
		b, err := o.exchange(binary.BigEndian.AppendUint64(nil, f))
		if err != nil {
			return bwReport{}, err
		}
		peer[i] = binary.BigEndian.Uint64(b)
	}
	return reportFromFields(peer), nil
}

// oobDoneWait bounds the wait for the peer's "done".
const oobDoneWait = 5 * time.Second

// close writes "done" and closes the connection after reading the peer's
// (within oobDoneWait), which perftest writes too: closing with it unread
// would reset the connection under the peer.
func (o *oobConn) close() error {
	_, err := o.conn.Write(oobDone)
	if err == nil {
		peer := make([]byte, len(oobDone))
		o.conn.SetReadDeadline(time.Now().Add(oobDoneWait))
		if _, rerr := io.ReadFull(o.conn, peer); rerr == nil && !bytes.Equal(peer, oobDone) {
			err = fmt.Errorf("%w: %q instead of \"done\"", errOOB, peer)
		}
	}
	return errors.Join(err, o.conn.Close())
}
