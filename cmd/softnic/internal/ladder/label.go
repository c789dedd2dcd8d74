package ladder

import (
	"strconv"
	"strings"

	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// label names a decoded packet on its arrow: the opcode without its
// transport (the conversation says it), an ACK by its syndrome, then the
// PSN, the MSN of an AETH and the payload size:
//
//	RDMA Write First psn=0x7ad92f 1024 B
//	ACK psn=0x7ad931 msn=1
//	NAK(PSN sequence error) psn=0x7ad930 msn=0
func label(a *Arrow) string {
	var b strings.Builder
	name := a.OpCode.String()
	if _, rest, ok := strings.Cut(name, " "); ok && strings.HasPrefix(name, a.OpCode.Transport().String()+" ") {
		name = rest
	}
	if a.OpCode == wire.OpRCAck {
		name = a.Syndrome.String()
		if a.Syndrome.Type() == wire.AckTypeACK {
			name = "ACK"
		}
	}
	b.WriteString(name)
	b.WriteString(" psn=")
	b.WriteString(a.PSN.String())
	if a.AETH {
		b.WriteString(" msn=")
		b.WriteString(strconv.FormatUint(uint64(a.MSN), 10))
	}
	if a.Size > 0 {
		b.WriteString(" ")
		b.WriteString(strconv.Itoa(a.Size))
		b.WriteString(" B")
	}
	return b.String()
}

// cmLabel names a CM message: "CM ConnectRequest qpn=0x000011 psn=0x1c2d3e".
func cmLabel(m *mad.MAD) string {
	s := "CM " + m.AttrID().String()
	switch {
	case m.REQ != nil:
		s += " qpn=" + hex6(m.REQ.LocalQPN()) + " psn=" + m.REQ.StartingPSN().String()
	case m.REP != nil:
		s += " qpn=" + hex6(m.REP.LocalQPN()) + " psn=" + m.REP.StartingPSN().String()
	}
	return s
}

// hex6 formats a QP number as wire does: "0x000011".
func hex6(v uint32) string { return wire.PSN(v & wire.PSNMask).String() }

func itoa(n int) string { return strconv.Itoa(n) }
