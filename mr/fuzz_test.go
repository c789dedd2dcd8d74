package mr

import (
	"bytes"
	"testing"
)

// FuzzRemote throws arbitrary keys, addresses, lengths, accesses and
// requesters at the remote check: nothing may panic, and whatever is
// granted must lie inside registered memory. Every registered buffer sits
// between guard bytes that no write may change.
func FuzzRemote(f *testing.F) {
	tb := NewTable(Config{})
	defer tb.Close()
	pd, _ := tb.AllocPD()
	const guard = 64
	backing := aligned(8192)
	for i := range backing {
		backing[i] = 0xee
	}
	buffer := func(off, n int) []byte {
		b := backing[off : off+n : off+n]
		clear(b)
		return b
	}
	va, _ := tb.Register(pd, buffer(guard, 256), rw|MWBind)
	zb, _ := tb.Register(pd, buffer(512, 128), rw|ZeroBased)
	odp, _ := tb.Register(pd, buffer(1024, 3000), rw|OnDemand)
	// An fi_mr_regv region of its own PD, as package nic/fabric registers
	// one in scalable mode: zero-based, the application's key.
	iovPD, _ := tb.AllocPD()
	iov, _ := tb.RegisterWith(iovPD, RegOptions{Segments: [][]byte{buffer(4200, 100), buffer(4400, 37), buffer(4500, 200)},
		Access: rw | ZeroBased, Key: 0x77, HasKey: true})
	imp, _ := tb.RegisterImplicit(pd, OnDemand|rw)
	w, _ := tb.AllocWindow(pd, WindowType2)
	tb.BindWindow(&BindRequest{WindowKey: w.RKey(), NewKey: w.RKey(), RegionKey: va.LKey(), Addr: va.Addr() + 16, Length: 64, Access: RemoteWrite | RemoteAtomic | ZeroBased}, Requester{PD: pd, QPN: 1})
	keys := []uint32{va.RKey(), zb.RKey(), odp.RKey(), iov.RKey(), imp.RKey(), w.RKey()}
	guards := bytes.Clone(backing)

	f.Add(uint8(0), uint32(0), va.Addr(), uint64(8), uint8(1), uint32(1), uint16(0xffff))
	f.Add(uint8(1), uint32(0), uint64(0), uint64(128), uint8(2), uint32(1), uint16(0))
	f.Add(uint8(3), uint32(0), uint64(99), uint64(40), uint8(1), uint32(1), uint16(0))
	f.Add(uint8(4), uint32(0), addrOf(backing)+1024, uint64(8), uint8(4), uint32(1), uint16(0))
	f.Add(uint8(5), uint32(0), uint64(8), uint64(8), uint8(4), uint32(1), uint16(0))
	f.Add(uint8(200), uint32(0xdeadbeef), ^uint64(0), ^uint64(0), uint8(2), uint32(2), uint16(1))
	f.Fuzz(func(t *testing.T, pick uint8, raw uint32, addr, length uint64, needBits uint8, qpn uint32, pkey uint16) {
		key := raw
		if int(pick) < len(keys) {
			key = keys[pick]
		}
		need := []Access{RemoteRead, RemoteWrite, RemoteAtomic, LocalWrite, 0}[needBits%5]
		s, err := tb.Remote(key, addr, length, need, Requester{PD: pd, QPN: qpn, PKey: pkey})
		if err != nil {
			if _, ok := err.(Reason); !ok {
				t.Fatalf("Remote returned a non-Reason error %v", err)
			}
			return
		}
		defer s.Release()
		if s.Len() != length {
			t.Fatalf("span of %d bytes for a request of %d", s.Len(), length)
		}
		if length == 0 {
			return
		}
		n := min(length, 512)
		data := bytes.Repeat([]byte{0x5a}, int(n))
		got := make([]byte, n)
		if s.ReadAt(got, 0) != int(n) {
			t.Fatalf("ReadAt short")
		}
		s.WriteAt(data, length-n)
		s.FetchAdd(1)
		// Every byte outside the registered buffers is untouched.
		for i := range backing {
			if guards[i] == 0xee && backing[i] != 0xee {
				t.Fatalf("byte %d outside every region was written (key %#x addr %#x length %d %v)", i, key, addr, length, need)
			}
		}
	})
}
