package wire

import (
	"bytes"
	"testing"
)

// Known headers cut from golden captures (../shared/golden, Linux 6.1 rxe).
func TestHeadersFromGolden(t *testing.T) {
	t.Run("BTH of WRITE Only, write_small.pcap frame 20", func(t *testing.T) {
		got := BTH(unhex(t, "0a00ffff0000005f8099f692")).Fields()
		want := BTHFields{OpCode: OpRCWriteOnly, PKey: 0xffff, DestQP: 0x5f, AckReq: true, PSN: 0x99f692}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("RETH of WRITE Only, write_small.pcap frame 20", func(t *testing.T) {
		got := RETH(unhex(t, "0000563c2a3e200000005ce000000040")).Fields()
		want := RETHFields{VA: 0x563c2a3e2000, RKey: 0x5ce0, DMALen: 64}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("AtomicETH of FETCH ADD, atomic_fadd.pcap", func(t *testing.T) {
		got := AtomicETH(unhex(t, "0000564c1a9b30000000629d00000000000000010000000000000000")).Fields()
		want := AtomicETHFields{VA: 0x564c1a9b3000, RKey: 0x629d, SwapAdd: 1}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("AtomicAckETH of ATOMIC ACK, atomic_fadd.pcap", func(t *testing.T) {
		if got := AtomicAckETH(unhex(t, "c7af2fe19ef00f15")).OrigData(); got != 0xc7af2fe19ef00f15 {
			t.Errorf("got %#x", got)
		}
	})
	t.Run("DETH of a CM MAD, rping.pcap frame 1", func(t *testing.T) {
		got := DETH(unhex(t, "8001000000000001")).Fields()
		want := DETHFields{QKey: 0x80010000, SrcQP: 1}
		if got != want {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("ImmDT of WRITE Only with immediate, write_imm.pcap", func(t *testing.T) {
		if got := ImmDT(unhex(t, "00001000")).Imm(); got != 0x1000 {
			t.Errorf("got %#x", got)
		}
	})
}

// headerCodec adapts each view to a common shape: decode to fields, encode
// fields back.
type headerCodec struct {
	name   string
	size   int
	encode func(b []byte, from []byte) // Encode(Fields of from) into b
}

var headerCodecs = []headerCodec{
	{"BTH", BTHSize, func(b, from []byte) { f := BTH(from).Fields(); BTH(b).Encode(&f) }},
	{"RETH", RETHSize, func(b, from []byte) { f := RETH(from).Fields(); RETH(b).Encode(&f) }},
	{"AETH", AETHSize, func(b, from []byte) { f := AETH(from).Fields(); AETH(b).Encode(&f) }},
	{"AtomicETH", AtomicETHSize, func(b, from []byte) { f := AtomicETH(from).Fields(); AtomicETH(b).Encode(&f) }},
	{"AtomicAckETH", AtomicAckETHSize, func(b, from []byte) { f := AtomicAckETH(from).Fields(); AtomicAckETH(b).Encode(&f) }},
	{"ImmDT", ImmDTSize, func(b, from []byte) { ImmDT(b).SetImm(ImmDT(from).Imm()) }},
	{"IETH", IETHSize, func(b, from []byte) { IETH(b).SetRKey(IETH(from).RKey()) }},
	{"DETH", DETHSize, func(b, from []byte) { f := DETH(from).Fields(); DETH(b).Encode(&f) }},
	{"FETH", FETHSize, func(b, from []byte) { f := FETH(from).Fields(); FETH(b).Encode(&f) }},
}

// TestHeaderRoundTrip: the Fields of any bytes encode back to the same
// bytes, reserved bits included.
func TestHeaderRoundTrip(t *testing.T) {
	patterns := map[string]func(i int) byte{
		"zeros":       func(int) byte { return 0 },
		"ones":        func(int) byte { return 0xff },
		"alternating": func(i int) byte { return 0xa5 ^ byte(i) },
		"counting":    func(i int) byte { return byte(i*37 + 11) },
	}
	for _, c := range headerCodecs {
		for pname, pat := range patterns {
			t.Run(c.name+"/"+pname, func(t *testing.T) {
				in := make([]byte, c.size)
				for i := range in {
					in[i] = pat(i)
				}
				out := bytes.Repeat([]byte{0x3c}, c.size)
				c.encode(out, in)
				if !bytes.Equal(out, in) {
					t.Errorf("encode(fields(%x)) = %x", in, out)
				}
			})
		}
	}
}

func TestBTHSetters(t *testing.T) {
	b := BTH(make([]byte, BTHSize))
	f := BTHFields{OpCode: OpRCSendFirst, PKey: 0xffff, DestQP: 0x11, PSN: 5, Resv6a: 0x15, Resv7: 0x2a, MigReq: true}
	b.Encode(&f)
	steps := []struct {
		name string
		set  func()
		want func(*BTHFields)
	}{
		{"SetOpCode", func() { b.SetOpCode(OpRCSendLast) }, func(f *BTHFields) { f.OpCode = OpRCSendLast }},
		{"SetSE", func() { b.SetSE(true) }, func(f *BTHFields) { f.SE = true }},
		{"SetPadCount", func() { b.SetPadCount(3) }, func(f *BTHFields) { f.PadCount = 3 }},
		{"SetPKey", func() { b.SetPKey(0x8001) }, func(f *BTHFields) { f.PKey = 0x8001 }},
		{"SetFECN", func() { b.SetFECN(true) }, func(f *BTHFields) { f.FECN = true }},
		{"SetBECN", func() { b.SetBECN(true) }, func(f *BTHFields) { f.BECN = true }},
		{"SetDestQP truncates", func() { b.SetDestQP(0x7abcdef) }, func(f *BTHFields) { f.DestQP = 0xabcdef }},
		{"SetAckReq", func() { b.SetAckReq(true) }, func(f *BTHFields) { f.AckReq = true }},
		{"SetPSN truncates", func() { b.SetPSN(0x1fedcba) }, func(f *BTHFields) { f.PSN = 0xfedcba }},
		{"clear SE", func() { b.SetSE(false) }, func(f *BTHFields) { f.SE = false }},
		{"clear AckReq", func() { b.SetAckReq(false) }, func(f *BTHFields) { f.AckReq = false }},
		{"clear FECN", func() { b.SetFECN(false) }, func(f *BTHFields) { f.FECN = false }},
		{"clear BECN", func() { b.SetBECN(false) }, func(f *BTHFields) { f.BECN = false }},
	}
	for _, s := range steps {
		s.set()
		s.want(&f)
		if got := b.Fields(); got != f {
			t.Fatalf("after %s: %+v, want %+v", s.name, got, f)
		}
	}
}

func TestExtensionSetters(t *testing.T) {
	r := RETH(make([]byte, RETHSize))
	r.SetVA(1 << 40)
	r.SetRKey(0x77)
	r.SetDMALen(1 << 31)
	if got, want := r.Fields(), (RETHFields{VA: 1 << 40, RKey: 0x77, DMALen: 1 << 31}); got != want {
		t.Errorf("RETH %+v, want %+v", got, want)
	}
	a := AtomicETH(make([]byte, AtomicETHSize))
	a.SetVA(8)
	a.SetRKey(9)
	a.SetSwapAdd(10)
	a.SetCompare(11)
	if got, want := a.Fields(), (AtomicETHFields{VA: 8, RKey: 9, SwapAdd: 10, Compare: 11}); got != want {
		t.Errorf("AtomicETH %+v, want %+v", got, want)
	}
	k := AtomicAckETH(make([]byte, AtomicAckETHSize))
	k.Encode(&AtomicAckETHFields{OrigData: 42})
	if got := k.Fields(); got.OrigData != 42 {
		t.Errorf("AtomicAckETH %+v", got)
	}
	d := DETH(bytes.Repeat([]byte{0xee}, DETHSize))
	d.SetQKey(0x11111111)
	d.SetSrcQP(0xff000002)
	if got, want := d.Fields(), (DETHFields{QKey: 0x11111111, Resv8: 0xee, SrcQP: 2}); got != want {
		t.Errorf("DETH %+v, want %+v", got, want)
	}
	f := FETH(unhex(t, "ffffffc0"))
	f.SetPlacementType(0x12)
	f.SetSelectivityLevel(0x5)
	if got, want := f.Fields(), (FETHFields{PlacementType: 2, SelectivityLevel: 1, Resv: 0xffffffc0}); got != want {
		t.Errorf("FETH %+v, want %+v", got, want)
	}
	if got := []byte(f); !bytes.Equal(got, unhex(t, "ffffffd2")) {
		t.Errorf("FETH bytes %x, want ffffffd2", got)
	}
}
