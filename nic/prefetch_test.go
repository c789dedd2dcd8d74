package nic_test

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
)

// TestMRPrefetch: Prefetch makes the pages of an on-demand paging region
// resident without a fault, counted in the region table that serves it
// (the daemon's for an attached device); a region without ON_DEMAND, a
// range outside the region and a negative length are ErrInvalid, and
// change nothing.
func TestMRPrefetch(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		var dev *nic.Device
		var table *mr.Table // where the regions are
		if p.attached {
			d := startDaemon(t, nic.Config{})
			dev, table = attachTo(t, d), d.dev.Memory()
		} else {
			dev = nictest.OpenDevice(t, nic.Config{})
			table = dev.Memory()
		}
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		odp, err := pd.AllocMR(8*4096, mr.LocalWrite|mr.OnDemand)
		if err != nil {
			t.Fatal(err)
		}
		pinned, err := pd.AllocMR(4096, mr.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		readOnly, err := pd.AllocMR(4096, mr.RemoteRead|mr.OnDemand)
		if err != nil {
			t.Fatal(err)
		}
		stats := func() mr.ODPStats {
			r, ok := table.Region(odp.LKey())
			if !ok {
				t.Fatal("the ODP region is not in the table")
			}
			return r.Info().ODP
		}
		tests := []struct {
			name string
			m    *nic.MR
			addr uint64
			n    int
			want error
			odp  mr.ODPStats // after the call
		}{
			{"two pages", odp, odp.Addr() + 4096, 8192, nil, mr.ODPStats{Prefetched: 2, ResidentPages: 2}},
			{"one of them again, and the next", odp, odp.Addr() + 2*4096, 8192, nil, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"nothing", odp, odp.Addr(), 0, nil, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"past the end", odp, odp.Addr() + 4096, 8 * 4096, mr.ErrInvalid, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"before the start", odp, odp.Addr() - 4096, 4096, mr.ErrInvalid, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"a negative length", odp, odp.Addr(), -1, mr.ErrInvalid, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"a region without ON_DEMAND", pinned, pinned.Addr(), 4096, mr.ErrInvalid, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
			{"a region without LOCAL_WRITE", readOnly, readOnly.Addr(), 4096, mr.ErrInvalid, mr.ODPStats{Prefetched: 3, ResidentPages: 3}},
		}
		for _, tc := range tests {
			if err := tc.m.Prefetch(tc.addr, tc.n); !errors.Is(err, tc.want) {
				t.Errorf("%s: Prefetch = %v, want %v", tc.name, err, tc.want)
			}
			if got := stats(); got != tc.odp {
				t.Errorf("%s: the region's paging after it: %+v, want %+v", tc.name, got, tc.odp)
			}
		}
	})
}
