package qp_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// masks are the attributes a transition requires and those it may take.
type masks struct{ req, opt verbs.AttrMask }

type edge struct{ from, to verbs.State }

// Common attribute sets of the modify-QP table.
const (
	rcRTR = verbs.AttrRemote | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	ucRTR = verbs.AttrRemote | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	rcRTS = verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxRdAtomic
)

// modifyTable is the IBTA modify-QP table as Linux's ib_modify_qp_is_ok
// encodes it (drivers/infiniband/core/verbs.c, qp_state_table), in
// softnic's attributes: P_Key for the P_Key index, Remote for the address
// vector; the port, alternate path, path migration and CUR_STATE
// attributes have no meaning on a softnic device. Where softnic departs
// from it the entry says so. A pair not listed is not a transition.
var modifyTable = map[verbs.Type]map[edge]masks{
	verbs.RC: {
		{verbs.Reset, verbs.Init}: {verbs.AttrAccessFlags, verbs.AttrPKey},
		{verbs.Init, verbs.Init}:  {0, verbs.AttrAccessFlags | verbs.AttrPKey},
		{verbs.Init, verbs.RTR}:   {rcRTR, verbs.AttrAccessFlags | verbs.AttrPKey},
		{verbs.RTR, verbs.RTS}:    {rcRTS, verbs.AttrAccessFlags | verbs.AttrMinRNRTimer},
		{verbs.RTS, verbs.RTS}:    {0, verbs.AttrAccessFlags | verbs.AttrMinRNRTimer},
		{verbs.RTS, verbs.SQD}:    {},
		{verbs.SQD, verbs.RTS}:    {0, verbs.AttrAccessFlags | verbs.AttrMinRNRTimer},
		// Linux also takes the address vector, P_Key and max_rd_atomic
		// and max_dest_rd_atomic here; softnic does not.
		{verbs.SQD, verbs.SQD}: {0, verbs.AttrAccessFlags | verbs.AttrMinRNRTimer | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry},
	},
	verbs.UC: {
		{verbs.Reset, verbs.Init}: {verbs.AttrAccessFlags, verbs.AttrPKey},
		{verbs.Init, verbs.Init}:  {0, verbs.AttrAccessFlags | verbs.AttrPKey},
		{verbs.Init, verbs.RTR}:   {ucRTR, verbs.AttrAccessFlags | verbs.AttrPKey},
		{verbs.RTR, verbs.RTS}:    {verbs.AttrSQPSN, verbs.AttrAccessFlags},
		{verbs.RTS, verbs.RTS}:    {0, verbs.AttrAccessFlags},
		{verbs.RTS, verbs.SQD}:    {},
		{verbs.SQD, verbs.RTS}:    {0, verbs.AttrAccessFlags},
		{verbs.SQD, verbs.SQD}:    {0, verbs.AttrAccessFlags}, // Linux also takes the address vector and P_Key
	},
	verbs.UD: {
		{verbs.Reset, verbs.Init}: {verbs.AttrQKey, verbs.AttrPKey},
		{verbs.Init, verbs.Init}:  {0, verbs.AttrQKey | verbs.AttrPKey},
		// softnic also takes a path MTU, the UD message size limit
		// (4096 without it); Linux uses the port's.
		{verbs.Init, verbs.RTR}: {0, verbs.AttrQKey | verbs.AttrPKey | verbs.AttrPathMTU},
		{verbs.RTR, verbs.RTS}:  {verbs.AttrSQPSN, verbs.AttrQKey},
		{verbs.RTS, verbs.RTS}:  {0, verbs.AttrQKey},
		{verbs.RTS, verbs.SQD}:  {},
		{verbs.SQD, verbs.RTS}:  {0, verbs.AttrQKey},
		{verbs.SQD, verbs.SQD}:  {0, verbs.AttrQKey}, // Linux also takes P_Key
	},
}

// transition returns the masks of from→to for typ: every state may go to
// RESET, and every state but RESET to ERR (Linux's table), and nothing
// enters SQE through Modify.
func transition(typ verbs.Type, from, to verbs.State) (masks, bool) {
	if to == verbs.Reset || to == verbs.Err && from != verbs.Reset {
		return masks{}, true
	}
	m, ok := modifyTable[typ][edge{from, to}]
	return m, ok
}

