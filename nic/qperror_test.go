package nic_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// qpErrors records what Config.OnQPError is told.
type qpErrors chan qpErrorCall

type qpErrorCall struct {
	q     *nic.QP
	cause verbs.WCStatus
}

func (c qpErrors) hook(q *nic.QP, cause verbs.WCStatus) { c <- qpErrorCall{q, cause} }

// next returns the next call, failing the test after ten seconds without one.
func (c qpErrors) next(t *testing.T) qpErrorCall {
	t.Helper()
	select {
	case e := <-c:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("Config.OnQPError was not called")
		return qpErrorCall{}
	}
}

// none fails the test if a call is waiting, or comes within a moment.
func (c qpErrors) none(t *testing.T, after string) {
	t.Helper()
	select {
	case e := <-c:
		t.Errorf("after %s, OnQPError was called for QP %d with %s", after, e.q.Num(), e.cause)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestOnQPError: a WRITE with a bad rkey moves both QPs to the error state
// by themselves, and each device's OnQPError is told once, with the QP
// and the status; a QP the program moves to ERR is not reported, and one
// brought back and failed again is reported again. On embedded devices,
// and on devices attached to a daemon.
func TestOnQPError(t *testing.T) {
	for _, tc := range []struct {
		name string
		ends func(t *testing.T, ea, eb qpErrors) (*end, *end)
	}{
		{"embedded", func(t *testing.T, ea, eb qpErrors) (*end, *end) {
			return openEnd(t, nic.Config{OnQPError: ea.hook}), openEnd(t, nic.Config{OnQPError: eb.hook})
		}},
		{"attached", func(t *testing.T, ea, eb qpErrors) (*end, *end) {
			d := startDaemon(t, nic.Config{})
			open := func(c qpErrors) *end {
				dev, err := nic.Open(nic.Config{Attach: d.path, OnQPError: c.hook})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { dev.Close() })
				return attachedEndOn(t, dev)
			}
			return open(ea), open(eb)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := make(qpErrors, 8), make(qpErrors, 8)
			a, b := tc.ends(t, ea, eb)
			reconnect := func() {
				for _, q := range []*nic.QP{a.qp, b.qp} {
					if err := q.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState); err != nil {
						t.Fatal(err)
					}
				}
				connectEnds(t, a, b)
			}
			for round := range 2 {
				reconnect()
				wr := &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 0x100}
				if err := a.qp.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				if wc := nictest.Wait(t, a.cq); wc.Status != verbs.RemAccessErr {
					t.Fatalf("round %d: completion %v, want REM_ACCESS_ERR", round, &wc)
				}
				if e := ea.next(t); e.q != a.qp || e.cause != verbs.RemAccessErr {
					t.Errorf("round %d: the requester's OnQPError: QP %p with %s, want %p with REM_ACCESS_ERR", round, e.q, e.cause, a.qp)
				}
				if e := eb.next(t); e.q != b.qp || e.cause == verbs.Success {
					t.Errorf("round %d: the responder's OnQPError: QP %p with %s, want %p with an error", round, e.q, e.cause, b.qp)
				}
				ea.none(t, "the error")
				eb.none(t, "the error")
			}
			reconnect()
			if err := a.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
			ea.none(t, "Modify to ERR")
		})
	}
}
