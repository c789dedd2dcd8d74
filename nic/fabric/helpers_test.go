package fabric_test

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/verbs"
)

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

// openDevice opens a device on a free loopback port (unless cfg says
// otherwise) that the test closes when it ends.
func openDevice(t testing.TB, cfg nic.Config) *nic.Device {
	t.Helper()
	if !cfg.Addr.IsValid() {
		cfg.Addr = loopback
	}
	dev, err := nic.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
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

// end is a verbs peer of the endpoints under test: a device with a PD, a
// CQ, a registered 1 MiB buffer and one RC QP.
type end struct {
	dev *nic.Device
	cq  *nic.CQ
	mr  *nic.MR
	qp  *nic.QP
}

func openEnd(t testing.TB, cfg nic.Config) *end {
	t.Helper()
	e := &end{dev: openDevice(t, cfg)}
	pd, err := e.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = pd.RegMR(make([]byte, 1<<20), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = pd.CreateQP(nic.QPConfig{SendCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	return e
}

// wait returns the next work completion of cq, failing the test after 10 s.
func wait(t testing.TB, cq *nic.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return wc[0]
}
