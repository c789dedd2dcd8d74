package qp_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestRNRTimer: after an RNR NAK the requester waits exactly the time the
// NAK's timer code names before it sends the request again (IBTA
// 9.7.5.2.8, table 45, as rxe's rnrnak_usec): the responder puts its
// min_rnr_timer in the NAK.
func TestRNRTimer(t *testing.T) {
	for _, code := range []uint8{0, 1, 14, 31} {
		want := time.Duration(wire.RNRTimerMicros[code]) * time.Microsecond
		t.Run(fmt.Sprintf("code=%d", code), func(t *testing.T) {
			attr := defaultAttr()
			attr.MinRNRTimer = code
			s, a, b := pair(t, attr)
			var nakSent, resent qp.Time
			var sends int
			s.drop = func(h *host, p *wire.Packet) bool {
				switch {
				case h == b && p.AETH != nil && p.AETH.Syndrome().Type() == wire.AckTypeRNRNak:
					if got := p.AETH.Syndrome().RNRTimer(); got != code {
						t.Errorf("RNR NAK carries timer %d, want min_rnr_timer %d", got, code)
					}
					nakSent = s.now
				case h == a && p.OpCode().IsSend():
					if sends++; sends == 2 {
						resent = s.now
					}
				}
				return false
			}
			post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: sgl(a.sge(0, 8))})
			s.run(time.Second, func() bool { return sends == 2 })
			if got := resent.Sub(nakSent) - s.latency; got != want {
				t.Errorf("the SEND was resent %v after the RNR NAK arrived, want %v", got, want)
			}
		})
	}
}
