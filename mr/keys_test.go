package mr

import (
	"fmt"
	"testing"
)

func TestKeyFormat(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	r := register(t, tb, pd, make([]byte, 64), rw)
	// lkey == rkey, as rxe sets both from one value.
	if r.LKey() != r.RKey() {
		t.Errorf("lkey %#x != rkey %#x", r.LKey(), r.RKey())
	}
	if i := r.RKey() >> 8; i == 0 || i >= windowIndex {
		t.Errorf("region key %#x: index %#x outside the region range", r.RKey(), i)
	}
	w, err := tb.AllocWindow(pd, WindowType2)
	wantErr(t, "AllocWindow", err, nil)
	if i := w.RKey() >> 8; i < windowIndex {
		t.Errorf("window key %#x: index %#x in the region range", w.RKey(), i)
	}
	if got, ok := tb.Region(r.RKey()); !ok || got != r {
		t.Errorf("Region(%#x) = %v, %v", r.RKey(), got, ok)
	}
	if _, ok := tb.Region(w.RKey()); ok {
		t.Error("Region finds a window key")
	}
}

func TestIncRKey(t *testing.T) {
	tests := []struct{ in, want uint32 }{
		{0x00012300, 0x00012301},
		{0x000123fe, 0x000123ff},
		{0x000123ff, 0x00012300}, // the variant wraps, the index stays
		{0xffffffff, 0xffffff00},
	}
	for _, tc := range tests {
		if got := IncRKey(tc.in); got != tc.want {
			t.Errorf("IncRKey(%#x) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

// TestFirstVariantRandom checks that keys are not guessable from a count:
// two tables give their first regions different variants.
func TestFirstVariantRandom(t *testing.T) {
	variants := func() []uint8 {
		tb := newTable(t)
		pd := allocPD(t, tb)
		var v []uint8
		for range 16 {
			v = append(v, uint8(register(t, tb, pd, make([]byte, 8), 0).RKey()))
		}
		return v
	}
	a, b := variants(), variants()
	same := 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
	}
	// 16 equal bytes by chance: 2^-128.
	if same == len(a) {
		t.Errorf("two tables chose the same 16 variants %v", a)
	}
}

// TestStaleKeyNeverMatches reuses one index many times: every old key is
// refused as stale, each reuse increments the variant.
func TestStaleKeyNeverMatches(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd}
	buf := make([]byte, 64)
	first := register(t, tb, pd, buf, rw)
	index := first.RKey() >> 8
	var old []uint32
	cur := first
	for reuse := 0; reuse < 5; {
		old = append(old, cur.RKey())
		wantErr(t, "Deregister", tb.Deregister(cur), nil)
		// Cycle other registrations through the free queue until the
		// index comes back.
		fillers := 0
		for {
			cur = register(t, tb, pd, buf, rw)
			if cur.RKey()>>8 == index {
				break
			}
			wantErr(t, "Deregister filler", tb.Deregister(cur), nil)
			fillers++
		}
		if fillers < reuseDelay {
			t.Errorf("index reused after %d other registrations, want at least %d", fillers, reuseDelay)
		}
		reuse++
		if want := IncRKey(old[len(old)-1]); cur.RKey() != want {
			t.Fatalf("reuse %d: key %#x, want the variant incremented: %#x", reuse, cur.RKey(), want)
		}
		for _, k := range old {
			_, err := tb.Remote(k, cur.Addr(), 8, RemoteRead, who)
			wantReason(t, "remote read with an old key", err, ReasonStaleKey)
			_, err = tb.Local(k, cur.Addr(), 8, 0, pd)
			wantReason(t, "local read with an old key", err, ReasonStaleKey)
		}
		s, err := tb.Remote(cur.RKey(), cur.Addr(), 8, RemoteRead, who)
		wantReason(t, "remote read with the current key", err, 0)
		s.Release()
	}
}

func TestKeySpaceExhausted(t *testing.T) {
	tb := NewTable(Config{MaxRegions: 3, MaxWindows: 1})
	t.Cleanup(func() { tb.Close() })
	pd := allocPD(t, tb)
	var rs []*Region
	for range 3 {
		rs = append(rs, register(t, tb, pd, make([]byte, 8), 0))
	}
	_, err := tb.Register(pd, make([]byte, 8), 0)
	wantErr(t, "fourth region of three", err, ErrNoMem)
	wantErr(t, "Deregister", tb.Deregister(rs[1]), nil)
	// With the space used up, a freed index is reused at once.
	r := register(t, tb, pd, make([]byte, 8), 0)
	if r.RKey()>>8 != rs[1].RKey()>>8 {
		t.Errorf("reused index %#x, want %#x", r.RKey()>>8, rs[1].RKey()>>8)
	}
	_, err = tb.AllocWindow(pd, WindowType1)
	wantErr(t, "first window", err, nil)
	_, err = tb.AllocWindow(pd, WindowType1)
	wantErr(t, "second window of one", err, ErrNoMem)
}

func TestUnknownKeys(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd}
	tests := []struct {
		name string
		key  uint32
	}{
		{"key 0: index 0 is never handed out", 0},
		{"index never used", 0x7fff_ff00},
		{"window index never used", 0xffff_ff00},
		{"chunk never created", 0x0100_0000},
	}
	for _, tc := range tests {
		_, err := tb.Remote(tc.key, 0, 8, RemoteRead, who)
		wantReason(t, tc.name, err, ReasonUnknownKey)
	}
}

// TestRequestedKeysShareIndices: applications choose fi_mr keys freely, so
// keys differing only in their low byte (the same index) must coexist.
func TestRequestedKeysShareIndices(t *testing.T) {
	tb := newTable(t)
	pd := allocPD(t, tb)
	who := Requester{PD: pd}
	reg := func(key uint32) *Region {
		t.Helper()
		r, err := tb.register(regSpec{pd: pd, segs: [][]byte{make([]byte, 8)}, access: rw, requested: true, requestedKey: key})
		wantErr(t, "register", err, nil)
		return r
	}
	byKey := map[uint32]*Region{}
	for _, k := range []uint32{0x301, 0x302, 0x303, 0x3ff} {
		byKey[k] = reg(k)
	}
	_, err := tb.register(regSpec{pd: pd, segs: [][]byte{make([]byte, 8)}, access: rw, requested: true, requestedKey: 0x302})
	wantErr(t, "the exact key again", err, ErrNoKey)
	check := func(step string) {
		t.Helper()
		for k := uint32(0x300); k <= 0x3ff; k++ {
			want, ok := byKey[k]
			got, found := tb.Region(k)
			if found != ok || got != want {
				t.Errorf("%s: Region(%#x) = %p, %v; want %p", step, k, got, found, want)
			}
			_, err := tb.Remote(k, 0, 0x100, RemoteRead, who) // offset past 8 bytes: a range error once found
			switch {
			case ok:
				wantReason(t, step, err, ReasonRange)
			case len(byKey) == 0:
				wantReason(t, step, err, ReasonUnknownKey)
			default:
				wantReason(t, step, err, ReasonStaleKey)
			}
		}
	}
	check("four keys on index 3")
	listed := 0
	for info := range tb.Regions() {
		if info.RKey>>8 == 3 {
			listed++
		}
	}
	if listed != 4 {
		t.Errorf("Regions lists %d of the 4 regions sharing index 3", listed)
	}
	for _, k := range []uint32{0x302, 0x301, 0x3ff, 0x303} { // a middle one, the head, ...
		wantErr(t, "Deregister", tb.Deregister(byKey[k]), nil)
		delete(byKey, k)
		check(fmt.Sprintf("after removing %#x", k))
	}
	byKey[0x302] = reg(0x302)
	check("the index reused")
}
