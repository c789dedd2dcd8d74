package decode

import (
	"time"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// PacketJSON is what decode --json prints for a packet: one object per
// line, with what the text line shows and every field of every header
// (named as package wire names them), absent for the headers the opcode
// does not carry.
type PacketJSON struct {
	Frame     int       `json:"frame"` // its number in the capture, from 1
	Time      float64   `json:"time"`  // seconds since the capture's first frame, as the text shows
	Timestamp time.Time `json:"timestamp"`
	Src       string    `json:"src"`
	Dst       string    `json:"dst"`
	IPID      uint16    `json:"ip_id"` // the IPv4 identification as captured
	// TrafficClass is the IPv4 TOS or IPv6 Traffic Class byte: DSCP and ECN.
	TrafficClass uint8 `json:"traffic_class"`
	// ICRC is "ok", "BAD" or "recovered": verifying only under the IPv4
	// identification SealedIPID.
	ICRC       string  `json:"icrc"`
	SealedIPID *uint16 `json:"sealed_ip_id,omitempty"`
	Length     int     `json:"length"` // the packet: BTH through ICRC
	// Piece and Pieces number the packets of a UDP GSO send captured
	// whole (wire.Frame.Piece); absent for a datagram of one packet.
	Piece     int    `json:"piece,omitempty"`
	Pieces    int    `json:"pieces,omitempty"`
	Error     string `json:"error,omitempty"` // why it did not decode; nothing below is then set
	Transport string `json:"transport,omitempty"`
	OpCode    string `json:"opcode,omitempty"`   // the name the text line shows
	Syndrome  string `json:"syndrome,omitempty"` // the AETH syndrome in words
	Payload   int    `json:"payload"`
	Pad       int    `json:"pad"`
	ICRCValue uint32 `json:"icrc_value"`

	BTH          *wire.BTHFields          `json:"bth,omitempty"`
	RETH         *wire.RETHFields         `json:"reth,omitempty"`
	AETH         *wire.AETHFields         `json:"aeth,omitempty"`
	AtomicETH    *wire.AtomicETHFields    `json:"atomic_eth,omitempty"`
	AtomicAckETH *wire.AtomicAckETHFields `json:"atomic_ack_eth,omitempty"`
	ImmDT        *uint32                  `json:"imm_dt,omitempty"`
	IETH         *uint32                  `json:"ieth,omitempty"`
	DETH         *wire.DETHFields         `json:"deth,omitempty"`
	FETH         *wire.FETHFields         `json:"feth,omitempty"`
	MAD          *MADJSON                 `json:"mad,omitempty"`
}

// MADJSON is a CM MAD to QP1: its header and its one message.
type MADJSON struct {
	Attr   string              `json:"attr"`
	Header mad.MADHeaderFields `json:"header"`
	REQ    *mad.REQFields      `json:"req,omitempty"`
	MRA    *mad.MRAFields      `json:"mra,omitempty"`
	REJ    *mad.REJFields      `json:"rej,omitempty"`
	REP    *mad.REPFields      `json:"rep,omitempty"`
	RTU    *mad.RTUFields      `json:"rtu,omitempty"`
	DREQ   *mad.DREQFields     `json:"dreq,omitempty"`
	DREP   *mad.DREPFields     `json:"drep,omitempty"`
}

// newPacketJSON describes frame n, elapsed after the first, whose payload
// p holds unless decErr says why it does not.
func newPacketJSON(n int, elapsed time.Duration, fr *wire.Frame, p *wire.Packet, decErr error) *PacketJSON {
	j := &PacketJSON{
		Frame:     n,
		Time:      elapsed.Seconds(),
		Timestamp: fr.Time,
		Src:       fr.Env.Src.String(),
		Dst:       fr.Env.Dst.String(),
		IPID:      fr.Env.IPID, TrafficClass: fr.Env.TrafficClass,
		ICRC:   fr.ICRC.String(),
		Length: len(fr.Payload),
		Piece:  fr.Piece,
		Pieces: fr.Pieces,
	}
	if fr.ICRC == wire.ICRCRecovered {
		id := fr.SealedIPID
		j.SealedIPID = &id
	}
	if decErr != nil {
		j.Error = decErr.Error()
		return j
	}
	var f wire.Fields
	p.Fields(&f)
	op := p.OpCode()
	j.Transport = op.Transport().String()
	j.OpCode = op.String()
	j.Payload = len(p.Payload)
	j.Pad = int(p.BTH.PadCount())
	j.ICRCValue = p.ICRC()
	j.BTH = &f.BTH
	if p.RETH != nil {
		j.RETH = &f.RETH
	}
	if p.AETH != nil {
		j.AETH = &f.AETH
		j.Syndrome = f.AETH.Syndrome.String()
	}
	if p.AtomicETH != nil {
		j.AtomicETH = &f.AtomicETH
	}
	if p.AtomicAckETH != nil {
		j.AtomicAckETH = &f.AtomicAckETH
	}
	if p.ImmDT != nil {
		j.ImmDT = &f.ImmDT
	}
	if p.IETH != nil {
		j.IETH = &f.IETH
	}
	if p.DETH != nil {
		j.DETH = &f.DETH
	}
	if p.FETH != nil {
		j.FETH = &f.FETH
	}
	var m mad.MAD
	if p.DETH != nil && p.BTH.DestQP() == wire.GSIQPN && m.Decode(p.Payload) == nil {
		var mf mad.MADFields
		m.Fields(&mf)
		j.MAD = &MADJSON{Attr: m.AttrID().String(), Header: mf.Header}
		switch {
		case m.REQ != nil:
			j.MAD.REQ = &mf.REQ
		case m.MRA != nil:
			j.MAD.MRA = &mf.MRA
		case m.REJ != nil:
			j.MAD.REJ = &mf.REJ
		case m.REP != nil:
			j.MAD.REP = &mf.REP
		case m.RTU != nil:
			j.MAD.RTU = &mf.RTU
		case m.DREQ != nil:
			j.MAD.DREQ = &mf.DREQ
		case m.DREP != nil:
			j.MAD.DREP = &mf.DREP
		}
	}
	return j
}
