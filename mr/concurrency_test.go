package mr

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/softnic/softnic/mr/keyspace"
)

// TestConcurrentRegistrationAndLookups runs registration, deregistration,
// window binds and arena churn against readers doing Remote, Local,
// RegionAt, implicit ODP and listings; run it with -race. Readers must
// always find the stable regions, and a churned key either works (and
// reads the right bytes, even if its region is deregistered meanwhile) or
// is refused as unknown or stale.
func TestConcurrentRegistrationAndLookups(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd, QPN: 9}
	imp, err := tb.RegisterImplicit(pd, OnDemand|RemoteRead|LocalWrite)
	wantErr(t, "RegisterImplicit", err, nil)

	const stable = 32
	var stableRegions []*Region
	for i := range stable {
		buf := make([]byte, 256)
		for j := range buf {
			buf[j] = byte(i)
		}
		stableRegions = append(stableRegions, register(t, tb, pd, buf, rw|MWBind))
	}

	iterations := 2000
	if testing.Short() {
		iterations = 200
	}
	// churn holds the key of a recently registered region of arena memory
	// whose bytes all equal the key's low byte.
	var churn atomic.Uint32
	var wg sync.WaitGroup
	var failures atomic.Int64
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	done := make(chan struct{})

	wg.Add(2)
	go func() { // regions over arenas, registered and deregistered
		defer wg.Done()
		for range iterations {
			a, err := tb.NewArena(pd, PageSize)
			if err != nil {
				fail("NewArena: %v", err)
				return
			}
			r, err := tb.Register(pd, a.Bytes(), rw)
			if err != nil {
				fail("Register: %v", err)
				return
			}
			b := a.Bytes()
			for j := range b {
				b[j] = byte(r.RKey())
			}
			churn.Store(r.RKey())
			if err := tb.FreeArena(a); err != nil {
				fail("FreeArena: %v", err)
			}
			if err := tb.Deregister(r); err != nil {
				fail("Deregister: %v", err)
			}
		}
	}()
	go func() { // windows bound and invalidated on the stable regions
		defer wg.Done()
		w, err := tb.AllocWindow(pd, WindowType2)
		if err != nil {
			fail("AllocWindow: %v", err)
			return
		}
		for i := range iterations {
			r := stableRegions[i%stable]
			req := BindRequest{WindowKey: w.RKey(), NewKey: keyspace.IncRKey(w.RKey()), RegionKey: r.LKey(), Addr: r.Addr(), Length: 64, Access: RemoteRead}
			if err := tb.BindWindow(&req, who); err != nil {
				fail("BindWindow: %v", err)
				return
			}
			if err := tb.Invalidate(w.RKey(), who); err != nil {
				fail("Invalidate: %v", err)
				return
			}
		}
		if err := tb.DeallocWindow(w); err != nil {
			fail("DeallocWindow: %v", err)
		}
	}()

	var readers sync.WaitGroup
	for g := range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			got := make([]byte, 16)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				r := stableRegions[(i+g)%stable]
				s, err := tb.Remote(r.RKey(), r.Addr()+8, 16, RemoteRead, who)
				if err != nil {
					fail("stable region refused: %v", err)
					continue
				}
				s.ReadAt(got, 0)
				s.Release()
				if got[0] != byte((i+g)%stable) || got[15] != got[0] {
					fail("stable region read %v", got)
				}
				if found, ok := tb.RegionAt(pd, r.Addr()+100, 8); !ok || found != r {
					fail("RegionAt lost a stable region")
				}
				s, err = tb.Remote(imp.RKey(), r.Addr(), 8, RemoteRead, who)
				if err != nil {
					fail("implicit ODP into a stable region: %v", err)
				} else {
					s.Release()
				}

				key := churn.Load()
				if key == 0 {
					continue
				}
				s, err = tb.Remote(key, 0, 0, RemoteRead, who) // zero length: always granted
				s.Release()
				if r, ok := tb.Region(key); ok {
					s, err = tb.Remote(key, r.Addr(), 16, RemoteRead, who)
				} else {
					_, err = tb.Remote(key, 0, 16, RemoteRead, who)
				}
				var why Reason
				switch {
				case err == nil:
					// The region may be deregistered and its arena freed
					// right now: the span keeps the memory mapped.
					s.ReadAt(got, 0)
					s.Release()
					if got[0] != byte(key) || got[15] != byte(key) {
						fail("churned region %#x read %v", key, got)
					}
				case errors.As(err, &why) && (why == ReasonUnknownKey || why == ReasonStaleKey || why == ReasonRange):
				default:
					fail("churned key %#x: %v", key, err)
				}
				if i%64 == 0 {
					for range tb.Regions() {
					}
					for range tb.Windows() {
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	readers.Wait()
	if st := tb.Stats(); st.Regions != stable+1 || st.Draining != 0 || st.Arenas != 0 {
		t.Errorf("after the churn: %+v", st)
	}
}
