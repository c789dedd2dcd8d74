// Package wire is softnic's RoCEv2 codec: the InfiniBand transport headers
// (BTH and the extension headers RETH, AETH, AtomicETH, AtomicAckETH, ImmDT,
// IETH, DETH, FETH) that RoCEv2 carries in UDP datagrams to port 4791, the
// opcode table, 24-bit PSN arithmetic, the invariant CRC (ICRC) over the
// IP/UDP envelope, and captures: classic pcap files written with full
// Ethernet/IP/UDP framing, pcap and pcapng files read. Of InfiniBand
// management it keeps what the transport shares with it: QP1 (GSIQPN,
// GSIQKey), GIDs and MTU codes; package wire/mad codes the management
// datagrams themselves. Package wire/wirefmt prints packets for people.
//
// Headers are typed views over byte slices (type BTH []byte and so on) with
// accessors and setters that do not bounds-check; [Packet.Decode] validates
// every length before it hands out a view. A [Fields] value describes a whole
// packet and encodes it into a caller-owned buffer. Decoding, encoding and the
// ICRC do not allocate, so they can run per packet.
//
// The layouts and rules follow the InfiniBand Architecture Specification
// (Volume 1, chapter 9 "Transport layer", and Annex A17 "RoCEv2") as Linux
// Soft-RoCE (rdma_rxe) puts them on the wire; packets captured from rxe are
// decoded and re-encoded byte for byte by the tests.
//
// Package wire does no I/O other than reading and writing pcap streams through
// an io.Reader or io.Writer, keeps no state between packets, and imports
// nothing else of softnic.
package wire

import "errors"

// UDPPort is the IANA-assigned UDP destination port of RoCEv2.
const UDPPort = 4791

// MulticastQPN is the destination QPN of a UD datagram to a multicast
// group, which every QP attached to the group takes.
const MulticastQPN = 0xFFFFFF

// Errors returned by the decoders and encoders. Each parser's documentation
// lists which of them it returns; wrap them with %w and test with errors.Is.
var (
	// ErrTruncated: the bytes end before a header or the ICRC does.
	ErrTruncated = errors.New("wire: truncated packet")
	// ErrBadOpCode: the BTH opcode is not one softnic implements.
	ErrBadOpCode = errors.New("wire: unsupported opcode")
	// ErrBadTVer: the BTH transport header version is not 0.
	ErrBadTVer = errors.New("wire: bad transport header version")
	// ErrBadPad: the pad count does not fit the packet, or the headers,
	// payload and pad are not a multiple of 4 bytes long, or a packet that
	// must not be padded is.
	ErrBadPad = errors.New("wire: bad pad count")
	// ErrBadLength: the payload size is not allowed for the opcode.
	ErrBadLength = errors.New("wire: payload length not allowed for opcode")
	// ErrBadICRC: the invariant CRC does not match the packet.
	ErrBadICRC = errors.New("wire: bad ICRC")
	// ErrShortBuffer: the buffer given to an encoder is too small.
	ErrShortBuffer = errors.New("wire: buffer too small")
	// ErrBadIPHeader: bytes meant to be an IPv4 or IPv6 header followed by
	// a UDP header are not.
	ErrBadIPHeader = errors.New("wire: not an IPv4 or IPv6 header followed by UDP")
	// ErrNotPcap: the stream is neither a classic pcap nor a pcapng file,
	// or a record or block of it is malformed.
	ErrNotPcap = errors.New("wire: not a pcap file")
)
