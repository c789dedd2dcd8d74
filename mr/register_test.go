package mr

import (
	"errors"
	"math"
	"testing"
)

// TestRegisterRules checks ibv_reg_mr(3)'s rules on access flags and
// arguments, each case named after the sentence (or kernel behaviour) it
// checks.
func TestRegisterRules(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	gone := allocPD(t, tb)
	if err := tb.DeallocPD(gone); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		pd     PDHandle
		buf    []byte
		access Access
		want   error
	}{
		{"access is either 0 or the OR of flags: 0 is valid", pd, make([]byte, 64), 0, nil},
		{"IBV_ACCESS_LOCAL_WRITE alone", pd, make([]byte, 64), LocalWrite, nil},
		{"IBV_ACCESS_REMOTE_READ alone", pd, make([]byte, 64), RemoteRead, nil},
		{"IBV_ACCESS_MW_BIND alone", pd, make([]byte, 64), MWBind, nil},
		{"IBV_ACCESS_ZERO_BASED alone", pd, make([]byte, 64), ZeroBased, nil},
		{"IBV_ACCESS_ON_DEMAND alone", pd, make([]byte, 64), OnDemand, nil},
		{"REMOTE_WRITE with LOCAL_WRITE", pd, make([]byte, 64), RemoteWrite | LocalWrite, nil},
		{"REMOTE_ATOMIC with LOCAL_WRITE", pd, make([]byte, 64), RemoteAtomic | LocalWrite, nil},
		{"every flag", pd, make([]byte, 64), regionAccess, nil},
		{"If REMOTE_WRITE is set, then LOCAL_WRITE must be set too", pd, make([]byte, 64), RemoteWrite, ErrInvalid},
		{"If REMOTE_ATOMIC is set, then LOCAL_WRITE must be set too", pd, make([]byte, 64), RemoteAtomic | RemoteRead, ErrInvalid},
		{"unknown access bit is EINVAL (ib_check_mr_access)", pd, make([]byte, 64), 1 << 7, ErrInvalid},
		{"high unknown access bit is EINVAL", pd, make([]byte, 64), LocalWrite | 1<<31, ErrInvalid},
		{"zero-length buffer is EINVAL (ib_umem_get: no pages)", pd, []byte{}, LocalWrite, ErrInvalid},
		{"nil buffer is EINVAL", pd, nil, LocalWrite, ErrInvalid},
		{"unknown PD is EINVAL", 999, make([]byte, 64), LocalWrite, ErrInvalid},
		{"deallocated PD is EINVAL", gone, make([]byte, 64), LocalWrite, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tb.Register(tc.pd, tc.buf, tc.access)
			wantErr(t, "Register", err, tc.want)
			if err != nil {
				return
			}
			if r.Access() != tc.access || r.PD() != tc.pd || r.Len() != uint64(len(tc.buf)) {
				t.Errorf("region %+v, want access %v PD %d length %d", r.Info(), tc.access, tc.pd, len(tc.buf))
			}
			if tc.access&ZeroBased != 0 && r.Addr() != 0 {
				t.Errorf("zero-based region at %#x, want 0", r.Addr())
			}
			if tc.access&ZeroBased == 0 && r.Addr() != addrOf(tc.buf) {
				t.Errorf("region at %#x, want the buffer's address %#x", r.Addr(), addrOf(tc.buf))
			}
			if err := tb.Deregister(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLocalReadIsAlwaysEnabled(t *testing.T) {
	// "Local read access is always enabled for the MR."
	tb := newTable(t)
	pd := allocPD(t, tb)
	buf := []byte("hello, region")
	r := register(t, tb, pd, buf, 0)
	s, err := tb.Local(r.LKey(), r.Addr(), uint64(len(buf)), 0, pd)
	wantReason(t, "local read", err, 0)
	got := make([]byte, len(buf))
	if n := s.ReadAt(got, 0); n != len(buf) || string(got) != string(buf) {
		t.Errorf("ReadAt = %d %q", n, got)
	}
	s.Release()
	_, err = tb.Local(r.LKey(), r.Addr(), 1, LocalWrite, pd)
	wantReason(t, "local write without LOCAL_WRITE", err, ReasonAccess)
}

func TestRegisterImplicit(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	// "To create an implicit ODP MR, IBV_ACCESS_ON_DEMAND should be set,
	// addr should be 0 and length should be SIZE_MAX."
	_, err := tb.RegisterImplicit(pd, LocalWrite|RemoteRead)
	wantErr(t, "implicit without ON_DEMAND", err, ErrInvalid)
	_, err = tb.RegisterImplicit(pd, OnDemand|RemoteWrite)
	wantErr(t, "implicit REMOTE_WRITE without LOCAL_WRITE", err, ErrInvalid)
	r, err := tb.RegisterImplicit(pd, OnDemand|RemoteRead)
	wantErr(t, "implicit", err, nil)
	if r.Addr() != 0 || r.Len() != math.MaxUint64 || r.Kind() != ImplicitODP || r.Segments() != nil {
		t.Errorf("implicit region %+v, want addr 0, length SIZE_MAX, no memory of its own", r.Info())
	}
}

func TestDeallocPDBusy(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	r := register(t, tb, pd, make([]byte, 8), 0)
	w, err := tb.AllocWindow(pd, WindowType1)
	wantErr(t, "AllocWindow", err, nil)
	a, err := tb.NewArena(pd, 100)
	wantErr(t, "NewArena", err, nil)
	for _, step := range []struct {
		name string
		free func() error
	}{
		{"region", func() error { return tb.Deregister(r) }},
		{"window", func() error { return tb.DeallocWindow(w) }},
		{"arena", func() error { return tb.FreeArena(a) }},
	} {
		wantErr(t, "DeallocPD with a "+step.name+" in it", tb.DeallocPD(pd), ErrBusy)
		wantErr(t, "free "+step.name, step.free(), nil)
	}
	wantErr(t, "DeallocPD of an empty PD", tb.DeallocPD(pd), nil)
	wantErr(t, "DeallocPD twice", tb.DeallocPD(pd), ErrInvalid)
}

func TestDeregister(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	r := register(t, tb, pd, make([]byte, 64), rw)
	wantErr(t, "Deregister", tb.Deregister(r), nil)
	wantErr(t, "Deregister twice", tb.Deregister(r), ErrInvalid)
	other := newTable(t)
	r2 := register(t, tb, pd, make([]byte, 64), rw)
	wantErr(t, "Deregister on another table", other.Deregister(r2), ErrInvalid)
	_, err := tb.Remote(r.RKey(), r.Addr(), 8, RemoteRead, Requester{PD: pd})
	wantReason(t, "remote read after deregistration", err, ReasonUnknownKey)
	if _, ok := tb.RegionAt(pd, r.Addr(), 8); ok != false {
		t.Error("RegionAt finds a deregistered region")
	}
}

func TestAccessString(t *testing.T) {
	tests := []struct {
		a    Access
		want string
	}{
		{0, "LOCAL_READ"},
		{LocalWrite, "LOCAL_WRITE"},
		{LocalWrite | RemoteRead | OnDemand, "LOCAL_WRITE|REMOTE_READ|ON_DEMAND"},
		{MWBind | 1<<9, "MW_BIND|0x200"},
	}
	for _, tc := range tests {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tc.a), got, tc.want)
		}
	}
}

