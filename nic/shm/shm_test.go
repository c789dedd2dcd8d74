package shm

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

func TestRing(t *testing.T) {
	mem := make([]byte, RingSize(3, 64))
	for _, tc := range []struct {
		name        string
		n, slotSize int
		mem         []byte
	}{
		{"no slots", 0, 64, mem},
		{"unaligned slots", 3, 60, mem},
		{"memory too small", 3, 64, mem[:HeaderSize+2*64]},
	} {
		if _, err := NewRing(tc.mem, tc.n, tc.slotSize); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: NewRing = %v, want ErrCorrupt", tc.name, err)
		}
	}
	r, err := NewRing(mem, 3, 64)
	if err != nil {
		t.Fatal(err)
	}
	r.Producer().Store(7)
	r.Written().Store(9)
	r.Solicited().Store(3)
	r.Consumer().Store(5)
	r.Armed().Store(1)
	r.Overflow().Store(1)
	r.Doorbell().Store(1)
	for _, w := range []struct {
		off  int
		want byte
	}{{offProducer, 7}, {offWritten, 9}, {offSolicited, 3}, {offConsumer, 5}, {offArmed, 1}, {offOverflow, 1}, {offDoorbell, 1}} {
		if mem[w.off] != w.want {
			t.Errorf("word at %d = %d, want %d", w.off, mem[w.off], w.want)
		}
	}
	// Indexes wrap: slot 4 is slot 1, and the index space wraps at 2^32.
	if &r.Slot(4)[0] != &mem[HeaderSize+64] || &r.Slot(1<<32 - 1)[0] != &mem[HeaderSize+(1<<32-1)%3*64] {
		t.Error("slots are not at index mod n")
	}
	if len(r.Slot(2)) != 64 || cap(r.Slot(2)) != 64 {
		t.Error("a slot reaches beyond its bytes")
	}
}

var (
	v4 = netip.MustParseAddrPort("192.0.2.1:4791")
	v6 = netip.MustParseAddrPort("[2001:db8::1]:4791")
)

func TestSendWQERoundTrip(t *testing.T) {
	lim := SendLimits{MaxSGE: 4, MaxInline: 64}
	sgl := []verbs.SGE{{Addr: 0x7f0000001000, Length: 4096, LKey: 0x1234}, {Addr: 1, Length: 1, LKey: 2}}
	for _, tc := range []struct {
		name string
		wr   verbs.SendWR
	}{
		{"write", verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl, RemoteAddr: 0xdead0000, RKey: 0x99}},
		{"write with immediate, fenced", verbs.SendWR{ID: 2, Opcode: verbs.WRWriteImm, Flags: verbs.Fence | verbs.Solicited, SGL: sgl[:1], Imm: 0xabcdef01, RemoteAddr: 8, RKey: 1}},
		{"inline send", verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: []byte("in the work request")}},
		{"empty inline", verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: []byte{}}},
		{"read", verbs.SendWR{ID: 5, Opcode: verbs.WRRead, SGL: sgl[:1], RemoteAddr: 1 << 40, RKey: 7}},
		{"compare and swap", verbs.SendWR{ID: 6, Opcode: verbs.WRCompareSwap, SGL: []verbs.SGE{{Addr: 64, Length: 8, LKey: 3}}, CompareAdd: 5, Swap: 6, RemoteAddr: 16, RKey: 4}},
		{"fetch and add", verbs.SendWR{ID: 7, Opcode: verbs.WRFetchAdd, SGL: []verbs.SGE{{Addr: 64, Length: 8, LKey: 3}}, CompareAdd: 1 << 63}},
		{"atomic write", verbs.SendWR{ID: 8, Opcode: verbs.WRAtomicWrite, Swap: ^uint64(0), RemoteAddr: 24, RKey: 4}},
		{"send with invalidate", verbs.SendWR{ID: 9, Opcode: verbs.WRSendInv, InvalidateRKey: 0x5500, SGL: sgl}},
		{"local invalidate", verbs.SendWR{ID: 10, Opcode: verbs.WRLocalInv, InvalidateRKey: 0x6600}},
		{"UD send over IPv4", verbs.SendWR{ID: 11, Opcode: verbs.WRSendImm, SGL: sgl[:1], Dest: v4, DestQPN: 0x12, QKey: 0x11111111}},
		{"UD send over IPv6", verbs.SendWR{ID: 12, Opcode: verbs.WRSend, SGL: sgl, Dest: v6, DestQPN: 1, QKey: 0x80010000}},
		{"UD send with a traffic class", verbs.SendWR{ID: 14, Opcode: verbs.WRSend, SGL: sgl, Dest: v4, DestQPN: 1, QKey: 1, TrafficClass: 0xb8}},
		{"bind a window", verbs.SendWR{ID: 13, Opcode: verbs.WRBindMW, Flags: verbs.Signaled | verbs.Fence, Bind: &mr.BindRequest{
			WindowKey: 0x1234, NewKey: 0x1235, RegionKey: 0x5678, Addr: 0x7f0000000000, Length: 1 << 33, Access: mr.RemoteRead | mr.ZeroBased}}},
	} {
		slot := make([]byte, SendSlotSize(lim.MaxSGE, lim.MaxInline))
		if err := EncodeSend(slot, &tc.wr); err != nil {
			t.Fatalf("%s: EncodeSend: %v", tc.name, err)
		}
		var got verbs.SendWR
		if err := DecodeSend(slot, lim, &got, make([]verbs.SGE, 0, lim.MaxSGE), make([]byte, 0, lim.MaxInline), new(mr.BindRequest)); err != nil {
			t.Fatalf("%s: DecodeSend: %v", tc.name, err)
		}
		want := tc.wr
		if want.Flags&verbs.Inline == 0 && want.Opcode != verbs.WRBindMW {
			want.SGL = append([]verbs.SGE{}, want.SGL...)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded\n%+v\nwant\n%+v", tc.name, got, want)
		}
	}
}

