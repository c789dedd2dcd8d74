package decode

import (
	"strconv"
	"time"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// AppendPacketLine appends the line softnic prints for a RoCEv2 packet, as
// decode prints captured packets and a live trace prints packets on the
// wire:
//
//	0.001234 10.77.0.12:49441 → 10.77.0.11:4791 RC RDMA Write Only qp=0x000011 ... payload=64 icrc=ok
//
// the time in seconds (relative to whatever the caller chooses) with six
// decimals, source → destination, the packet summary (mad.
// AppendPacketSummary: wire's, and a CM MAD's), and icrc=ok, icrc=BAD, or icrc=ok(ipid=0x0000) for an
// ICRC that verifies only under another IPv4 identification, sealedID
// (wire.ICRCRecovered), then a newline. It does not allocate if b has
// room.
func AppendPacketLine(b []byte, t time.Duration, env *wire.Envelope, p *wire.Packet, icrc wire.ICRCStatus, sealedID uint16) []byte {
	b = appendLinePrefix(b, t, env)
	b = mad.AppendPacketSummary(b, p)
	switch icrc {
	case wire.ICRCOK:
		return append(b, " icrc=ok\n"...)
	case wire.ICRCRecovered:
		const hex = "0123456789abcdef"
		b = append(b, " icrc=ok(ipid=0x"...)
		b = append(b, hex[sealedID>>12], hex[sealedID>>8&0xf], hex[sealedID>>4&0xf], hex[sealedID&0xf])
		return append(b, ")\n"...)
	}
	return append(b, " icrc=BAD\n"...)
}

// ICRCStatus is the wire.ICRCStatus of a check by a device (Envelope.Check).
func ICRCStatus(err error) wire.ICRCStatus {
	if err == nil {
		return wire.ICRCOK
	}
	return wire.ICRCBad
}

// AppendErrorLine appends the line for a datagram of n bytes that did not
// decode: the same time and addresses as AppendPacketLine, then the error.
func AppendErrorLine(b []byte, t time.Duration, env *wire.Envelope, n int, err error) []byte {
	b = appendLinePrefix(b, t, env)
	b = append(b, "undecodable "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "-byte datagram: "...)
	b = append(b, err.Error()...)
	return append(b, '\n')
}

func appendLinePrefix(b []byte, t time.Duration, env *wire.Envelope) []byte {
	b = strconv.AppendFloat(b, t.Seconds(), 'f', 6, 64)
	b = append(b, ' ')
	b = env.Src.AppendTo(b)
	b = append(b, " → "...)
	b = env.Dst.AppendTo(b)
	if c := env.TrafficClass; c != 0 {
		// Only when set: the IP header's DSCP and ECN, as the QP's address
		// vector gave them (grh.traffic_class).
		const hex = "0123456789abcdef"
		b = append(b, " tclass=0x"...)
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return append(b, ' ')
}