// allAttrs lists the attribute bits Modify knows besides AttrState.
var allAttrs = []verbs.AttrMask{
	verbs.AttrAccessFlags, verbs.AttrPKey, verbs.AttrQKey, verbs.AttrRemote, verbs.AttrPathMTU, verbs.AttrTimeout,
	verbs.AttrRetryCnt, verbs.AttrRNRRetry, verbs.AttrRQPSN, verbs.AttrMaxRdAtomic, verbs.AttrMinRNRTimer,
	verbs.AttrSQPSN, verbs.AttrMaxDestRdAtomic, verbs.AttrDestQPN,
}

// goodAttr holds a valid value for every attribute, none of them a default.
func goodAttr(state verbs.State) verbs.Attr {
	return verbs.Attr{State: state, AccessFlags: mr.RemoteWrite | mr.RemoteRead, PKey: 0x8001, QKey: 0x1234,
		Remote: netip.MustParseAddrPort("10.0.0.2:4791"), PathMTU: 2048, Timeout: 14, RetryCnt: 6, RNRRetry: 5,
		RQPSN: 0x123, MaxRdAtomic: 4, MinRNRTimer: 12, SQPSN: 0x456, MaxDestRdAtomic: 3, DestQPN: 0x99}
}

// attrValue returns the field of a that bit selects.
func attrValue(a verbs.Attr, bit verbs.AttrMask) any {
	switch bit {
	case verbs.AttrAccessFlags:
		return a.AccessFlags
	case verbs.AttrPKey:
		return a.PKey
	case verbs.AttrQKey:
		return a.QKey
	case verbs.AttrRemote:
		return a.Remote
	case verbs.AttrPathMTU:
		return a.PathMTU
	case verbs.AttrTimeout:
		return a.Timeout
	case verbs.AttrRetryCnt:
		return a.RetryCnt
	case verbs.AttrRNRRetry:
		return a.RNRRetry
	case verbs.AttrRQPSN:
		return a.RQPSN
	case verbs.AttrMaxRdAtomic:
		return a.MaxRdAtomic
	case verbs.AttrMinRNRTimer:
		return a.MinRNRTimer
	case verbs.AttrSQPSN:
		return a.SQPSN
	case verbs.AttrMaxDestRdAtomic:
		return a.MaxDestRdAtomic
	case verbs.AttrDestQPN:
		return a.DestQPN
	}
	panic(fmt.Sprintf("attribute %v", bit))
}

// qpFactory makes bare QPs (no peer, no traffic) on one region table.
type qpFactory struct {
	t    *testing.T
	mem  *mr.Table
	pd   mr.PDHandle
	cq   *qp.CQ
	next uint32
}

func newQPFactory(t *testing.T) *qpFactory {
	mem := mr.NewTable(mr.Config{})
	t.Cleanup(func() { mem.Close() })
	pd, err := mem.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return &qpFactory{t: t, mem: mem, pd: pd, cq: newTestCQ(t, 64), next: 0x100}
}

// make returns a new QP of type typ moved to state by the usual path
// (RESET→INIT→RTR→RTS→SQD; ERR from RTS).
func (f *qpFactory) make(typ verbs.Type, state verbs.State) *qp.QP {
	f.t.Helper()
	f.next++
	q, err := qp.New(f.next, qp.Config{Type: typ, PD: f.pd, Memory: f.mem, SendCQ: f.cq, RecvCQ: f.cq,
		MaxSendWR: 4, MaxRecvWR: 4, MaxInline: 16})
	if err != nil {
		f.t.Fatal(err)
	}
	path := []verbs.State{verbs.Init, verbs.RTR, verbs.RTS, verbs.SQD}
	if state == verbs.Err {
		path = append(path[:3], verbs.Err)
	}
	for i, from := 0, verbs.Reset; from != state; i++ {
		m, _ := transition(typ, from, path[i])
		a := goodAttr(path[i])
		if err := q.Modify(&a, verbs.AttrState|m.req); err != nil {
			f.t.Fatalf("%s %s→%s: %v", typ, from, path[i], err)
		}
		from = path[i]
	}
	return q
}

var allStates = []verbs.State{verbs.Reset, verbs.Init, verbs.RTR, verbs.RTS, verbs.SQD, verbs.SQE, verbs.Err}

