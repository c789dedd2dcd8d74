package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/embedded"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// WRITEs posted to several QPs between two polls leave in one system call
// when the poll rings their doorbells, each QP's packets in the order it
// built them, and all complete.
func TestDoorbellsShareASend(t *testing.T) {
	for _, qps := range []int{1, 8} {
		t.Run(map[int]string{1: "one QP", 8: "eight QPs"}[qps], func(t *testing.T) {
			p := nictest.NewPair(t, nil)
			a, b := p.A, p.B
			links := []nicbench.Link{{A: a.QP, B: b.QP, ACQ: a.CQ, BCQ: b.CQ}}
			for len(links) < qps {
				l, err := nicbench.Connect(a.Dev, b.Dev, a.PD, b.PD, nic.ConnectOptions{}, 4)
				if err != nil {
					t.Fatal(err)
				}
				links = append(links, l)
			}
			const perQP = 3
			for i, l := range links {
				for j := range perQP {
					off := (i*perQP + j) * 8
					wr := verbs.SendWR{ID: uint64(j), Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.MR.SGE(off, 8)},
						RemoteAddr: b.MR.Addr() + uint64(off), RKey: b.MR.RKey()}
					if err := l.A.PostSendDeferred(&wr); err != nil {
						t.Fatal(err)
					}
				}
			}
			batches := func() uint64 {
				v, ok := a.Dev.Counter("send_batches")
				if !ok {
					t.Fatal("no send_batches counter")
				}
				return v
			}
			sent := func() uint64 { v, _ := a.Dev.Counter("sent_pkts"); return v }
			before, pkts := batches(), sent()
			embedded.RingAll(device(a.Dev))
			if n := batches() - before; n != 1 {
				t.Errorf("%d WRITEs on %d QPs went in %d system calls, want 1", qps*perQP, qps, n)
			}
			if n := sent() - pkts; n != uint64(qps*perQP) {
				t.Errorf("%d packets sent, want %d", n, qps*perQP)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i, l := range links {
				var wcs [perQP]verbs.WC
				for got := 0; got < perQP; {
					n, err := l.ACQ.Wait(ctx, wcs[got:])
					if err != nil {
						t.Fatalf("QP %d: %v", i, err)
					}
					for _, wc := range wcs[got : got+n] {
						if wc.Status != verbs.Success || wc.ID != uint64(got) {
							t.Fatalf("QP %d: completion %v, want WRITE %d's success", i, wc.String(), got)
						}
						got++
					}
				}
			}
			for _, d := range []*nic.Device{a.Dev, b.Dev} {
				for _, name := range noLoss {
					if v, _ := d.Counter(name); v != 0 {
						t.Errorf("%v: %s = %d, want 0", d.Addr(), name, v)
					}
				}
			}
		})
	}
}
