package mr

import (
	"bytes"
	"math"
	"testing"
)

// remoteFixture is a table with regions of every kind of access in two PDs.
type remoteFixture struct {
	tb                          *Table
	pd, pd2                     PDHandle
	rw, ro, wo, local, zb, pd2R *Region
	buf                         map[*Region][]byte
}

func newRemoteFixture(t *testing.T) *remoteFixture {
	f := &remoteFixture{tb: newTable(t), buf: make(map[*Region][]byte)}
	f.pd, f.pd2 = allocPD(t, f.tb), allocPD(t, f.tb)
	reg := func(pd PDHandle, access Access) *Region {
		b := aligned(4096)
		for i := range b {
			b[i] = byte(i)
		}
		r := register(t, f.tb, pd, b, access)
		f.buf[r] = b
		return r
	}
	f.rw = reg(f.pd, rw)
	f.ro = reg(f.pd, RemoteRead)
	f.wo = reg(f.pd, LocalWrite|RemoteWrite)
	f.local = reg(f.pd, LocalWrite)
	f.zb = reg(f.pd, rw|ZeroBased)
	f.pd2R = reg(f.pd2, rw)
	return f
}

// TestRemote is the table of the data-path check: every reason a remote
// access is refused, and the accesses that pass.
func TestRemote(t *testing.T) {
	f := newRemoteFixture(t)
	who := Requester{PD: f.pd, QPN: 0x11}
	va := f.rw.Addr()
	tests := []struct {
		name   string
		key    uint32
		addr   uint64
		length uint64
		need   Access
		who    Requester
		want   Reason
	}{
		{"REMOTE_READ granted: read at the registered VA", f.rw.RKey(), va, 64, RemoteRead, who, 0},
		{"read of the whole region", f.rw.RKey(), va, 4096, RemoteRead, who, 0},
		{"read of the last byte", f.rw.RKey(), va + 4095, 1, RemoteRead, who, 0},
		{"REMOTE_WRITE granted", f.rw.RKey(), va + 100, 200, RemoteWrite, who, 0},
		{"REMOTE_ATOMIC granted: aligned 8 bytes", f.rw.RKey(), va + 8, 8, RemoteAtomic, who, 0},
		{"ZERO_BASED: byte offset from the beginning of the MR", f.zb.RKey(), 0, 4096, RemoteRead, who, 0},
		{"ZERO_BASED: offset in the middle", f.zb.RKey(), 100, 10, RemoteWrite, who, 0},
		{"ZERO_BASED: the buffer's VA is not an address of the region", f.zb.RKey(), f.zb.ext0.start, 8, RemoteRead, who, ReasonRange},

		{"C9-88: zero-length READ needs no valid R_Key", 0xdeadbeef, 0, 0, RemoteRead, who, 0},
		{"C9-88: zero-length WRITE needs no valid address", f.ro.RKey(), math.MaxUint64, 0, RemoteWrite, who, 0},
		{"an atomic is never zero-length", f.rw.RKey(), va, 0, RemoteAtomic, who, ReasonMisaligned},

		{"unknown key", 0x00abcd00, va, 8, RemoteRead, who, ReasonUnknownKey},
		{"stale key: right index, wrong variant", staleKey(f.tb, f.rw), va, 8, RemoteRead, who, ReasonStaleKey},
		{"wrong PD", f.rw.RKey(), va, 8, RemoteRead, Requester{PD: f.pd2}, ReasonWrongPD},
		{"region of another PD", f.pd2R.RKey(), f.pd2R.Addr(), 8, RemoteRead, who, ReasonWrongPD},

		{"READ without REMOTE_READ", f.wo.RKey(), f.wo.Addr(), 8, RemoteRead, who, ReasonAccess},
		{"WRITE without REMOTE_WRITE", f.ro.RKey(), f.ro.Addr(), 8, RemoteWrite, who, ReasonAccess},
		{"ATOMIC without REMOTE_ATOMIC", f.wo.RKey(), f.wo.Addr(), 8, RemoteAtomic, who, ReasonAccess},
		{"LOCAL_WRITE grants no remote access", f.local.RKey(), f.local.Addr(), 8, RemoteWrite, who, ReasonAccess},
		{"a local access asked of Remote", f.rw.RKey(), va, 8, LocalWrite, who, ReasonAccess},
		{"two accesses at once", f.rw.RKey(), va, 8, RemoteRead | RemoteWrite, who, ReasonAccess},

		{"one byte before the region", f.rw.RKey(), va - 1, 8, RemoteRead, who, ReasonRange},
		{"one byte past the region", f.rw.RKey(), va + 4089, 8, RemoteRead, who, ReasonRange},
		{"starts at the end", f.rw.RKey(), va + 4096, 1, RemoteRead, who, ReasonRange},
		{"longer than the region", f.rw.RKey(), va, 4097, RemoteRead, who, ReasonRange},
		{"addr+length wraps past 2^64", f.rw.RKey(), va + 16, math.MaxUint64 - 8, RemoteRead, who, ReasonRange},
		{"address near 2^64", f.rw.RKey(), math.MaxUint64 - 3, 8, RemoteWrite, who, ReasonRange},
		{"length 2^64-1", f.zb.RKey(), 0, math.MaxUint64, RemoteRead, who, ReasonRange},
		{"zero-based offset past the end", f.zb.RKey(), 4096, 1, RemoteRead, who, ReasonRange},
		{"zero-based offset+length wraps", f.zb.RKey(), 8, math.MaxUint64, RemoteWrite, who, ReasonRange},

		{"atomic not 8-byte aligned", f.rw.RKey(), va + 4, 8, RemoteAtomic, who, ReasonMisaligned},
		{"atomic of 4 bytes", f.rw.RKey(), va, 4, RemoteAtomic, who, ReasonMisaligned},
		{"atomic of 16 bytes", f.rw.RKey(), va, 16, RemoteAtomic, who, ReasonMisaligned},
		{"misaligned atomic out of range is an R_Key violation first", f.rw.RKey(), va + 4093, 8, RemoteAtomic, who, ReasonRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := f.tb.Remote(tc.key, tc.addr, tc.length, tc.need, tc.who)
			wantReason(t, "Remote", err, tc.want)
			defer s.Release()
			if tc.want != 0 {
				if s != (Span{}) {
					t.Errorf("refused access returned span %+v", s)
				}
				return
			}
			if s.Len() != tc.length {
				t.Fatalf("span length %d, want %d", s.Len(), tc.length)
			}
			if tc.length == 0 {
				return
			}
			// The span is the registered bytes at the requested place.
			r, _ := f.tb.Region(tc.key)
			buf := f.buf[r]
			off := tc.addr - r.Addr()
			got := make([]byte, tc.length)
			if n := s.ReadAt(got, 0); n != int(tc.length) || !bytes.Equal(got, buf[off:off+tc.length]) {
				t.Errorf("ReadAt = %d bytes %x, want the region's bytes at offset %d", n, got[:min(8, n)], off)
			}
		})
	}
}