// TestModifyTransitions walks the whole state table for RC, UC and UD: an
// allowed transition succeeds with its required attributes and sets them,
// also with every optional one; it fails with EINVAL, naming the attribute,
// when a required one is missing or one it does not take is given; a pair
// that is not a transition fails (ibv_modify_qp returns EINVAL for all of
// these, as ib_modify_qp_is_ok decides).
func TestModifyTransitions(t *testing.T) {
	f := newQPFactory(t)
	for _, typ := range []verbs.Type{verbs.RC, verbs.UC, verbs.UD} {
		for _, from := range allStates {
			if from == verbs.SQE {
				continue // no QP gets there: softnic moves a failed send queue to ERR
			}
			for _, to := range allStates {
				t.Run(fmt.Sprintf("%s/%s-%s", typ, from, to), func(t *testing.T) {
					m, ok := transition(typ, from, to)
					if !ok {
						q := f.make(typ, from)
						a := goodAttr(to)
						if err := q.Modify(&a, verbs.AttrState); !errors.Is(err, qp.ErrInvalid) || q.State() != from {
							t.Errorf("not a transition: Modify = %v, state %s; want ErrInvalid, %s", err, q.State(), from)
						}
						return
					}
					checkTransition(t, f, typ, from, to, m)
				})
			}
		}
	}
}

func checkTransition(t *testing.T, f *qpFactory, typ verbs.Type, from, to verbs.State, m masks) {
	a := goodAttr(to)
	for _, given := range []verbs.AttrMask{m.req, m.req | m.opt} {
		q := f.make(typ, from)
		if err := q.Modify(&a, verbs.AttrState|given); err != nil || q.State() != to {
			t.Fatalf("Modify with %v = %v, state %s; want success, %s", given, err, q.State(), to)
		}
		if to == verbs.Reset {
			continue // RESET forgets every attribute
		}
		for _, bit := range allAttrs {
			if given&bit != 0 && attrValue(q.Attr(), bit) != attrValue(a, bit) {
				t.Errorf("after Modify %v is %v, want %v", bit, attrValue(q.Attr(), bit), attrValue(a, bit))
			}
		}
	}
	for _, bit := range allAttrs {
		var mask verbs.AttrMask
		var want string
		switch {
		case m.req&bit != 0:
			mask, want = verbs.AttrState|m.req&^bit, "needs "+bit.String()
		case m.opt&bit == 0:
			mask, want = verbs.AttrState|m.req|bit, "does not take "+bit.String()
		default:
			continue
		}
		q := f.make(typ, from)
		before := q.Attr()
		err := q.Modify(&a, mask)
		if !errors.Is(err, qp.ErrInvalid) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("Modify with %v = %v; want ErrInvalid saying %q", mask, err, want)
		}
		if q.Attr() != before {
			t.Errorf("a refused Modify changed the attributes to %+v", q.Attr())
		}
	}
}

// TestModifyOmittedStateKeepsState: without AttrState a Modify is a
// transition from the current state to itself (ibv_modify_qp).
func TestModifyOmittedStateKeepsState(t *testing.T) {
	f := newQPFactory(t)
	q := f.make(verbs.RC, verbs.RTS)
	if err := q.Modify(&verbs.Attr{AccessFlags: mr.RemoteAtomic}, verbs.AttrAccessFlags); err != nil || q.State() != verbs.RTS || q.Attr().AccessFlags != mr.RemoteAtomic {
		t.Errorf("RTS→RTS with ACCESS_FLAGS = %v, %s, %v", err, q.State(), q.Attr().AccessFlags)
	}
	if err := q.Modify(&verbs.Attr{Timeout: 3}, verbs.AttrTimeout); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("RTS→RTS with TIMEOUT = %v, want ErrInvalid", err)
	}
}