func TestSendWQERefused(t *testing.T) {
	lim := SendLimits{MaxSGE: 2, MaxInline: 16}
	good := func() []byte {
		slot := make([]byte, SendSlotSize(4, 32)) // room for more than the limits allow
		EncodeSend(slot, &verbs.SendWR{ID: 77, Opcode: verbs.WRWrite, SGL: []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}}})
		return slot
	}
	for _, tc := range []struct {
		name  string
		spoil func(s []byte)
	}{
		{"opcode zero", func(s []byte) { s[8] = 0 }},
		{"BIND_MW", func(s []byte) { s[8] = byte(verbs.WRBindMW) }},
		{"opcode beyond the table", func(s []byte) { s[8] = 200 }},
		{"unknown flag", func(s []byte) { s[9] |= 0x80 }},
		{"more SGEs than the queue takes", func(s []byte) { s[10] = 3 }},
		{"255 SGEs", func(s []byte) { s[10] = 255 }},
		{"inline length without the flag", func(s []byte) { le.PutUint32(s[12:], 4) }},
		{"inline beyond max_inline", func(s []byte) { s[9] = byte(verbs.Inline); s[10] = 0; le.PutUint32(s[12:], 17) }},
		{"inline with SGEs", func(s []byte) { s[9] = byte(verbs.Inline); le.PutUint32(s[12:], 4) }},
		{"inline length of 4 GiB", func(s []byte) { s[9] = byte(verbs.Inline); s[10] = 0; le.PutUint32(s[12:], ^uint32(0)) }},
		{"traffic class without a destination", func(s []byte) { s[62] = 1 }},
		{"reserved byte", func(s []byte) { s[63] = 1 }},
		{"reserved tail", func(s []byte) { s[95] = 1 }},
		{"unknown address family", func(s []byte) { s[11] = 5 }},
		{"IPv4 that is not IPv4-mapped", func(s []byte) { s[11] = 4; s[64] = 0x20 }},
		{"address bytes without a family", func(s []byte) { s[70] = 1 }},
		{"port without a family", func(s []byte) { s[60] = 1 }},
	} {
		slot := good()
		tc.spoil(slot)
		var wr verbs.SendWR
		err := DecodeSend(slot, lim, &wr, make([]verbs.SGE, 0, lim.MaxSGE), make([]byte, 0, lim.MaxInline), new(mr.BindRequest))
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeSend = %v, want ErrCorrupt", tc.name, err)
		}
		if wr.ID != 77 {
			t.Errorf("%s: a refused WQE has ID %d, want 77", tc.name, wr.ID)
		}
	}
	var wr verbs.SendWR
	if err := DecodeSend(make([]byte, 95), lim, &wr, nil, nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short slot: %v", err)
	}
	if err := EncodeSend(make([]byte, SendSlotSize(1, 0)), &verbs.SendWR{Opcode: verbs.WRWrite, SGL: make([]verbs.SGE, 2)}); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("EncodeSend of too many SGEs = %v, want ErrInvalid", err)
	}
	if err := EncodeSend(make([]byte, SendSlotSize(1, 0)), &verbs.SendWR{Opcode: verbs.WRBindMW}); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("EncodeSend of BIND_MW without a bind request = %v, want ErrInvalid", err)
	}
	bind := func() []byte {
		slot := make([]byte, SendSlotSize(1, 0))
		EncodeSend(slot, &verbs.SendWR{ID: 77, Opcode: verbs.WRBindMW, Bind: &mr.BindRequest{WindowKey: 1, Length: 8}})
		return slot
	}
	for _, tc := range []struct {
		name  string
		spoil func(s []byte)
	}{
		{"inline flag", func(s []byte) { s[9] |= byte(verbs.Inline) }},
		{"an SGE", func(s []byte) { s[10] = 1 }},
		{"immediate data", func(s []byte) { s[16] = 1 }},
		{"compare value", func(s []byte) { s[48] = 1 }},
		{"destination", func(s []byte) { s[11] = 4 }},
		{"reserved word", func(s []byte) { s[92] = 1 }},
	} {
		slot := bind()
		tc.spoil(slot)
		var wr verbs.SendWR
		if err := DecodeSend(slot, lim, &wr, make([]verbs.SGE, 0, 2), nil, new(mr.BindRequest)); !errors.Is(err, ErrCorrupt) || wr.ID != 77 {
			t.Errorf("BIND_MW with %s: DecodeSend = %v (WR %d), want ErrCorrupt naming WR 77", tc.name, err, wr.ID)
		}
	}
	var wr2 verbs.SendWR
	if err := DecodeSend(bind(), lim, &wr2, nil, nil, nil); !errors.Is(err, ErrCorrupt) {
		t.Errorf("BIND_MW where binds are not taken: %v, want ErrCorrupt", err)
	}
}

