package rings

import (
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

type noOwner struct{}

func (noOwner) QP(uint32) *QP     { return nil }
func (noOwner) Overflowed(uint32) {}

// TestArmedSignals: a completion ring armed for any completion is
// signalled at the next one and disarmed; armed for solicited ones, a
// completion neither solicited nor in error leaves it armed and
// unsignalled, and the next solicited one, or one in error, signals it;
// an arming widened meanwhile to any completion is signalled at the next.
func TestArmedSignals(t *testing.T) {
	if err := shm.Supported(); err != nil {
		t.Skip(err)
	}
	var n [5]atomic.Uint64
	qcq, err := qp.NewCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCQ(qcq, 64, &Counts{&n[0], &n[1], &n[2], &n[3], &n[4]}, noOwner{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wait := c.TakeWaitFD()
	defer unix.Close(wait)
	signalled := func() bool {
		var evs [4]unix.EpollEvent
		k, err := unix.EpollWait(wait, evs[:], 0)
		if err != nil {
			t.Fatal(err)
		}
		return k > 0
	}
	plain := verbs.WC{Status: verbs.Success, Opcode: verbs.WCRecv}
	solicited := verbs.WC{Status: verbs.Success, Opcode: verbs.WCRecv, Flags: verbs.WCSolicited}
	failed := verbs.WC{Status: verbs.WRFlushErr}
	armed := c.Ring().Armed()
	for _, step := range []struct {
		name      string
		arm       uint32 // stored before the push unless 0
		wc        verbs.WC
		signalled bool
		left      uint32 // the armed word after
	}{
		{"not armed", 0, plain, false, 0},
		{"armed for any", shm.ArmedAny, plain, true, 0},
		{"disarmed by the signal", 0, plain, false, 0},
		{"armed for solicited, a plain completion", shm.ArmedSolicited, plain, false, shm.ArmedSolicited},
		{"then a solicited one", 0, solicited, true, 0},
		{"armed for solicited, one in error", shm.ArmedSolicited, failed, true, 0},
		{"armed for solicited, widened to any", shm.ArmedSolicited, verbs.WC{}, false, shm.ArmedSolicited},
		{"widened", shm.ArmedAny, plain, true, 0},
	} {
		if step.arm != 0 {
			armed.Store(step.arm)
		}
		if step.wc != (verbs.WC{}) {
			c.push(&step.wc)
		}
		if got := signalled(); got != step.signalled || armed.Load() != step.left {
			t.Errorf("%s: signalled %v, armed %d after; want %v, %d", step.name, got, armed.Load(), step.signalled, step.left)
		}
	}
}