// TestModifyInvalidValues: values outside an attribute's range are refused
// with EINVAL and change nothing (the ranges of ibv_modify_qp(3) and the
// IBTA: 5-bit timers, 3-bit retry counts, 24-bit PSNs and QPNs, the five
// path MTUs).
func TestModifyInvalidValues(t *testing.T) {
	type edit func(*verbs.Attr)
	cases := []struct {
		name     string
		from, to verbs.State
		bit      verbs.AttrMask
		edit     edit
	}{
		{"path-mtu-300", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.PathMTU = 300 }},
		{"path-mtu-0", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.PathMTU = 0 }},
		{"path-mtu-8192", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.PathMTU = 8192 }},
		{"rq-psn-25-bits", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.RQPSN = 1 << 24 }},
		{"dest-qpn-0", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.DestQPN = 0 }},
		{"dest-qpn-25-bits", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.DestQPN = 1 << 24 }},
		{"remote-unset", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.Remote = netip.AddrPort{} }},
		{"remote-port-0", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.Remote = netip.MustParseAddrPort("10.0.0.2:0") }},
		{"min-rnr-timer-32", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.MinRNRTimer = 32 }},
		{"max-dest-rd-atomic-129", verbs.Init, verbs.RTR, 0, func(a *verbs.Attr) { a.MaxDestRdAtomic = qp.MaxRdAtomicLimit + 1 }},
		{"timeout-32", verbs.RTR, verbs.RTS, 0, func(a *verbs.Attr) { a.Timeout = 32 }},
		{"retry-cnt-8", verbs.RTR, verbs.RTS, 0, func(a *verbs.Attr) { a.RetryCnt = 8 }},
		{"rnr-retry-8", verbs.RTR, verbs.RTS, 0, func(a *verbs.Attr) { a.RNRRetry = 8 }},
		{"sq-psn-25-bits", verbs.RTR, verbs.RTS, 0, func(a *verbs.Attr) { a.SQPSN = 1<<24 | 5 }},
		{"max-rd-atomic-129", verbs.RTR, verbs.RTS, 0, func(a *verbs.Attr) { a.MaxRdAtomic = qp.MaxRdAtomicLimit + 1 }},
		{"access-flags-unknown", verbs.Reset, verbs.Init, 0, func(a *verbs.Attr) { a.AccessFlags |= mr.MWBind }},
	}
	f := newQPFactory(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := f.make(verbs.RC, c.from)
			m, _ := transition(verbs.RC, c.from, c.to)
			a := goodAttr(c.to)
			c.edit(&a)
			before := q.Attr()
			if err := q.Modify(&a, verbs.AttrState|m.req); !errors.Is(err, qp.ErrInvalid) {
				t.Errorf("Modify = %v, want ErrInvalid", err)
			}
			if q.Attr() != before {
				t.Errorf("a refused Modify changed the attributes to %+v", q.Attr())
			}
		})
	}
	t.Run("qpn", func(t *testing.T) {
		for _, n := range []uint32{0, 1 << 24} {
			if _, err := qp.New(n, qp.Config{Type: verbs.RC, PD: f.pd, Memory: f.mem, SendCQ: f.cq, RecvCQ: f.cq}); !errors.Is(err, qp.ErrInvalid) {
				t.Errorf("New(%#x) = %v, want ErrInvalid", n, err)
			}
		}
	})
}

// TestModifyToReset: a QP moved to RESET forgets its attributes, PSNs and
// queued WRs, which complete with nothing (IBTA: the RESET state has empty
// queues; ibv_modify_qp to RESET does not flush); connected again it works
// from its new PSNs.
func TestModifyToReset(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	fill(a.buf[:64], 5)
	postRecv(t, a, &verbs.RecvWR{ID: 1, SGL: sgl(a.sge(0, 64))})
	for i := range 3 {
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	}
	s.transmitAll() // the WRITEs are in flight when a is reset
	for _, h := range []*host{a, b} {
		if err := h.qp.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	want := qp.Status{State: verbs.Reset, Window: 32}
	if st := a.qp.Status(); st != want {
		t.Errorf("after RESET a is %+v, want %+v", st, want)
	}
	if got := a.qp.Attr(); got != (verbs.Attr{State: verbs.Reset, PKey: 0xFFFF}) {
		t.Errorf("after RESET the attributes are %+v", got)
	}
	s.settle(time.Second)
	if wcs := a.poll(); len(wcs) != 0 {
		t.Errorf("RESET produced completions %v", wcs)
	}

	defer func(p wire.PSN) { psnA = p }(psnA)
	psnA = 0x777
	connect(t, a, b, defaultAttr())
	if st := a.qp.Status(); st.SendPSN != 0x777 || st.AckedPSN != 0x777 || st.SendQueued != 0 || st.RecvQueued != 0 {
		t.Errorf("reconnected a is %+v, want PSNs 0x777 and empty queues", st)
	}
	post(t, a, &verbs.SendWR{ID: 9, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 64)), RemoteAddr: b.va(128), RKey: b.region.RKey()})
	expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 9, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 64, QPN: a.qp.Num()})
}

