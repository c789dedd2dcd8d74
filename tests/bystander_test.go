package tests

import (
	"testing"

	"github.com/softnic/softnic/internal/bystander"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/nictest"
)

// The attack tests show that what one process does to a daemon does not
// starve another: a bystander, this test process attached to the same
// daemon, streams 64 KiB RDMA WRITEs while the attack is off and while it
// is on, and keeps within 2× of its throughput and p99 latency without
// it (package bystander). Without the attack, the attacker process spins
// in a loop of its own (TestAttacker).

// newBystander attaches to the daemon at control, with a QP connected to
// an embedded device in the same process (as a remote host's NIC would
// be); everything it made goes when the test ends.
func newBystander(t testing.TB, control string) *bystander.Bystander {
	t.Helper()
	dev, err := nic.Open(nic.Config{Attach: control})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	target, err := nicbench.NewDeviceTarget(nictest.OpenDevice(t, nic.Config{Embed: true}))
	if err != nil {
		t.Fatal(err)
	}
	in, err := nicbench.Dial(dev, target, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &bystander.Bystander{QP: in.QPs[0], CQ: in.CQ, MR: in.MR, Remote: in.Remote, Span: nicbench.RegionSize / 2}
}
