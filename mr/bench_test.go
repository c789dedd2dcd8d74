package mr

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// benchRegions is the size of the table the benchmarks run against.
const benchRegions = 1_000_000

// benchFixture is a table of benchRegions regions of 64 bytes, laid side by
// side in one arena, with their keys and an address inside each in random
// order, and a Go map of the same keys for comparison. It is built once per
// test binary: CI runs every benchmark once (-benchtime 1x).
type benchFixture struct {
	tb       *Table
	pd       PDHandle
	keys     []uint32
	addrs    []uint64
	byKey    map[uint32]*Region
	keyAddrs []keyAddr // a key and an address in its region, in random order
}

type keyAddr struct {
	key  uint32
	addr uint64
}

var (
	benchOnce sync.Once
	bench     *benchFixture
)

func benchTable(b *testing.B) *benchFixture {
	benchOnce.Do(func() {
		tb := NewTable(Config{})
		pd, err := tb.AllocPD()
		if err != nil {
			b.Fatal(err)
		}
		arena, err := tb.NewArena(pd, benchRegions*64)
		if err != nil {
			b.Fatal(err)
		}
		f := &benchFixture{
			tb: tb, pd: pd,
			keys: make([]uint32, benchRegions), addrs: make([]uint64, benchRegions),
			byKey: make(map[uint32]*Region, benchRegions), keyAddrs: make([]keyAddr, 0, benchRegions),
		}
		mem := arena.Bytes()
		for i := range benchRegions {
			r, err := tb.Register(pd, mem[i*64:(i+1)*64], rw)
			if err != nil {
				b.Fatal(err)
			}
			f.keys[i], f.addrs[i] = r.RKey(), r.Addr()+uint64(i%56)
			f.byKey[r.RKey()] = r
			f.keyAddrs = append(f.keyAddrs, keyAddr{r.RKey(), r.Addr()})
		}
		rng := rand.New(rand.NewPCG(1, 2))
		rng.Shuffle(benchRegions, func(i, j int) { f.keys[i], f.keys[j] = f.keys[j], f.keys[i] })
		rng.Shuffle(benchRegions, func(i, j int) { f.addrs[i], f.addrs[j] = f.addrs[j], f.addrs[i] })
		rng.Shuffle(benchRegions, func(i, j int) { f.keyAddrs[i], f.keyAddrs[j] = f.keyAddrs[j], f.keyAddrs[i] })
		bench = f
	})
	return bench
}

var sinkRegion *Region

// BenchmarkLookupRKey compares finding a region by rkey in the key table
// with a plain Go map lookup of the same keys, in the same order.
func BenchmarkLookupRKey(b *testing.B) {
	f := benchTable(b)
	b.Run("table", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, ok := f.tb.Region(f.keys[i])
			if !ok {
				b.Fatal("key not found")
			}
			sinkRegion = r
			if i++; i == len(f.keys) {
				i = 0
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, ok := f.byKey[f.keys[i]]
			if !ok {
				b.Fatal("key not found")
			}
			sinkRegion = r
			if i++; i == len(f.keys) {
				i = 0
			}
		}
	})
}

// BenchmarkRemote is the whole data-path check of a 64-byte READ: key,
// PD, access, range, the span's reference, and its release.
func BenchmarkRemote(b *testing.B) {
	f := benchTable(b)
	who := Requester{PD: f.pd, QPN: 1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ka := f.keyAddrs[i]
		s, err := f.tb.Remote(ka.key, ka.addr, 64, RemoteRead, who)
		if err != nil {
			b.Fatal(err)
		}
		s.Release()
		if i++; i == len(f.keyAddrs) {
			i = 0
		}
	}
}

// BenchmarkRegionAt finds the region holding an address through the B-tree
// address index.
func BenchmarkRegionAt(b *testing.B) {
	f := benchTable(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r, ok := f.tb.RegionAt(f.pd, f.addrs[i], 8)
		if !ok {
			b.Fatal("address not found")
		}
		sinkRegion = r
		if i++; i == len(f.addrs) {
			i = 0
		}
	}
}

// BenchmarkRegisterDeregister registers and deregisters a pinned 64-byte
// buffer in the table of a million regions.
func BenchmarkRegisterDeregister(b *testing.B) {
	f := benchTable(b)
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		r, err := f.tb.Register(f.pd, buf, rw)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.tb.Deregister(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkRemoteRefused times Remote refusing a 64-byte READ beside
// granting one, in a table of 64 regions (a daemon's table, warm in the
// cache): a key that names nothing, a region of another PD, one without
// remote read, a range beyond the region. The responder answers every
// refusal with the same NAK and the same bookkeeping; what tells them apart
// is the time here, tens of nanoseconds, far below what a peer can time
// across a network. (In BenchmarkRemote's table of a million regions, cold
// in the cache, a key that names a region costs a cache miss or two, about
// a microsecond, more than one that names none.)
func BenchmarkRemoteRefused(b *testing.B) {
	tb := NewTable(Config{})
	b.Cleanup(func() { tb.Close() })
	pd, _ := tb.AllocPD()
	who, other := Requester{PD: pd, QPN: 1}, Requester{PD: pd + 1, QPN: 1}
	var regions []*Region
	for range 64 {
		r, err := tb.Register(pd, make([]byte, 64), LocalWrite|RemoteRead)
		if err != nil {
			b.Fatal(err)
		}
		regions = append(regions, r)
	}
	ro, err := tb.Register(pd, make([]byte, 64), LocalWrite|RemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  func(r *Region) uint32
		addr func(r *Region) uint64
		who  Requester
		want Reason
	}{
		{"granted", (*Region).RKey, (*Region).Addr, who, 0},
		{"unknown key", func(r *Region) uint32 { return r.RKey() ^ 0x4000_0000 }, (*Region).Addr, who, ReasonUnknownKey},
		{"another PD", (*Region).RKey, (*Region).Addr, other, ReasonWrongPD},
		{"no remote read", func(*Region) uint32 { return ro.RKey() }, func(*Region) uint64 { return ro.Addr() }, who, ReasonAccess},
		{"beyond the region", (*Region).RKey, func(r *Region) uint64 { return r.Addr() + 64 }, who, ReasonRange},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := regions[i%len(regions)]
				s, err := tb.Remote(tc.key(r), tc.addr(r), 64, RemoteRead, tc.who)
				if why, _ := err.(Reason); why != tc.want {
					b.Fatalf("%#x: %v, want %v", tc.key(r), err, tc.want)
				}
				s.Release()
				i++
			}
		})
	}
}