// TestModifyToErrFlushes: moving a QP to ERR completes every outstanding
// send WR, signaled or not, and every receive WR with WR_FLUSH_ERR, in
// order (IBTA: the error state flushes both queues; rxe's flush).
func TestModifyToErrFlushes(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	ops := []verbs.WROpcode{verbs.WRWrite, verbs.WRRead, verbs.WRSend}
	for i, op := range ops {
		flags := verbs.Signaled
		if i == 1 {
			flags = 0 // unsignaled WRs complete when flushed too
		}
		post(t, a, &verbs.SendWR{ID: uint64(i), Opcode: op, Flags: flags, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	}
	postRecv(t, a, &verbs.RecvWR{ID: 10, SGL: sgl(a.sge(64, 64))})
	postRecv(t, a, &verbs.RecvWR{ID: 11})
	if err := a.qp.Modify(&verbs.Attr{State: verbs.Err}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	wcs := a.poll()
	want := []verbs.WC{
		{ID: 0, Status: verbs.WRFlushErr, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()},
		{ID: 1, Status: verbs.WRFlushErr, Opcode: verbs.WCRead, ByteLen: 8, QPN: a.qp.Num()},
		{ID: 2, Status: verbs.WRFlushErr, Opcode: verbs.WCSend, ByteLen: 8, QPN: a.qp.Num()},
		{ID: 10, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: a.qp.Num()},
		{ID: 11, Status: verbs.WRFlushErr, Opcode: verbs.WCRecv, QPN: a.qp.Num()},
	}
	if len(wcs) != len(want) {
		t.Fatalf("%d completions %v, want %d", len(wcs), wcs, len(want))
	}
	for i := range want {
		expectWC(t, wcs[i], want[i])
	}
	if st := a.qp.Status(); st.State != verbs.Err || st.Cause != verbs.Success || st.SendQueued != 0 || st.RecvQueued != 0 {
		t.Errorf("a is %+v, want ERR by Modify with empty queues", st)
	}
	s.settle(time.Second)
	if len(a.poll()) != 0 {
		t.Error("completions after the flush")
	}
}

// TestPostingByState: ibv_post_send needs RTS (or SQD, where WRs wait); in
// RESET, INIT and RTR it fails with EINVAL. ibv_post_recv works from INIT
// on. In ERR both are accepted and complete at once with WR_FLUSH_ERR.
func TestPostingByState(t *testing.T) {
	f := newQPFactory(t)
	cases := []struct {
		state      verbs.State
		send, recv error // nil: accepted
		flushed    bool
	}{
		{verbs.Reset, qp.ErrInvalid, qp.ErrInvalid, false},
		{verbs.Init, qp.ErrInvalid, nil, false},
		{verbs.RTR, qp.ErrInvalid, nil, false},
		{verbs.RTS, nil, nil, false},
		{verbs.SQD, nil, nil, false},
		{verbs.Err, nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.state.String(), func(t *testing.T) {
			q := f.make(verbs.RC, c.state)
			sendErr := q.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSend})
			recvErr := q.PostRecv(&verbs.RecvWR{ID: 2})
			if !errors.Is(sendErr, c.send) || c.send == nil && sendErr != nil {
				t.Errorf("PostSend = %v, want %v", sendErr, c.send)
			}
			if !errors.Is(recvErr, c.recv) || c.recv == nil && recvErr != nil {
				t.Errorf("PostRecv = %v, want %v", recvErr, c.recv)
			}
			var wcs [4]verbs.WC
			n, _ := f.cq.Poll(wcs[:])
			switch {
			case c.flushed && (n != 2 || wcs[0].ID != 1 || wcs[0].Status != verbs.WRFlushErr || wcs[1].ID != 2 || wcs[1].Status != verbs.WRFlushErr):
				t.Errorf("completions %v, want both WRs flushed", wcs[:n])
			case !c.flushed && n != 0:
				t.Errorf("completions %v, want none", wcs[:n])
			}
		})
	}
}

// TestSQDHoldsNewWork: in SQD the requester finishes what it started and
// starts nothing new; back in RTS the waiting WRs go (IBTA send queue
// drain).
func TestSQDHoldsNewWork(t *testing.T) {
	s, a, b := pair(t, defaultAttr())
	if err := a.qp.Modify(&verbs.Attr{State: verbs.SQD}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(0), RKey: b.region.RKey()})
	if s.transmitAll() {
		t.Fatal("a QP in SQD started a new WR")
	}
	if err := a.qp.Modify(&verbs.Attr{State: verbs.RTS}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	expectWC(t, s.waitWC(a, 1, time.Second)[0], verbs.WC{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 8, QPN: a.qp.Num()})
}
