package nic_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
)

// TestQueryLimitsHold: the limits Query reports are those the device
// enforces, embedded and attached (within the daemon's per-process
// limits): as many QPs as MaxQP and no more, and one past MaxCQE,
// MaxQPWR, MaxSGE, MaxSRQWR, MaxSRQSGE or MaxQPInitRdAtom is refused.
func TestQueryLimitsHold(t *testing.T) {
	for _, c := range []struct {
		name  string
		open  func(t *testing.T) *nic.Device
		maxQP int
	}{
		{"embedded", func(t *testing.T) *nic.Device { return nictest.OpenDevice(t, nic.Config{MaxQPs: 8}) }, 7},
		{"attached", func(t *testing.T) *nic.Device {
			return attachTo(t, serveLimited(t, "process.qps", 3, "process.objects", 40))
		}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := c.open(t)
			a := dev.Query()
			if a.MaxQP != c.maxQP {
				t.Errorf("MaxQP %d, want %d", a.MaxQP, c.maxQP)
			}
			if c.name == "attached" && (a.MaxPD != 40 || a.MaxCQ != 40 || a.MaxMR != 40) {
				t.Errorf("MaxPD %d, MaxCQ %d, MaxMR %d: want the 40 objects a process may hold", a.MaxPD, a.MaxCQ, a.MaxMR)
			}
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			cq, err := dev.CreateCQ(4)
			if err != nil {
				t.Fatal(err)
			}
			var qps []*nic.QP
			for range a.MaxQP {
				q, err := pd.CreateQP(nic.QPConfig{SendCQ: cq, MaxSendWR: 1, MaxRecvWR: 1})
				if err != nil {
					t.Fatalf("QP %d of MaxQP %d: %v", len(qps)+1, a.MaxQP, err)
				}
				qps = append(qps, q)
			}
			if _, err := pd.CreateQP(nic.QPConfig{SendCQ: cq, MaxSendWR: 1, MaxRecvWR: 1}); err == nil {
				t.Errorf("a QP past MaxQP %d was created", a.MaxQP)
			}
			qps[0].Destroy()
			beyond := []struct {
				what string
				err  error
			}{
				{"MaxCQE", second(dev.CreateCQ(a.MaxCQE + 1))},
				{"MaxQPWR", second(pd.CreateQP(nic.QPConfig{SendCQ: cq, MaxSendWR: a.MaxQPWR + 1}))},
				{"MaxSGE", second(pd.CreateQP(nic.QPConfig{SendCQ: cq, MaxSendSGE: a.MaxSGE + 1}))},
				{"MaxSRQWR", second(pd.CreateSRQ(a.MaxSRQWR+1, 1))},
				{"MaxSRQSGE", second(pd.CreateSRQ(1, a.MaxSRQSGE+1))},
				{"MaxQPInitRdAtom", qps[1].Connect(dev.Addr(), qps[2].Num(), nic.ConnectOptions{MaxRdAtomic: uint8(a.MaxQPInitRdAtom + 1)})},
			}
			for _, b := range beyond {
				if !errors.Is(b.err, nic.ErrInvalid) {
					t.Errorf("one past %s: %v, want ErrInvalid", b.what, b.err)
				}
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

// Device.Query reports the device's limits, as ibv_query_device does.
func ExampleDevice_Query() {
	dev, err := nic.Open(nic.Config{Embed: true, Addr: loopback, MaxQPs: 1024})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	a := dev.Query()
	fmt.Println("max_qp:", a.MaxQP, "max_qp_wr:", a.MaxQPWR, "max_sge:", a.MaxSGE)
	fmt.Println("max_cqe:", a.MaxCQE, "max_qp_rd_atom:", a.MaxQPRdAtom, "atomic_cap:", a.AtomicCap)
	fmt.Println("memory windows:", a.Caps&nic.CapMemWindow != 0)
	// Output:
	// max_qp: 1023 max_qp_wr: 65536 max_sge: 32
	// max_cqe: 4194304 max_qp_rd_atom: 128 atomic_cap: ATOMIC_HCA
	// memory windows: true
}