// TestReasonText: every reason has a text of its own.
func TestReasonText(t *testing.T) {
	for r := Reason(1); r < numReasons; r++ {
		if r.Error() == "" || r.Error() == Reason(0).Error() {
			t.Errorf("reason %d has no text", r)
		}
	}
}

func TestRejectsCounted(t *testing.T) {
	f := newRemoteFixture(t)
	who := Requester{PD: f.pd}
	f.tb.Remote(0x00abcd00, 0, 8, RemoteRead, who)
	f.tb.Remote(f.ro.RKey(), f.ro.Addr(), 8, RemoteWrite, who)
	f.tb.Remote(f.ro.RKey(), f.ro.Addr(), 8, RemoteWrite, who)
	f.tb.Local(f.ro.LKey(), f.ro.Addr(), 8, LocalWrite, f.pd)
	got := f.tb.Stats().Rejects
	want := map[Reason]uint64{ReasonUnknownKey: 1, ReasonAccess: 3}
	if len(got) != len(want) || got[ReasonUnknownKey] != 1 || got[ReasonAccess] != 3 {
		t.Errorf("Rejects = %v, want %v", got, want)
	}
}

func TestLocal(t *testing.T) {
	f := newRemoteFixture(t)
	w, err := f.tb.AllocWindow(f.pd, WindowType1)
	wantErr(t, "AllocWindow", err, nil)
	tests := []struct {
		name   string
		key    uint32
		addr   uint64
		length uint64
		need   Access
		pd     PDHandle
		want   Reason
	}{
		{"local read of any region", f.ro.LKey(), f.ro.Addr(), 64, 0, f.pd, 0},
		{"LOCAL_WRITE granted", f.local.LKey(), f.local.Addr(), 64, LocalWrite, f.pd, 0},
		{"zero-based lkey addresses are offsets", f.zb.LKey(), 0, 4096, LocalWrite, f.pd, 0},
		{"zero-length SGE is not checked (rxe copy_data)", 0xdeadbeef, 0, 0, LocalWrite, f.pd, 0},
		{"local write without LOCAL_WRITE", f.ro.LKey(), f.ro.Addr(), 8, LocalWrite, f.pd, ReasonAccess},
		{"remote access asked of Local", f.rw.LKey(), f.rw.Addr(), 8, RemoteRead, f.pd, ReasonAccess},
		{"wrong PD", f.rw.LKey(), f.rw.Addr(), 8, 0, f.pd2, ReasonWrongPD},
		{"out of range", f.rw.LKey(), f.rw.Addr() + 4000, 100, 0, f.pd, ReasonRange},
		{"wrapping range", f.rw.LKey(), f.rw.Addr() + 1, math.MaxUint64, 0, f.pd, ReasonRange},
		{"a window key is no lkey", w.RKey(), 0, 8, 0, f.pd, ReasonUnknownKey},
		{"stale lkey", staleKey(f.tb, f.rw), f.rw.Addr(), 8, 0, f.pd, ReasonStaleKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := f.tb.Local(tc.key, tc.addr, tc.length, tc.need, tc.pd)
			wantReason(t, "Local", err, tc.want)
			if s.Len() != map[bool]uint64{true: tc.length, false: 0}[tc.want == 0] {
				t.Errorf("span length %d", s.Len())
			}
			s.Release()
		})
	}
}
