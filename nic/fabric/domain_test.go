package fabric

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// newDevice opens an embedded device on loopback, closed when the test
// ends; the tests check accesses against its region table.
func newDevice(t *testing.T) *nic.Device {
	t.Helper()
	dev, err := nic.Open(nic.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func openDomain(t *testing.T, dev *nic.Device, cfg DomainConfig) *Domain {
	t.Helper()
	if cfg.Cache == nil {
		cfg.Cache = &mr.CacheConfig{MaxCount: mr.DefaultCacheMaxCount}
	}
	d, err := OpenDomain(dev, cfg)
	if err != nil {
		t.Fatalf("OpenDomain(%+v): %v", cfg, err)
	}
	return d
}

func TestDomainModes(t *testing.T) {
	dev := newDevice(t)
	tests := []struct {
		name string
		mode MRMode
		want MRMode
		err  error
	}{
		{"scalable is implied by the lack of any mr_mode bits", 0, 0, nil},
		{"FI_MR_SCALABLE (<= 1.4) alone", MRScalable, 0, nil},
		{"FI_MR_BASIC equals VIRT_ADDR, ALLOCATED and PROV_KEY", MRBasic, MRVirtAddr | MRAllocated | MRProvKey, nil},
		{"FI_MR_BASIC in conjunction with FI_MR_LOCAL", MRBasic | MRLocal, MRVirtAddr | MRAllocated | MRProvKey | MRLocal, nil},
		{"every mode bit", mrModeBits, mrModeBits, nil},
		{"FI_MR_BASIC: other mr_mode bit pairings are invalid", MRBasic | MRRaw, 0, ErrInvalid},
		{"FI_MR_BASIC with FI_MR_SCALABLE", MRBasic | MRScalable, 0, ErrInvalid},
		{"FI_MR_SCALABLE with a mode bit", MRScalable | MRLocal, 0, ErrInvalid},
		{"an unknown bit (FI_MR_HMEM is not in v1.8)", 1 << 10, 0, ErrInvalid},
	}
	for _, tc := range tests {
		d, err := OpenDomain(dev, DomainConfig{Mode: tc.mode, Cache: &mr.CacheConfig{}})
		wantErr(t, tc.name, err, tc.err)
		if err != nil {
			continue
		}
		if d.Mode() != tc.want {
			t.Errorf("%s: mode %#x, want %#x", tc.name, d.Mode(), tc.want)
		}
		wantErr(t, "Close", d.Close(), nil)
	}
	_, err := OpenDomain(dev, DomainConfig{IOVLimit: -1, Cache: &mr.CacheConfig{}})
	wantErr(t, "negative mr_iov_limit", err, ErrInvalid)
}

// TestRegattrRules checks the arguments of fi_mr_reg / fi_mr_regv /
// fi_mr_regattr and the ERRORS section of fi_mr(3).
func TestRegattrRules(t *testing.T) {
	dev := newDevice(t)
	scalable := openDomain(t, dev, DomainConfig{IOVLimit: 2})
	provKey := openDomain(t, dev, DomainConfig{Mode: MRProvKey})
	taken, err := scalable.Reg(make([]byte, 8), FIRemoteRead, 0, 0x500, 0, nil)
	wantErr(t, "Reg", err, nil)
	defer taken.Close()
	buf := func() [][]byte { return [][]byte{make([]byte, 64)} }
	tests := []struct {
		name  string
		d     *Domain
		attr  MRAttr
		flags Flags
		want  error
	}{
		{"all access bits", scalable, MRAttr{IOV: buf(), Access: accessFlags, RequestedKey: 1}, 0, nil},
		{"FI_RMA_EVENT flag", scalable, MRAttr{IOV: buf(), RequestedKey: 2}, FIRMAEvent, nil},
		{"FI_RMA_PMEM flag", scalable, MRAttr{IOV: buf(), RequestedKey: 3}, FIRMAPmem, nil},
		{"requested key 0 is a key in scalable mode", scalable, MRAttr{IOV: buf(), RequestedKey: 0}, 0, nil},
		{"iov up to mr_iov_limit", scalable, MRAttr{IOV: [][]byte{make([]byte, 8), make([]byte, 8)}, RequestedKey: 4}, 0, nil},
		{"FI_MR_PROV_KEY: provider keys, requested key 0 ignored", provKey, MRAttr{IOV: buf()}, 0, nil},

		{"-FI_EBADFLAGS: flags not supported", scalable, MRAttr{IOV: buf(), RequestedKey: 5}, 1 << 20, ErrBadFlags},
		{"unknown access bit", scalable, MRAttr{IOV: buf(), Access: Flags(1) << 14, RequestedKey: 6}, 0, ErrInvalid},
		{"offset is reserved for future use and must be 0", scalable, MRAttr{IOV: buf(), Offset: 8, RequestedKey: 7}, 0, ErrInvalid},
		{"no buffers", scalable, MRAttr{RequestedKey: 8}, 0, ErrInvalid},
		{"more buffers than mr_iov_limit", scalable, MRAttr{IOV: [][]byte{{1}, {2}, {3}}, RequestedKey: 9}, 0, ErrInvalid},
		{"an empty buffer in the iov", scalable, MRAttr{IOV: [][]byte{{1}, {}}, RequestedKey: 10}, 0, ErrInvalid},
		{"-FI_ENOKEY: the requested_key is already in use", scalable, MRAttr{IOV: buf(), RequestedKey: 0x500}, 0, ErrNoKey},
		{"-FI_EKEYREJECTED: out of the range supported (beyond 32 bits)", scalable, MRAttr{IOV: buf(), RequestedKey: 1 << 32}, 0, ErrKeyRejected},
		{"-FI_EKEYREJECTED: out of the range supported (a window key)", scalable, MRAttr{IOV: buf(), RequestedKey: 0x8000_0000}, 0, ErrKeyRejected},
		{"-FI_EKEYREJECTED: FI_MR_PROV_KEY does not support requested keys", provKey, MRAttr{IOV: buf(), RequestedKey: 0x600}, 0, ErrKeyRejected},
		{"auth key of the wrong size", scalable, MRAttr{IOV: buf(), RequestedKey: 11, AuthKey: []byte{1, 2, 3}}, 0, ErrInvalid},
		{"auth key naming no partition", scalable, MRAttr{IOV: buf(), RequestedKey: 12, AuthKey: []byte{0x80, 0}}, 0, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.d.Regattr(&tc.attr, tc.flags)
			wantErr(t, "Regattr", err, tc.want)
			if err != nil {
				return
			}
			defer m.Close()
			if tc.d == scalable && m.Key() != tc.attr.RequestedKey {
				t.Errorf("key %#x, want the requested %#x", m.Key(), tc.attr.RequestedKey)
			}
			if m.Desc() != m.Region().LKey() {
				t.Errorf("desc %#x, lkey %#x", m.Desc(), m.Region().LKey())
			}
		})
	}
}

// TestAccessMapping checks how fi_mr access becomes region access, as
// libfabric's verbs provider maps it.
func TestAccessMapping(t *testing.T) {
	tb := newDevice(t).Memory()
	pd, err := tb.AllocPD()
	wantErr(t, "AllocPD", err, nil)
	tests := []struct {
		fi   Flags
		want mr.Access
	}{
		{0, 0},
		{FISend | FIWrite, 0}, // local read only
		{FIRecv, mr.LocalWrite},
		{FIRead, mr.LocalWrite},
		{FIRemoteRead, mr.RemoteRead},
		{FIRemoteWrite, mr.LocalWrite | mr.RemoteWrite | mr.RemoteAtomic},
		{accessFlags, rw},
	}
	for _, tc := range tests {
		if got := tc.fi.verbs(); got != tc.want {
			t.Errorf("Flags(%#x).verbs() = %v, want %v", uint64(tc.fi), got, tc.want)
		}
		r, err := tb.Register(pd, make([]byte, 8), tc.fi.verbs())
		if err != nil {
			t.Errorf("Flags(%#x) maps to access the table refuses: %v", uint64(tc.fi), err)
			continue
		}
		wantErr(t, "Deregister", tb.Deregister(r), nil)
	}
}

// TestAddressing: "The resulting memory regions are accessible by peers
// starting at a base address of 0" in scalable mode; under FI_MR_VIRT_ADDR
// "peers ... specify the destination memory buffer using the target's
// virtual address".
func TestAddressing(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	for _, tc := range []struct {
		name      string
		mode      MRMode
		requested uint64
		virt      bool
	}{
		{"scalable: offsets from 0, application keys", 0, 0x700, false},
		{"FI_MR_VIRT_ADDR: virtual addresses", MRVirtAddr, 0x701, true},
		{"FI_MR_BASIC: virtual addresses, provider keys", MRBasic, 0, true},
	} {
		d := openDomain(t, dev, DomainConfig{Mode: tc.mode})
		iov := [][]byte{[]byte("0123456789"), []byte("abcdefghij")}
		m, err := d.Regv(iov, FIRemoteRead, 0, tc.requested, 0, nil)
		wantErr(t, tc.name, err, nil)
		if tc.requested != 0 && m.Key() != tc.requested {
			t.Errorf("%s: key %#x, want %#x", tc.name, m.Key(), tc.requested)
		}
		base := uint64(0)
		if tc.virt {
			base = addrOf(iov[0])
		}
		raw := make([]byte, RawKeySize)
		got, _, err := m.RawAttr(raw, 0)
		wantErr(t, "RawAttr", err, nil)
		if got != base || m.Region().Addr() != base {
			t.Errorf("%s: base address %#x, want %#x", tc.name, got, base)
		}
		// virtual address + offset, across the iov boundary.
		s, err := tb.Remote(uint32(m.Key()), base+8, 4, mr.RemoteRead, mr.Requester{PD: d.PD().Handle()})
		wantReason(t, tc.name, err, 0)
		out := make([]byte, 4)
		s.ReadAt(out, 0)
		s.Release()
		if string(out) != "89ab" {
			t.Errorf("%s: read %q, want %q", tc.name, out, "89ab")
		}
		wantErr(t, "Close", m.Close(), nil)
		wantErr(t, "Close twice", m.Close(), ErrInvalid)
		wantErr(t, "domain Close", d.Close(), nil)
	}
}

func TestRawKeys(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	d := openDomain(t, dev, DomainConfig{Mode: MRRaw | MRProvKey | MRVirtAddr})
	peer := openDomain(t, dev, DomainConfig{})
	buf := make([]byte, 64)
	m, err := d.Reg(buf, FIRemoteWrite, 0, 0, 0, nil)
	wantErr(t, "Reg", err, nil)
	// "If the FI_RAW_MR mode bit has been set for the domain, then the
	// memory key must be obtained using the fi_mr_raw_key function instead."
	if m.Key() != KeyNotAvail {
		t.Errorf("Key under FI_MR_RAW = %#x, want FI_KEY_NOTAVAIL", m.Key())
	}
	// "If the actual key is larger than what can fit into the buffer, it
	// will return -FI_ETOOSMALL. On output, key_size is set to the size of
	// the buffer needed."
	small := make([]byte, 3)
	_, size, err := m.RawAttr(small, 0)
	wantErr(t, "RawAttr into 3 bytes", err, ErrTooSmall)
	if size != RawKeySize {
		t.Errorf("key_size %d, want %d", size, RawKeySize)
	}
	_, _, err = m.RawAttr(make([]byte, 8), 1)
	wantErr(t, "RawAttr flags", err, ErrBadFlags)
	raw := make([]byte, 8)
	base, size, err := m.RawAttr(raw, 0)
	wantErr(t, "RawAttr", err, nil)
	if size != 4 || base != addrOf(buf) || binary.BigEndian.Uint32(raw) != m.Region().RKey() {
		t.Errorf("raw attr base %#x size %d key %x, want %#x 4 %#x", base, size, raw[:4], addrOf(buf), m.Region().RKey())
	}
	// The peer maps the raw key into a usable one.
	key, err := peer.MapRaw(base, raw[:size], 0)
	wantErr(t, "MapRaw", err, nil)
	if key != uint64(m.Region().RKey()) {
		t.Errorf("mapped key %#x, want %#x", key, m.Region().RKey())
	}
	s, err := tb.Remote(uint32(key), base, 8, mr.RemoteWrite, mr.Requester{PD: d.PD().Handle()})
	wantReason(t, "write with the mapped key", err, 0)
	s.Release()
	_, err = peer.MapRaw(base, raw[:3], 0)
	wantErr(t, "MapRaw of a short key", err, ErrInvalid)
	_, err = peer.MapRaw(base, raw[:4], 2)
	wantErr(t, "MapRaw flags", err, ErrBadFlags)
	// "All mapped keys must be freed before the corresponding domain is
	// closed."
	wantErr(t, "Close with a mapped key", peer.Close(), ErrBusy)
	wantErr(t, "UnmapKey", peer.UnmapKey(key), nil)
	wantErr(t, "UnmapKey twice", peer.UnmapKey(key), ErrInvalid)
	wantErr(t, "Close", peer.Close(), nil)
	wantErr(t, "Close a domain with an open MR", d.Close(), ErrBusy)
	wantErr(t, "MR Close", m.Close(), nil)
	wantErr(t, "Close", d.Close(), nil)
	wantErr(t, "Close twice", d.Close(), ErrInvalid)
	_, err = d.Reg(buf, 0, 0, 0, 0, nil)
	wantErr(t, "Reg on a closed domain", err, ErrInvalid)
}

// TestCounterBinding: "FI_REMOTE_WRITE Generates an event whenever a remote
// RMA write or atomic operation modifies the memory region", and the
// FI_MR_RMA_EVENT rules on enabling.
func TestCounterBinding(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	d := openDomain(t, dev, DomainConfig{Mode: MRRMAEvent})
	buf := aligned(64)
	m, err := d.Reg(buf, FIRemoteRead|FIRemoteWrite, 0, 0x900, FIRMAEvent, nil)
	wantErr(t, "Reg", err, nil)
	who := mr.Requester{PD: d.PD().Handle()}
	// "Such memory regions will be created in a disabled state".
	_, err = tb.Remote(0x900, 0, 8, mr.RemoteRead, who)
	wantReason(t, "access before enable", err, mr.ReasonDisabled)
	_, err = tb.Local(0x900, 0, 8, 0, d.PD().Handle())
	wantReason(t, "local access before enable", err, mr.ReasonDisabled)

	var c, other Counter
	wantErr(t, "bind with an unknown event flag", m.BindCounter(&c, FIRemoteRead), ErrBadFlags)
	wantErr(t, "bind counter", m.BindCounter(&c, FIRemoteWrite), nil)
	closed := new(Counter)
	closed.Close()
	wantErr(t, "bind a closed counter", m.BindCounter(closed, FIRemoteWrite), ErrInvalid)
	wantErr(t, "Enable", m.Enable(), nil)
	// "After calling fi_mr_enable(), no further resource bindings may be
	// made to the memory region."
	wantErr(t, "bind after enable", m.BindCounter(&other, FIRemoteWrite), ErrInvalid)
	wantErr(t, "Enable twice", m.Enable(), nil)

	ops := []struct {
		name string
		need mr.Access
		n    uint64
		want uint64
	}{
		{"a read does not count", mr.RemoteRead, 8, 0},
		{"a write counts", mr.RemoteWrite, 16, 1},
		{"an atomic counts", mr.RemoteAtomic, 8, 2},
		{"a zero-length write modifies nothing", mr.RemoteWrite, 0, 2},
		{"another write", mr.RemoteWrite, 1, 3},
	}
	for _, op := range ops {
		s, err := tb.Remote(0x900, 0, op.n, op.need, who)
		wantReason(t, op.name, err, 0)
		s.Release()
		if c.Value() != op.want {
			t.Errorf("%s: counter %d, want %d", op.name, c.Value(), op.want)
		}
	}
	_, err = tb.Remote(0x900, 64, 8, mr.RemoteWrite, who)
	wantReason(t, "a refused write", err, mr.ReasonRange)
	if c.Value() != 3 {
		t.Errorf("a refused write counted: %d", c.Value())
	}
	// "When closing the MR, there must be no opened endpoints or counters
	// associated with the MR ... the call will return -FI_EBUSY."
	wantErr(t, "Close with an open counter", m.Close(), ErrBusy)
	c.Close()
	wantErr(t, "Close", m.Close(), nil)

	// "applications must indicate if a memory region will be associated
	// with a completion counter as part of the region's creation".
	plain, err := d.Reg(buf, FIRemoteWrite, 0, 0x901, 0, nil)
	wantErr(t, "Reg without FI_RMA_EVENT", err, nil)
	wantErr(t, "bind a counter to it", plain.BindCounter(new(Counter), FIRemoteWrite), ErrInvalid)
	s, err := tb.Remote(0x901, 0, 8, mr.RemoteWrite, who)
	wantReason(t, "a region without FI_RMA_EVENT starts enabled", err, 0)
	s.Release()
	wantErr(t, "Close", plain.Close(), nil)
}

// TestEndpointMode: "Memory regions that are registered with the provider
// are created in a disabled state and must be bound to an endpoint prior to
// being enabled."
func TestEndpointMode(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	d := openDomain(t, dev, DomainConfig{Mode: MREndpoint})
	newEndpoint := func() *Endpoint {
		ep, err := NewEndpoint(d.PD(), EndpointConfig{})
		wantErr(t, "NewEndpoint", err, nil)
		return ep
	}
	m, err := d.Reg(make([]byte, 64), FIRemoteRead, 0, 0xa00, 0, nil)
	wantErr(t, "Reg", err, nil)
	ep, other := newEndpoint(), newEndpoint()
	who := mr.Requester{PD: d.PD().Handle(), QPN: ep.QP().Num()}
	_, err = tb.Remote(0xa00, 0, 8, mr.RemoteRead, who)
	wantReason(t, "before enable", err, mr.ReasonDisabled)
	wantErr(t, "enable before binding an endpoint", m.Enable(), ErrInvalid)
	wantErr(t, "flags should be 0", m.BindEndpoint(ep, 1), ErrBadFlags)
	wantErr(t, "BindEndpoint", m.BindEndpoint(ep, 0), nil)
	wantErr(t, "a second endpoint", m.BindEndpoint(other, 0), ErrInvalid)
	wantErr(t, "Enable", m.Enable(), nil)
	s, err := tb.Remote(0xa00, 0, 8, mr.RemoteRead, who)
	wantReason(t, "through the bound endpoint", err, 0)
	s.Release()
	_, err = tb.Remote(0xa00, 0, 8, mr.RemoteRead, mr.Requester{PD: d.PD().Handle(), QPN: other.QP().Num()})
	wantReason(t, "through another endpoint", err, mr.ReasonEndpoint)
	wantErr(t, "Close with an open endpoint", m.Close(), ErrBusy)
	wantErr(t, "endpoint Close", ep.Close(), nil)
	wantErr(t, "Close", m.Close(), nil)

	plain := openDomain(t, dev, DomainConfig{})
	m2, err := plain.Reg(make([]byte, 8), FIRemoteRead, 0, 0xa01, 0, nil)
	wantErr(t, "Reg", err, nil)
	wantErr(t, "endpoint binding without FI_MR_ENDPOINT", m2.BindEndpoint(other, 0), ErrInvalid)
	m3, err := d.Reg(make([]byte, 8), FIRemoteRead, 0, 0xa02, 0, nil)
	wantErr(t, "Reg", err, nil)
	wantErr(t, "bind a closed endpoint", m3.BindEndpoint(ep, 0), ErrInvalid)
	wantErr(t, "Close", m2.Close(), nil)
	wantErr(t, "Close", m3.Close(), nil)
	wantErr(t, "endpoint Close", other.Close(), nil)
}

// TestRefresh: "The refresh operation has the effect of disabling and
// re-enabling access to the registered region. Any operations from peers
// that attempt to access the region will fail while the refresh is
// occurring."
func TestRefresh(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	d := openDomain(t, dev, DomainConfig{Mode: MRMMUNotify})
	backing := make([]byte, 256)
	m, err := d.Regv([][]byte{backing[:64], backing[128:]}, FIRemoteRead, 0, 0xb00, 0, nil)
	wantErr(t, "Regv", err, nil)
	defer m.Close()
	who := mr.Requester{PD: d.PD().Handle()}
	var during error
	d.refreshHook = func() {
		_, during = tb.Remote(0xb00, 0, 8, mr.RemoteRead, who)
	}
	wantErr(t, "refresh of one buffer", m.Refresh([][]byte{backing[130:140]}, 0), nil)
	wantReason(t, "access while refreshing", during, mr.ReasonRefreshing)
	s, err := tb.Remote(0xb00, 0, 8, mr.RemoteRead, who)
	wantReason(t, "access after the refresh", err, 0)
	s.Release()
	wantErr(t, "refresh of the whole region", m.Refresh(nil, 0), nil)
	during = nil
	wantErr(t, "refresh of memory between the buffers", m.Refresh([][]byte{backing[64:80]}, 0), ErrInvalid)
	wantErr(t, "refresh straddling a buffer's end", m.Refresh([][]byte{backing[60:70]}, 0), ErrInvalid)
	if during != nil {
		t.Error("a refused refresh disabled the region")
	}
	wantErr(t, "refresh flags", m.Refresh(nil, 1), ErrBadFlags)
}

// TestAsyncRegistration: "Memory registration can complete asynchronous by
// binding the resource domain to an event queue using the FI_REG_MR flag
// ... The context specified with the registration request is returned with
// the completion event."
func TestAsyncRegistration(t *testing.T) {
	dev := newDevice(t)
	d := openDomain(t, dev, DomainConfig{})
	eq := make(chan Event, 4)
	wantErr(t, "BindEQ nil", d.BindEQ(nil), ErrInvalid)
	wantErr(t, "BindEQ", d.BindEQ(eq), nil)
	wantErr(t, "BindEQ twice", d.BindEQ(make(chan Event)), ErrInvalid)

	type ctx struct{ n int }
	m, err := d.Reg(make([]byte, 64), FIRemoteRead, 0, 0xc00, 0, &ctx{1})
	wantErr(t, "Reg", err, nil)
	if ev := <-eq; ev.Registration != m || ev.Err != nil || ev.Context.(*ctx).n != 1 {
		t.Errorf("event of the first registration: %+v", ev)
	}
	dup, err := d.Reg(make([]byte, 64), FIRemoteRead, 0, 0xc00, 0, &ctx{2})
	wantErr(t, "Reg of a key in use returns at once", err, nil)
	if ev := <-eq; ev.Registration != dup || !errors.Is(ev.Err, ErrNoKey) || ev.Context.(*ctx).n != 2 {
		t.Errorf("event of the duplicate key: %+v", ev)
	}
	// "An asynchronous event will not be generated unless the registration
	// call returns success (0)."
	_, err = d.Reg(make([]byte, 64), FIRemoteRead, 8, 0xc01, 0, &ctx{3})
	wantErr(t, "Reg with an offset fails synchronously", err, ErrInvalid)
	select {
	case ev := <-eq:
		t.Errorf("event for a failed call: %+v", ev)
	default:
	}
	if m.Key() != 0xc00 {
		t.Errorf("key after completion %#x", m.Key())
	}
	if dup.Key() != KeyNotAvail || dup.Region() != nil || !errors.Is(dup.Err(), ErrNoKey) {
		t.Errorf("failed registration: key %#x, region %v, err %v", dup.Key(), dup.Region(), dup.Err())
	}
	wantErr(t, "Enable a failed registration", dup.Enable(), ErrNoKey)
	wantErr(t, "Close a failed registration", dup.Close(), nil)
	wantErr(t, "Close", m.Close(), nil)
	wantErr(t, "domain Close", d.Close(), nil)
}

// TestPendingRegistration checks an MR before its asynchronous registration
// completes: "A return value of FI_KEY_NOTAVAIL will be returned if the
// registration has not completed".
func TestPendingRegistration(t *testing.T) {
	dev := newDevice(t)
	d := openDomain(t, dev, DomainConfig{})
	m := &Registration{d: d, pending: true}
	if m.Key() != KeyNotAvail || m.Desc() != 0 {
		t.Errorf("pending MR: key %#x desc %#x", m.Key(), m.Desc())
	}
	_, size, err := m.RawAttr(make([]byte, 8), 0)
	wantErr(t, "RawAttr", err, ErrAgain)
	if size != RawKeySize {
		t.Errorf("key_size %d", size)
	}
	wantErr(t, "BindCounter", m.BindCounter(new(Counter), FIRemoteWrite), ErrAgain)
	wantErr(t, "Enable", m.Enable(), ErrAgain)
	wantErr(t, "Close", m.Close(), ErrBusy)
}

// TestAuthKeys: "Only peer endpoints that are programmed to use the same
// authorization key may access the memory region. The domain authorization
// key will be used if the auth_key_size provided is 0." Auth keys are
// P_Keys, matched by the IBTA partition rule.
func TestAuthKeys(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	_, err := OpenDomain(dev, DomainConfig{AuthKey: []byte{1}, Cache: &mr.CacheConfig{}})
	wantErr(t, "domain auth key of one byte", err, ErrInvalid)
	d := openDomain(t, dev, DomainConfig{AuthKey: []byte{0x80, 0x12}})
	byDomain, err := d.Reg(make([]byte, 8), FIRemoteRead, 0, 0xd00, 0, nil)
	wantErr(t, "Reg", err, nil)
	defer byDomain.Close()
	own, err := d.Regattr(&MRAttr{IOV: [][]byte{make([]byte, 8)}, Access: FIRemoteRead, RequestedKey: 0xd01, AuthKey: []byte{0x00, 0x34}}, 0)
	wantErr(t, "Regattr", err, nil)
	defer own.Close()
	tests := []struct {
		name string
		key  uint32
		pkey uint16
		want mr.Reason
	}{
		{"the domain's key, full member", 0xd00, 0x8012, 0},
		{"the domain's partition as a limited member", 0xd00, 0x0012, 0},
		{"another partition", 0xd00, 0x8013, mr.ReasonPartition},
		{"the default P_Key is another partition", 0xd00, 0xffff, mr.ReasonPartition},
		{"the region's own key overrides the domain's", 0xd01, 0x8034, 0},
		{"the domain's key does not open the region's", 0xd01, 0x8012, mr.ReasonPartition},
		{"two limited members do not communicate", 0xd01, 0x0034, mr.ReasonPartition},
	}
	for _, tc := range tests {
		s, err := tb.Remote(tc.key, 0, 8, mr.RemoteRead, mr.Requester{PD: d.PD().Handle(), PKey: tc.pkey})
		wantReason(t, tc.name, err, tc.want)
		s.Release()
	}
	open := openDomain(t, dev, DomainConfig{})
	m, err := open.Reg(make([]byte, 8), FIRemoteRead, 0, 0xd02, 0, nil)
	wantErr(t, "Reg", err, nil)
	defer m.Close()
	for _, p := range []uint16{0xffff, 0x7fff, 0x8001} {
		s, err := tb.Remote(0xd02, 0, 8, mr.RemoteRead, mr.Requester{PD: open.PD().Handle(), PKey: p})
		wantReason(t, "no auth key: any partition", err, 0)
		s.Release()
	}
}

func TestDomainRegistersIntoTable(t *testing.T) {
	dev := newDevice(t)
	tb := dev.Memory()
	d := openDomain(t, dev, DomainConfig{Mode: MRLocal | MRVirtAddr | MRProvKey})
	buf := []byte("local buffer")
	m, err := d.Reg(buf, FIRecv|FISend, 0, 0, 0, nil)
	wantErr(t, "Reg", err, nil)
	defer m.Close()
	// FI_MR_LOCAL: "provide a valid mem_desc parameter into applicable data
	// transfer operations" – the descriptor is the lkey.
	s, err := tb.Local(m.Desc(), addrOf(buf), uint64(len(buf)), mr.LocalWrite, d.PD().Handle())
	wantReason(t, "Local with the descriptor", err, 0)
	got := make([]byte, len(buf))
	s.ReadAt(got, 0)
	s.Release()
	if !bytes.Equal(got, buf) {
		t.Errorf("read %q", got)
	}
	if m.Key() == KeyNotAvail || m.Key() > math.MaxUint32 {
		t.Errorf("provider key %#x", m.Key())
	}
}

// aligned returns n bytes starting on an 8-byte boundary.
func aligned(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:n]
}