func TestRecvWQE(t *testing.T) {
	slot := make([]byte, RecvSlotSize(3))
	wr := verbs.RecvWR{ID: 42, SGL: []verbs.SGE{{Addr: 10, Length: 20, LKey: 30}, {Addr: 40, Length: 50, LKey: 60}}}
	if err := EncodeRecv(slot, &wr); err != nil {
		t.Fatal(err)
	}
	var got verbs.RecvWR
	if err := DecodeRecv(slot, 3, &got, make([]verbs.SGE, 0, 3)); err != nil || !reflect.DeepEqual(got, wr) {
		t.Fatalf("DecodeRecv = %+v, %v; want %+v", got, err, wr)
	}
	if err := DecodeRecv(slot, 1, &got, make([]verbs.SGE, 0, 3)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("two SGEs where one is allowed: %v", err)
	}
	slot[12] = 1
	if err := DecodeRecv(slot, 3, &got, make([]verbs.SGE, 0, 3)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("reserved byte set: %v", err)
	}
	if err := EncodeRecv(make([]byte, RecvSlotSize(1)), &wr); !errors.Is(err, qp.ErrInvalid) {
		t.Errorf("EncodeRecv of two SGEs into a slot for one = %v", err)
	}
}

func TestCQE(t *testing.T) {
	for _, wc := range []verbs.WC{
		{ID: 1, Status: verbs.Success, Opcode: verbs.WCWrite, ByteLen: 8, QPN: 0x11},
		{ID: 2, Status: verbs.RemAccessErr, Opcode: verbs.WCRead, QPN: 0xFFFFFF},
		{ID: 3, Opcode: verbs.WCRecvWriteImm, Flags: verbs.WCWithImm, Imm: 0xfeedface, ByteLen: 1 << 31, QPN: 0x12},
		{ID: 4, Opcode: verbs.WCRecv, Flags: verbs.WCGRH | verbs.WCWithInv, InvalidatedRKey: 9, SrcQPN: 0x13, Src: v4},
		{ID: 5, Opcode: verbs.WCRecv, Flags: verbs.WCGRH, SrcQPN: 1, Src: v6},
	} {
		slot := make([]byte, CQESize)
		EncodeCQE(slot, &wc)
		var got verbs.WC
		if err := DecodeCQE(slot, &got); err != nil || got != wc {
			t.Errorf("DecodeCQE = %+v, %v; want %+v", got, err, wc)
		}
	}
	slot := make([]byte, CQESize)
	slot[63] = 1
	var wc verbs.WC
	if err := DecodeCQE(slot, &wc); !errors.Is(err, ErrCorrupt) {
		t.Errorf("CQE with reserved bytes set: %v", err)
	}
}

