package mr

import (
	"testing"

	"github.com/softnic/softnic/mr/keyspace"
)

// TestDataPathDoesNotAllocate holds every per-packet call at zero
// allocations.
func TestDataPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd, QPN: 3}
	buf := aligned(4 * PageSize)
	r := register(t, tb, pd, buf, rw|MWBind)
	odp := register(t, tb, pd, pageAligned(4*PageSize), rw|OnDemand)
	imp, err := tb.RegisterImplicit(pd, OnDemand|rw)
	wantErr(t, "RegisterImplicit", err, nil)
	w, err := tb.AllocWindow(pd, WindowType2)
	wantErr(t, "AllocWindow", err, nil)
	wantErr(t, "BindWindow", tb.BindWindow(&BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: r.LKey(), Addr: r.Addr(), Length: 1024, Access: RemoteWrite | ZeroBased}, who), nil)
	// Touch the implicit region's page once: its first fault creates a
	// bitmap chunk, which is the one allocation ODP makes.
	s, _ := tb.Remote(imp.RKey(), r.Addr(), 8, RemoteRead, who)
	s.ReadAt(make([]byte, 8), 0)
	s.Release()

	payload := make([]byte, 512)
	cases := []struct {
		name string
		fn   func()
	}{
		{"Remote READ + ReadAt", func() {
			s, _ := tb.Remote(r.RKey(), r.Addr()+64, 512, RemoteRead, who)
			s.ReadAt(payload, 0)
			s.Release()
		}},
		{"Remote WRITE + WriteAt", func() {
			s, _ := tb.Remote(r.RKey(), r.Addr(), 512, RemoteWrite, who)
			s.WriteAt(payload, 0)
			s.Release()
		}},
		{"Remote ATOMIC", func() {
			s, _ := tb.Remote(r.RKey(), r.Addr()+8, 8, RemoteAtomic, who)
			s.FetchAdd(1)
			s.CompareSwap(0, 1)
			s.Store(2)
			s.Release()
		}},
		{"Remote through a window", func() {
			s, _ := tb.Remote(w.RKey(), 16, 64, RemoteWrite, who)
			s.WriteAt(payload[:64], 0)
			s.Release()
		}},
		{"Remote on ODP pages, faulting and resident", func() {
			s, _ := tb.Remote(odp.RKey(), odp.Addr(), 4*PageSize, RemoteWrite, who)
			s.WriteAt(payload, PageSize)
			s.Release()
		}},
		{"Remote through implicit ODP", func() {
			s, _ := tb.Remote(imp.RKey(), r.Addr(), 8, RemoteRead, who)
			s.ReadAt(payload[:8], 0)
			s.Release()
		}},
		{"Remote refused", func() { tb.Remote(keyspace.IncRKey(r.RKey()), 0, 8, RemoteRead, who) }},
		{"Remote refused as not mapped", func() { tb.Remote(imp.RKey(), 4096, 8, RemoteRead, who) }},
		{"Local", func() {
			s, _ := tb.Local(r.LKey(), r.Addr(), 256, LocalWrite, pd)
			s.WriteAt(payload[:256], 0)
			s.Release()
		}},
		{"Region by key", func() { tb.Region(r.RKey()) }},
		{"RegionAt", func() { tb.RegionAt(pd, r.Addr()+100, 100) }},
	}
	for _, tc := range cases {
		if n := testing.AllocsPerRun(100, tc.fn); n != 0 {
			t.Errorf("%s: %v allocations per run", tc.name, n)
		}
	}
}
