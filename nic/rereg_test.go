package nic_test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/mr/keyspace"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// pairTo connects a new QP of a's PD with a new QP of pd on b's device,
// and returns a's.
func pairTo(t *testing.T, a, b *end, pd *nic.PD) *nic.QP {
	t.Helper()
	q, err := a.pd.CreateQP(nic.QPConfig{SendCQ: a.cq})
	if err != nil {
		t.Fatal(err)
	}
	bq, err := pd.CreateQP(nic.QPConfig{SendCQ: b.cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Connect(b.dev.Addr(), bq.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := bq.Connect(a.dev.Addr(), q.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestMRRereg changes a region's access and PD (ibv_rereg_mr) under a
// peer's remote WRITEs: each step's WRITE, over a new QP pair since a
// refused one ends its QP, sees the region's rights of that moment, with
// the rkey the peer was given at first.
func TestMRRereg(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := p.connected(t, nic.Config{}, nic.ConnectOptions{})
		tgt, err := b.pd.AllocMR(4096, mr.LocalWrite|mr.RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		pd2, err := b.dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		rkey, addr := tgt.RKey(), tgt.Addr()
		steps := []struct {
			name   string
			flags  mr.ReregFlags
			pd     *nic.PD
			access mr.Access
			from   *nic.PD // the PD of the QP b's end of the WRITE is on
			want   verbs.WCStatus
		}{
			{"no REMOTE_WRITE yet", 0, nil, 0, b.pd, verbs.RemAccessErr},
			{"REMOTE_WRITE given", mr.ReregAccess, nil, mr.LocalWrite | mr.RemoteWrite, b.pd, verbs.Success},
			{"REMOTE_WRITE taken away", mr.ReregAccess, nil, mr.LocalWrite | mr.RemoteRead, b.pd, verbs.RemAccessErr},
			{"moved to pd2 with REMOTE_WRITE: the old PD's QPs", mr.ReregPD | mr.ReregAccess, pd2, mr.LocalWrite | mr.RemoteWrite, b.pd, verbs.RemAccessErr},
			{"moved to pd2: pd2's QPs", 0, nil, 0, pd2, verbs.Success},
			{"moved back: pd2's QPs", mr.ReregPD, b.pd, 0, pd2, verbs.RemAccessErr},
			{"moved back: the old PD's QPs", 0, nil, 0, b.pd, verbs.Success},
		}
		for i, s := range steps {
			if s.flags != 0 {
				if err := tgt.Rereg(s.flags, s.pd, s.access); err != nil {
					t.Fatalf("%s: Rereg: %v", s.name, err)
				}
			}
			if tgt.RKey() != rkey || tgt.LKey() != rkey || tgt.Addr() != addr {
				t.Fatalf("%s: keys %#x/%#x and address %#x, want %#x and %#x kept", s.name, tgt.LKey(), tgt.RKey(), tgt.Addr(), rkey, addr)
			}
			q := pairTo(t, a, b, s.from)
			src := a.mr.Bytes()[:8]
			for j := range src {
				src[j] = byte(i + 1)
			}
			wr := &verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: addr, RKey: rkey}
			if err := q.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != s.want {
				t.Fatalf("%s: WRITE completed %v, want %v", s.name, &wc, s.want)
			}
			b.qp.Status() // orders the device's writes before the test's reads
			if landed := tgt.Bytes()[0] == byte(i+1); landed != (s.want == verbs.Success) {
				t.Fatalf("%s: WRITE landed %v, want %v", s.name, landed, s.want == verbs.Success)
			}
		}
		if tgt.PD() != b.pd {
			t.Errorf("PD after moving back is not the first PD")
		}
		// A window bound to the region stays bound through Rereg, and an
		// access through it is checked against the window's PD and rights
		// alone, as rxe_lookup_mw does: a READ through it works after the
		// region loses REMOTE_READ and after it moves to pd2.
		if err := tgt.Rereg(mr.ReregAccess, nil, mr.LocalWrite|mr.RemoteRead|mr.MWBind); err != nil {
			t.Fatal(err)
		}
		w, err := b.pd.AllocMW(mr.WindowType2)
		if err != nil {
			t.Fatal(err)
		}
		bind := verbs.SendWR{ID: 100, Opcode: verbs.WRBindMW, Flags: verbs.Signaled, Bind: &mr.BindRequest{
			WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: tgt.LKey(), Addr: addr, Length: 8, Access: mr.RemoteRead}}
		if err := b.qp.PostSend(&bind); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success {
			t.Fatalf("bind: %v", wc.String())
		}
		for i, s := range []struct {
			flags  mr.ReregFlags
			pd     *nic.PD
			access mr.Access
		}{{mr.ReregAccess, nil, mr.LocalWrite}, {mr.ReregPD, pd2, 0}} {
			if err := tgt.Rereg(s.flags, s.pd, s.access); err != nil {
				t.Fatalf("Rereg %d with a window bound: %v", i, err)
			}
			dst := a.mr.Bytes()[64:72]
			clear(dst)
			read := verbs.SendWR{ID: uint64(200 + i), Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(64, 8)},
				RemoteAddr: addr, RKey: w.RKey()}
			if err := a.qp.PostSend(&read); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
				t.Fatalf("READ through the window after Rereg %d: %v", i, wc.String())
			}
			syncMemory(a)
			if got := dst[0]; got != byte(len(steps)) {
				t.Fatalf("READ through the window after Rereg %d brought %d, want %d", i, got, len(steps))
			}
		}
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMRReregErrors checks what ibv_rereg_mr refuses on rxe; a refused
// Rereg changes nothing.
func TestMRReregErrors(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := p.end(t, nic.Config{})
		other := p.end(t, nic.Config{})
		m, err := e.pd.AllocMR(4096, mr.LocalWrite|mr.RemoteRead|mr.MWBind)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name   string
			flags  mr.ReregFlags
			pd     *nic.PD
			access mr.Access
			want   error
		}{
			{"flags 0", 0, e.pd, 0, nic.ErrInvalid},
			{"IBV_REREG_MR_CHANGE_TRANSLATION", mr.ReregTranslation, nil, 0, nic.ErrNotSupported},
			{"translation with access", mr.ReregTranslation | mr.ReregAccess, nil, mr.LocalWrite, nic.ErrNotSupported},
			{"unknown flag", 1 << 3, nil, 0, nic.ErrNotSupported},
			{"REMOTE_WRITE without LOCAL_WRITE", mr.ReregAccess, nil, mr.RemoteWrite, nic.ErrInvalid},
			{"REMOTE_ATOMIC without LOCAL_WRITE", mr.ReregAccess, nil, mr.RemoteAtomic, nic.ErrInvalid},
			{"unknown access bits", mr.ReregAccess, nil, mr.LocalWrite | 1<<20, nic.ErrInvalid},
			{"ZERO_BASED on", mr.ReregAccess, nil, mr.LocalWrite | mr.ZeroBased, nic.ErrNotSupported},
			{"nil PD", mr.ReregPD, nil, 0, nic.ErrInvalid},
			{"another device's PD", mr.ReregPD, other.pd, 0, nic.ErrInvalid},
		}
		for _, tc := range tests {
			if err := m.Rereg(tc.flags, tc.pd, tc.access); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
			if m.PD() != e.pd || m.Region() != nil && m.Region().Access() != mr.LocalWrite|mr.RemoteRead|mr.MWBind {
				t.Fatalf("%s: the refused Rereg changed the region", tc.name)
			}
		}
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
		if err := m.Rereg(mr.ReregAccess, nil, mr.LocalWrite); !errors.Is(err, nic.ErrInvalid) {
			t.Errorf("Rereg of a deregistered region: %v, want ErrInvalid", err)
		}
	})
}

// TestMRReregFreesOldPD moves a PD's only region into another PD: the old
// PD can then be deallocated and the new one cannot, as in rxe, where the
// MR's reference moves with it.
func TestMRReregFreesOldPD(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		dev := p.device(t, nic.Config{})
		pd1, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		pd2, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		m, err := pd1.AllocMR(4096, mr.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Rereg(mr.ReregPD, pd2, 0); err != nil {
			t.Fatal(err)
		}
		if m.PD() != pd2 {
			t.Error("MR.PD is not the new PD")
		}
		if err := pd1.Dealloc(); err != nil {
			t.Errorf("Dealloc of the PD the region left: %v", err)
		}
		if err := pd2.Dealloc(); !errors.Is(err, nic.ErrBusy) {
			t.Errorf("Dealloc of the region's new PD: %v, want ErrBusy", err)
		}
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
		if err := pd2.Dealloc(); err != nil {
			t.Errorf("Dealloc of the emptied PD: %v", err)
		}
	})
}