// TestCodecsDoNotAllocate: the codecs run once per work request and
// completion.
func TestCodecsDoNotAllocate(t *testing.T) {
	lim := SendLimits{MaxSGE: 4, MaxInline: 64}
	slot := make([]byte, SendSlotSize(4, 64))
	wr := verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}}, Dest: v6}
	var out verbs.SendWR
	var bind mr.BindRequest
	sgl, inline := make([]verbs.SGE, 0, 4), make([]byte, 0, 64)
	cqe := make([]byte, CQESize)
	wc := verbs.WC{ID: 1, Src: v4}
	var wcOut verbs.WC
	n := testing.AllocsPerRun(100, func() {
		EncodeSend(slot, &wr)
		DecodeSend(slot, lim, &out, sgl, inline, &bind)
		EncodeCQE(cqe, &wc)
		DecodeCQE(cqe, &wcOut)
	})
	if n != 0 {
		t.Errorf("%v allocations per WQE and CQE", n)
	}
}

// FuzzDecodeSend: no slot makes the decoder panic or hand out more than the
// limits; whatever it accepts encodes back to a slot it decodes the same.
func FuzzDecodeSend(f *testing.F) {
	lim := SendLimits{MaxSGE: 3, MaxInline: 40}
	size := SendSlotSize(lim.MaxSGE, lim.MaxInline)
	for _, wr := range []verbs.SendWR{
		{Opcode: verbs.WRWrite, SGL: []verbs.SGE{{Addr: 1, Length: 2, LKey: 3}}},
		{Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: []byte("x")},
		{Opcode: verbs.WRSend, Dest: v4, DestQPN: 3},
		{Opcode: verbs.WRBindMW, Bind: &mr.BindRequest{WindowKey: 0x100, NewKey: 0x101, RegionKey: 0x200, Addr: 64, Length: 64, Access: mr.RemoteWrite}},
	} {
		slot := make([]byte, size)
		EncodeSend(slot, &wr)
		f.Add(slot)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var wr verbs.SendWR
		if err := DecodeSend(b, lim, &wr, make([]verbs.SGE, 0, lim.MaxSGE), make([]byte, 0, lim.MaxInline), new(mr.BindRequest)); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if len(wr.SGL) > lim.MaxSGE || len(wr.Inline) > lim.MaxInline {
			t.Fatalf("accepted %d SGEs, %d bytes inline", len(wr.SGL), len(wr.Inline))
		}
		again := make([]byte, size)
		if err := EncodeSend(again, &wr); err != nil {
			t.Fatalf("re-encoding an accepted WQE: %v", err)
		}
		var wr2 verbs.SendWR
		if err := DecodeSend(again, lim, &wr2, make([]verbs.SGE, 0, lim.MaxSGE), make([]byte, 0, lim.MaxInline), new(mr.BindRequest)); err != nil {
			t.Fatalf("decoding the re-encoded WQE: %v", err)
		}
		if !reflect.DeepEqual(wr, wr2) {
			t.Fatalf("re-encoded WQE decodes to %+v, want %+v", wr2, wr)
		}
	})
}