// TestDomainCacheFromEnv: the domain reads the variables "as libfabric
// does" unless the Go API overrides them.
func TestDomainCacheFromEnv(t *testing.T) {
	t.Setenv("FI_MR_CACHE_MAX_COUNT", "7")
	t.Setenv("FI_MR_CACHE_MERGE_REGIONS", "yes")
	dev := newDevice(t)
	d, err := OpenDomain(dev, DomainConfig{})
	wantErr(t, "OpenDomain", err, nil)
	if got := d.Cache().Config(); got != (mr.CacheConfig{MaxCount: 7, MergeRegions: true}) {
		t.Errorf("cache config from the environment %+v", got)
	}
	over, err := OpenDomain(dev, DomainConfig{Cache: &mr.CacheConfig{MaxCount: 1}})
	wantErr(t, "OpenDomain", err, nil)
	if got := over.Cache().Config(); got != (mr.CacheConfig{MaxCount: 1}) {
		t.Errorf("overridden cache config %+v", got)
	}
}

// wantErr checks err against want (nil: no error), with errors.Is.
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// wantReason checks that err is the mr.Reason want (0: no error).
func wantReason(t testing.TB, what string, err error, want mr.Reason) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: refused: %v", what, err)
		}
		return
	}
	var got mr.Reason
	if !errors.As(err, &got) || got != want {
		t.Fatalf("%s: error %v, want reason %q", what, err, want)
	}
}

const rw = mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite | mr.RemoteAtomic
