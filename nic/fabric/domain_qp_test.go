package fabric_test

import (
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/fabric"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// TestDomainRegionsReachableThroughQPs: a region registered through the
// fi_mr face (scalable mode: offset addressing, the application's key) is
// written by a peer through a QP of the domain's PD.
func TestDomainRegionsReachableThroughQPs(t *testing.T) {
	nictest.CheckLeaks(t)
	a := openEnd(t, nic.Config{})
	bdev := nictest.OpenDevice(t, nic.Config{})
	dom, err := fabric.OpenDomain(bdev, fabric.DomainConfig{Cache: &mr.CacheConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	target := make([]byte, 4096)
	fm, err := dom.Reg(target, fabric.FIRemoteWrite|fabric.FIWrite, 0, 0x4200, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	cq, err := bdev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	bqp, err := dom.PD().CreateQP(nic.QPConfig{SendCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Connect(bdev.Addr(), bqp.Num(), nic.ConnectOptions{LocalPSN: 1, RemotePSN: 2}); err != nil {
		t.Fatal(err)
	}
	if err := bqp.Connect(a.dev.Addr(), a.qp.Num(), nic.ConnectOptions{LocalPSN: 2, RemotePSN: 1}); err != nil {
		t.Fatal(err)
	}
	copy(a.mr.Bytes(), "through fi_mr")
	// Scalable mode: the remote address is an offset, the key the one asked for.
	wr := &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 13)}, RemoteAddr: 100, RKey: uint32(fm.Key())}
	if err := a.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
		t.Fatalf("completion %v", wc.String())
	}
	bqp.Status() // orders the check after the device's write (the device writes memory under the QP's lock)
	if got := string(target[100:113]); got != "through fi_mr" {
		t.Errorf("target holds %q", got)
	}
}
