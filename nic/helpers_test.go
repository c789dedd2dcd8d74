package nic_test

import (
	"os"
	"testing"

	"github.com/softnic/softnic/nic"
)

// counter returns d's counter name, failing the test if there is none.
func counter(t testing.TB, d *nic.Device, name string) uint64 {
	t.Helper()
	v, ok := d.Counter(name)
	if !ok {
		t.Fatalf("no counter %s", name)
	}
	return v
}

// fill writes a pattern that differs with seed into b.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
}

// openDescriptors counts the process's open descriptors: an attached
// device's and, the daemon running in the test, its daemon's.
func openDescriptors(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no descriptor count: %v", err)
	}
	return len(fds)
}
