package qp

import (
	"runtime"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
)

// heapGrowth returns the bytes of heap one call of mk allocates and
// keeps, averaged over several calls.
func heapGrowth(mk func() any) int64 {
	keep := make([]any, 32)
	for i := range keep { // the first calls may allocate what stays for good
		keep[i] = mk()
	}
	clear(keep)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / int64(len(keep))
}

// TestHeapCosts: what the cost functions say a QP, CQ or SRQ takes is
// what making one takes, give or take a tenth and 2 KiB, for small and
// large queues.
func TestHeapCosts(t *testing.T) {
	cq, _ := NewCQ(4)
	tab := mr.NewTable(mr.Config{})
	pd, _ := tab.AllocPD()
	qpOf := func(cfg Config) func() any {
		return func() any {
			cfg.Type, cfg.PD, cfg.Memory, cfg.SendCQ, cfg.RecvCQ = verbs.RC, pd, tab, cq, cq
			q, err := New(1, cfg)
			if err != nil {
				t.Fatal(err)
			}
			q.resp.start(verbs.Attr{MaxDestRdAtomic: MaxRdAtomicLimit})
			return q
		}
	}
	big := Config{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 32, MaxRecvSGE: 32, MaxInline: 4096}
	tests := []struct {
		name string
		cost int64
		make func() any
	}{
		{"CQ of 4", CQHeapCost(4), func() any { c, _ := NewCQ(4); return c }},
		{"CQ of 4Ki", CQHeapCost(4096), func() any { c, _ := NewCQ(4096); return c }},
		{"SRQ of 4Ki×32", SRQHeapCost(4096, 32), func() any { s, _ := NewSRQ(pd, 4096, 32); return s }},
		{"QP of defaults", HeapCost(Config{}), qpOf(Config{})},
		{"QP of 1Ki WRs, 32 SGEs, 4 KiB inline", HeapCost(big), qpOf(big)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := heapGrowth(tt.make)
			if d := tt.cost - got; d < -got/10-2048 || d > got/10+2048 {
				t.Errorf("cost %d bytes, making one takes %d", tt.cost, got)
			}
		})
	}
}