func TestClosedTable(t *testing.T) {
	tb := NewTable(Config{})
	pd := allocPD(t, tb)
	buf := make([]byte, 64)
	r := register(t, tb, pd, buf, rw)
	s, err := tb.Remote(r.RKey(), r.Addr(), 8, RemoteWrite, Requester{PD: pd})
	wantReason(t, "write", err, 0)
	wantErr(t, "Close", tb.Close(), nil)
	// A transfer in flight keeps its memory through Close.
	if n := s.WriteAt([]byte("inflight"), 0); n != 8 || string(buf[:8]) != "inflight" {
		t.Errorf("WriteAt after Close = %d, buf %q", n, buf[:8])
	}
	s.Release()
	_, err = tb.Register(pd, buf, 0)
	wantErr(t, "Register after Close", err, ErrInvalid)
	_, err = tb.AllocPD()
	wantErr(t, "AllocPD after Close", err, ErrInvalid)
	if st := tb.Stats(); st.Regions != 0 || st.Deregistered != 1 {
		t.Errorf("stats after Close %+v", st)
	}
	wantErr(t, "Close twice", tb.Close(), nil)
	if errors.Is(tb.Close(), ErrInvalid) {
		t.Error("Close is not idempotent")
	}
}

// TestRegisterIOVA checks ibv_reg_mr_iova2's address space: remote and
// local accesses name the region by iova, not by the buffer's address, and
// reach the buffer; ZERO_BASED still wins.
func TestRegisterIOVA(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	buf := aligned(4096)
	copy(buf[100:], "iova")
	const iova = 0x7f00_1234_0000
	tests := []struct {
		name   string
		access Access
		base   uint64
	}{
		{"the region starts at iova", LocalWrite | RemoteRead | RemoteWrite, iova},
		{"ZERO_BASED: offsets from 0, iova ignored", LocalWrite | RemoteRead | ZeroBased, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tb.RegisterIOVA(pd, buf, iova, tc.access)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Deregister(r)
			if r.Addr() != tc.base {
				t.Fatalf("region at %#x, want %#x", r.Addr(), tc.base)
			}
			s, err := tb.Remote(r.RKey(), tc.base+100, 4, RemoteRead, Requester{PD: pd})
			if err != nil {
				t.Fatalf("READ at base+100: %v", err)
			}
			got := make([]byte, 4)
			s.ReadAt(got, 0)
			s.Release()
			if string(got) != "iova" {
				t.Errorf("READ at base+100 = %q, want %q", got, "iova")
			}
			if _, err := tb.Local(r.LKey(), tc.base+4092, 8, 0, pd); err == nil {
				t.Error("local SGE past the end of the region was granted")
			}
			if tc.base != 0 {
				if _, err := tb.Remote(r.RKey(), addrOf(buf), 4, RemoteRead, Requester{PD: pd}); err == nil {
					t.Error("the buffer's own address was granted: the region lives at iova")
				}
			}
		})
	}
	if _, err := tb.RegisterIOVA(pd, buf, math.MaxUint64-100, LocalWrite); !errors.Is(err, ErrInvalid) {
		t.Errorf("an address space that wraps: %v, want ErrInvalid", err)
	}
}
