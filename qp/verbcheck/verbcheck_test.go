package verbcheck

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/verbs"
)

func TestCheck(t *testing.T) {
	rc := SendCaps{Type: verbs.RC, MaxSGE: 2, MaxInline: 16, MTU: 1024, MaxRdAtomic: 1}
	ud := SendCaps{Type: verbs.UD, MaxSGE: 2, MaxInline: 16, MTU: 1024}
	sge := func(n uint32) []verbs.SGE { return []verbs.SGE{{Addr: 0x1000, Length: n, LKey: 1}} }
	dest := netip.MustParseAddrPort("192.0.2.1:4791")
	tests := []struct {
		name string
		caps SendCaps
		wr   verbs.SendWR
		ok   bool
	}{
		{name: "RC WRITE", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRWrite, SGL: sge(1 << 20)}, ok: true},
		{name: "RC READ", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRRead, SGL: sge(64)}, ok: true},
		{name: "READ with max_rd_atomic 0", caps: SendCaps{Type: verbs.RC, MaxSGE: 1}, wr: verbs.SendWR{Opcode: verbs.WRRead, SGL: sge(64)}},
		{name: "too many SGEs", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: make([]verbs.SGE, 3)}},
		{name: "inline beyond max_inline_data", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Inline, Inline: make([]byte, 17)}},
		{name: "inline READ", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRRead, Flags: verbs.Inline, Inline: make([]byte, 8)}},
		{name: "SGE wraps the address space", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: ^uint64(0), Length: 2}}}},
		{name: "message beyond 2 GiB", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Length: 1 << 31}, {Addr: 1 << 32, Length: 1}}}},
		{name: "atomic without its 8-byte SGE", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRFetchAdd, SGL: sge(4)}},
		{name: "BIND_MW without a request", caps: rc, wr: verbs.SendWR{Opcode: verbs.WRBindMW}},
		{name: "UD SEND", caps: ud, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: sge(1024), Dest: dest, DestQPN: 5}, ok: true},
		{name: "UD SEND beyond the MTU", caps: ud, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: sge(1025), Dest: dest, DestQPN: 5}},
		{name: "UD SEND without a destination", caps: ud, wr: verbs.SendWR{Opcode: verbs.WRSend, SGL: sge(8)}},
		{name: "UD WRITE", caps: ud, wr: verbs.SendWR{Opcode: verbs.WRWrite, SGL: sge(8), Dest: dest, DestQPN: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.caps.Check(&tt.wr)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case !tt.ok && !errors.Is(err, mr.ErrInvalid):
				t.Fatalf("Check = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestAttr(t *testing.T) {
	tests := []struct {
		name string
		attr verbs.Attr
		mask verbs.AttrMask
		ok   bool
	}{
		{name: "MTU 4096", attr: verbs.Attr{PathMTU: 4096}, mask: verbs.AttrPathMTU, ok: true},
		{name: "MTU 1500", attr: verbs.Attr{PathMTU: 1500}, mask: verbs.AttrPathMTU},
		{name: "MTU 1500 not applied", attr: verbs.Attr{PathMTU: 1500}, mask: verbs.AttrTimeout, ok: true},
		{name: "timeout 32", attr: verbs.Attr{Timeout: 32}, mask: verbs.AttrTimeout},
		{name: "retry_cnt 8", attr: verbs.Attr{RetryCnt: 8}, mask: verbs.AttrRetryCnt},
		{name: "max_rd_atomic at the limit", attr: verbs.Attr{MaxRdAtomic: MaxRdAtomicLimit}, mask: verbs.AttrMaxRdAtomic, ok: true},
		{name: "max_dest_rd_atomic past the limit", attr: verbs.Attr{MaxDestRdAtomic: MaxRdAtomicLimit + 1}, mask: verbs.AttrMaxDestRdAtomic},
		{name: "destination QPN 0", attr: verbs.Attr{}, mask: verbs.AttrDestQPN},
		{name: "remote without a port", attr: verbs.Attr{Remote: netip.MustParseAddrPort("192.0.2.1:0")}, mask: verbs.AttrRemote},
		{name: "PSN beyond 24 bits", attr: verbs.Attr{SQPSN: 1 << 24}, mask: verbs.AttrSQPSN},
		{name: "access flags a QP lacks", attr: verbs.Attr{AccessFlags: mr.ZeroBased}, mask: verbs.AttrAccessFlags},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Attr(&tt.attr, tt.mask)
			switch {
			case tt.ok && err != nil:
				t.Fatalf("Attr = %v, want nil", err)
			case !tt.ok && !errors.Is(err, mr.ErrInvalid):
				t.Fatalf("Attr = %v, want ErrInvalid", err)
			}
		})
	}
}
