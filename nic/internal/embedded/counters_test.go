package embedded

import (
	"testing"

	"github.com/softnic/softnic/nic/cm"
)

// The device names the connection manager's counters as the engine does.
func TestCMCounterNames(t *testing.T) {
	for k := range cm.NumCounters {
		if got, want := cmCounters[k].String(), k.String(); got != want {
			t.Errorf("engine counter %s is the device's %s", want, got)
		}
	}
}
