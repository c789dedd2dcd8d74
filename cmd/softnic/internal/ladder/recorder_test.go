package ladder

import (
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// TestRecorder: the fault injector's notes become lost, copied and late
// arrows, a received packet is drawn only when asked for, and a bad ICRC
// is checked against the trace's envelope.
func TestRecorder(t *testing.T) {
	f := func(psn wire.PSN) []byte {
		return encode(t, envAB, &wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCSendOnly, PKey: 0xffff, DestQP: qpB, PSN: psn}}, 8)
	}
	t0 := time.Unix(1, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	bad := f(4)
	bad[len(bad)-1] ^= 1
	trace := []nic.TracePacket{
		{Time: at(0), Dir: nic.Sent, Env: envAB, Data: f(0)},
		{Time: at(1), Dir: nic.Sent, Env: envAB, Data: f(1), Note: nic.NoteFaultDropped},
		{Time: at(2), Dir: nic.Sent, Env: envAB, Data: f(2), Note: nic.NoteFaultDuplicated},
		{Time: at(3), Dir: nic.Sent, Env: envAB, Data: f(3), Note: nic.NoteFaultDelayed},
		{Time: at(4), Dir: nic.Sent, Env: envAB, Data: bad, Note: "corrupted by the fault injector"},
		{Time: at(5), Dir: nic.Received, Env: envBA, Data: f(9)},
		{Time: at(23), Dir: nic.Sent, Env: envAB, Data: f(3), Note: nic.NoteFaultReleased},
	}
	want := []struct {
		psn     wire.PSN
		lost    bool
		delayed time.Duration
		icrc    wire.ICRCStatus
		note    string
	}{
		{0, false, 0, wire.ICRCOK, ""},
		{1, true, 0, wire.ICRCOK, ""},
		{2, false, 0, wire.ICRCOK, ""},
		{2, false, 0, wire.ICRCOK, ""},
		{4, false, 0, wire.ICRCBad, "corrupted by the fault injector"},
		{3, false, 20 * time.Millisecond, wire.ICRCOK, ""},
	}
	for _, received := range []bool{false, true} {
		r := NewRecorder(New(Options{}), received)
		added := 0
		r.OnAdd = func(*Arrow) { added++ }
		for i := range trace {
			r.Trace(&trace[i])
		}
		r.Do(func(l *Ladder) {
			as := l.Arrows()
			n := len(want)
			if received {
				n++
			}
			if len(as) != n || added != n {
				t.Fatalf("received %v: %d arrows, OnAdd %d times; want %d", received, len(as), added, n)
			}
			if received {
				if as[5].PSN != 9 || as[5].FromA {
					t.Errorf("the received packet: %+v", as[5])
				}
				as = append(as[:5:5], as[6:]...)
			}
			for i, w := range want {
				a := as[i]
				if a.PSN != w.psn || a.Lost != w.lost || a.Delayed != w.delayed || a.ICRC != w.icrc || a.Note != w.note {
					t.Errorf("received %v, arrow %d: psn %v lost %v delayed %v icrc %v note %q; want %+v", received, i+1, a.PSN, a.Lost, a.Delayed, a.ICRC, a.Note, w)
				}
			}
		})
	}
}
