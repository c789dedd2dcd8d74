package route

import (
	"net/netip"
	"testing"
)

// The table of routes stays within maxRoutes whatever number of peers a
// device answers, and keeps what it stored last.
func TestBoundedMap(t *testing.T) {
	var m boundedMap[netip.Addr, Route]
	var last netip.Addr
	for i := range 3 * maxRoutes {
		last = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		m.store(last, Route{MTU: i})
		m.store(last, Route{MTU: i + 1}) // again: no new entry
	}
	n := 0
	m.m.Range(func(_, _ any) bool { n++; return true })
	if n > maxRoutes || m.size.Load() != int64(n) {
		t.Errorf("%d entries (size %d) after %d stores, want at most %d", n, m.size.Load(), 3*maxRoutes, maxRoutes)
	}
	if r, ok := m.load(last); !ok || r.MTU != 3*maxRoutes {
		t.Errorf("the last entry: %+v, %v", r, ok)
	}
}
