package fabric

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
)

// MRMode is the domain's mr_mode (struct fi_domain_attr.mr_mode), with
// libfabric's values.
type MRMode uint32

// The mr_mode bits of fi_mr(3). No bit at all is scalable registration.
const (
	MRBasic     MRMode = 1      // FI_MR_BASIC: VIRT_ADDR | ALLOCATED | PROV_KEY (libfabric <= 1.4)
	MRScalable  MRMode = 2      // FI_MR_SCALABLE: no bits (libfabric <= 1.4)
	MRLocal     MRMode = 1 << 2 // FI_MR_LOCAL: local buffers need a registered descriptor
	MRRaw       MRMode = 1 << 3 // FI_MR_RAW: keys go through fi_mr_raw_attr / fi_mr_map_raw
	MRVirtAddr  MRMode = 1 << 4 // FI_MR_VIRT_ADDR: peers address regions by virtual address
	MRAllocated MRMode = 1 << 5 // FI_MR_ALLOCATED: registered memory is backed by pages
	MRProvKey   MRMode = 1 << 6 // FI_MR_PROV_KEY: the provider chooses keys
	MRMMUNotify MRMode = 1 << 7 // FI_MR_MMU_NOTIFY: fi_mr_refresh after page changes
	MRRMAEvent  MRMode = 1 << 8 // FI_MR_RMA_EVENT: counter-bound regions start disabled
	MREndpoint  MRMode = 1 << 9 // FI_MR_ENDPOINT: regions belong to an endpoint

	mrModeBits = MRLocal | MRRaw | MRVirtAddr | MRAllocated | MRProvKey | MRMMUNotify | MRRMAEvent | MREndpoint
)

// KeyNotAvail is FI_KEY_NOTAVAIL, what MR.Key returns when no key can be
// given.
const KeyNotAvail = math.MaxUint64

// RawKeySize is the size of a raw key (mr_key_size): the 32-bit R_Key in
// network byte order, as it travels in the RETH.
const RawKeySize = 4

// normalize turns the legacy modes into mode bits and checks the pairings
// fi_mr(3) allows: "FI_MR_BASIC must either be set alone, or in conjunction
// with FI_MR_LOCAL. Other mr_mode bit pairings are invalid." FI_MR_SCALABLE,
// the other legacy value, is likewise taken alone.
func (m MRMode) normalize() (MRMode, error) {
	switch {
	case m&MRBasic != 0:
		if m&^(MRBasic|MRLocal) != 0 {
			return 0, fmt.Errorf("FI_MR_BASIC with mr_mode %#x: %w", uint32(m&^(MRBasic|MRLocal)), ErrInvalid)
		}
		return m&MRLocal | MRVirtAddr | MRAllocated | MRProvKey, nil
	case m&MRScalable != 0:
		if m != MRScalable {
			return 0, fmt.Errorf("FI_MR_SCALABLE with mr_mode %#x: %w", uint32(m&^MRScalable), ErrInvalid)
		}
		return 0, nil
	case m&^mrModeBits != 0:
		return 0, fmt.Errorf("unknown mr_mode bits %#x: %w", uint32(m&^mrModeBits), ErrInvalid)
	}
	return m, nil
}

// DomainConfig configures a Domain.
type DomainConfig struct {
	// Mode is the domain's mr_mode.
	Mode MRMode
	// AuthKey is the domain's authorization key, used by registrations that
	// give none (see MRAttr.AuthKey).
	AuthKey []byte
	// IOVLimit is mr_iov_limit, the most buffers one region may have; zero
	// means DefaultIOVLimit.
	IOVLimit int
	// Cache configures the registration cache; nil reads FI_MR_CACHE_* from
	// the environment, as libfabric does.
	Cache *mr.CacheConfig
}

// DefaultIOVLimit is the default mr_iov_limit.
const DefaultIOVLimit = 16

// Domain is the fi_mr face of a device's region table: a libfabric
// resource domain with its own protection domain and mr_mode. It registers regions the way
// fi_mr_reg / fi_mr_regv / fi_mr_regattr do and maps raw keys.
//
// What each mr_mode bit does here:
//
//   - none (scalable): regions are addressed from 0 and the application
//     chooses keys (RequestedKey);
//   - MRVirtAddr: regions are addressed by the virtual address of their
//     first buffer;
//   - MRProvKey: the table chooses keys; a requested key is rejected;
//   - MRRaw: Key returns KeyNotAvail, keys travel through RawAttr and
//     MapRaw;
//   - MRRMAEvent: regions registered with FIRMAEvent start disabled until
//     Enable, and only they may be bound to counters;
//   - MREndpoint: every region starts disabled, must be bound to an
//     endpoint before Enable, and is then reachable only through it;
//   - MRMMUNotify: Refresh is required after the pages change; it disables
//     the region while it runs;
//   - MRLocal: local buffers need a descriptor (Desc, checked by
//     mr.Table.Local); without it the NIC serves local buffers through the
//     domain's registration Cache;
//   - MRAllocated: always true of softnic's memory: a buffer is a Go slice
//     or an arena, backed when it is registered.
type Domain struct {
	t        *mr.Table
	pd       *nic.PD
	mode     MRMode
	pkey     uint16
	iovLimit int
	cache    *mr.Cache

	mu     sync.Mutex
	closed bool
	mrs    int            // open MRs, including pending ones
	mapped map[uint64]int // fi_mr_map_raw keys not yet unmapped
	eq     chan<- Event   // set by BindEQ: registrations complete asynchronously
	// refreshHook runs while a refresh has the region disabled; tests use
	// it to watch accesses fail meanwhile.
	refreshHook func()
}

// OpenDomain opens a domain on dev's region table with a new protection
// domain: QPs created from that PD (Domain.PD) reach the domain's regions,
// with the mr_mode, key and endpoint rules the domain enforces. An attached
// device's table is the daemon's: it has no fi_mr domain
// (ErrNotSupported).
func OpenDomain(dev *nic.Device, cfg DomainConfig) (*Domain, error) {
	select {
	case <-dev.Done():
		return nil, ErrClosed
	default:
	}
	t := dev.Memory()
	if t == nil {
		return nil, fmt.Errorf("an fi_mr domain of an attached device: %w", ErrNotSupported)
	}
	mode, err := cfg.Mode.normalize()
	if err != nil {
		return nil, err
	}
	var pkey uint16
	if len(cfg.AuthKey) != 0 {
		if pkey, err = authKeyPKey(cfg.AuthKey); err != nil {
			return nil, err
		}
	}
	if cfg.IOVLimit < 0 {
		return nil, fmt.Errorf("mr_iov_limit %d: %w", cfg.IOVLimit, ErrInvalid)
	}
	ccfg := cfg.Cache
	if ccfg == nil {
		c, err := mr.CacheConfigFromEnv()
		if err != nil {
			// libfabric ignores a malformed variable, keeping its default.
			t.Logger().Warn("registration cache environment", slog.Any("error", err))
		}
		ccfg = &c
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	d := &Domain{t: t, pd: pd, mode: mode, pkey: pkey, iovLimit: cfg.IOVLimit, mapped: make(map[uint64]int)}
	if d.iovLimit == 0 {
		d.iovLimit = DefaultIOVLimit
	}
	d.cache = mr.NewCache(t, pd.Handle(), mr.LocalWrite, *ccfg)
	return d, nil
}

// authKeyPKey maps an fi_mr authorization key onto an InfiniBand partition
// key. Authorization keys "limit communication between endpoints. Only peer
// endpoints that are programmed to use the same authorization key may
// access the memory region" – which is what IB partitions do: a domain or
// region auth key is 2 bytes, a P_Key in network byte order, and a remote
// access is granted only when the request's BTH P_Key matches it by the
// IBTA rule (same partition, at least one full member). P_Keys whose
// partition is 0 (0x0000, 0x8000) are invalid.
func authKeyPKey(k []byte) (uint16, error) {
	if len(k) != 2 {
		return 0, fmt.Errorf("auth key of %d bytes, want a 2-byte P_Key: %w", len(k), ErrInvalid)
	}
	p := binary.BigEndian.Uint16(k)
	if p&0x7fff == 0 {
		return 0, fmt.Errorf("auth key P_Key %#04x: %w", p, ErrInvalid)
	}
	return p, nil
}

// PD returns the domain's protection domain; QPs of the domain use it.
func (d *Domain) PD() *nic.PD { return d.pd }

// Mode returns the domain's mr_mode, with FI_MR_BASIC expanded into its
// bits and FI_MR_SCALABLE into none.
func (d *Domain) Mode() MRMode { return d.mode }

// Cache returns the domain's registration cache.
func (d *Domain) Cache() *mr.Cache { return d.cache }

// Event is the completion of an asynchronous registration, as read from an
// event queue bound with FI_REG_MR.
type Event struct {
	Registration *Registration
	Context      any   // the registration's context
	Err          error // nil on success
}

// BindEQ makes registrations complete asynchronously (fi_domain_bind with
// FI_REG_MR): the registration calls return at once and each result arrives
// on eq. eq must be read; a domain binds one queue.
func (d *Domain) BindEQ(eq chan<- Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case eq == nil:
		return fmt.Errorf("nil event queue: %w", ErrInvalid)
	case d.eq != nil:
		return fmt.Errorf("domain already bound to an event queue: %w", ErrInvalid)
	}
	d.eq = eq
	return nil
}

// MRAttr is struct fi_mr_attr.
type MRAttr struct {
	IOV          [][]byte // the buffers, one region with one contiguous address space
	Access       Flags    // the access bits
	Offset       uint64   // reserved, must be 0
	RequestedKey uint64
	Context      any
	// AuthKey is the region's authorization key (see OpenDomain's mapping
	// onto P_Keys); empty uses the domain's.
	AuthKey []byte
}

// Registration is an fi_mr memory region (struct fid_mr): buffers
// registered in a Domain. It is not nic.MR, the verbs region (ibv_mr), but
// stands on an mr.Region as nic.MR does.
type Registration struct {
	d      *Domain
	ctx    any
	flags  Flags
	region atomic.Pointer[mr.Region] // nil until the registration completes
	err    error                     // an asynchronous failure, set before the event is sent

	mu       sync.Mutex
	pending  bool
	enabled  bool
	closed   bool
	counters []*Counter
	ep       *Endpoint // bound under FI_MR_ENDPOINT
}

// Reg registers buf (fi_mr_reg).
func (d *Domain) Reg(buf []byte, access Flags, offset, requestedKey uint64, flags Flags, context any) (*Registration, error) {
	return d.Regattr(&MRAttr{IOV: [][]byte{buf}, Access: access, Offset: offset, RequestedKey: requestedKey, Context: context}, flags)
}

// Regv registers several buffers as one region (fi_mr_regv): peers see
// their concatenation as one contiguous range.
func (d *Domain) Regv(iov [][]byte, access Flags, offset, requestedKey uint64, flags Flags, context any) (*Registration, error) {
	return d.Regattr(&MRAttr{IOV: iov, Access: access, Offset: offset, RequestedKey: requestedKey, Context: context}, flags)
}

// Regattr registers a region described by attr (fi_mr_regattr).
//
// Errors: ErrBadFlags for flags other than FIRMAEvent and FIRMAPmem;
// ErrInvalid for unknown access bits, a non-zero offset ("reserved for
// future use and must be 0"), no buffers or more than the domain's
// mr_iov_limit, an empty buffer or a malformed auth key; ErrKeyRejected for
// a requested key beyond 32 bits or, under FI_MR_PROV_KEY, any requested
// key but 0; ErrNoKey for a requested key already in use. With an event
// queue bound, the last two arrive in the Event instead.
//
// The region is addressed by virtual address under FI_MR_VIRT_ADDR (the
// first buffer's address) and from 0 otherwise. Under FI_MR_RMA_EVENT a
// region registered with FIRMAEvent, and under FI_MR_ENDPOINT every region,
// starts disabled until Enable.
func (d *Domain) Regattr(attr *MRAttr, flags Flags) (*Registration, error) {
	spec, err := d.spec(attr, flags)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("domain closed: %w", ErrInvalid)
	}
	d.mrs++
	eq := d.eq
	d.mu.Unlock()

	m := &Registration{d: d, ctx: attr.Context, flags: flags}
	if eq != nil {
		// "the mr output parameter will be written before any event
		// associated with the operation may be read by the application"
		m.pending = true
		go m.complete(spec, eq)
		return m, nil
	}
	r, err := d.t.RegisterWith(d.pd.Handle(), spec)
	if err != nil {
		d.mu.Lock()
		d.mrs--
		d.mu.Unlock()
		return nil, err
	}
	m.region.Store(r)
	return m, nil
}

// complete runs an asynchronous registration and reports it on eq.
func (m *Registration) complete(spec mr.RegOptions, eq chan<- Event) {
	r, err := m.d.t.RegisterWith(m.d.pd.Handle(), spec)
	m.mu.Lock()
	m.pending = false
	m.err = err
	if err == nil {
		m.region.Store(r)
	}
	m.mu.Unlock()
	eq <- Event{Registration: m, Context: m.ctx, Err: err}
}

// spec checks a registration request and turns it into a table
// registration.
func (d *Domain) spec(attr *MRAttr, flags Flags) (mr.RegOptions, error) {
	spec := mr.RegOptions{Segments: attr.IOV, PKey: d.pkey}
	switch {
	case flags&^regFlags != 0:
		return spec, fmt.Errorf("flags %#x: %w", uint64(flags&^regFlags), ErrBadFlags)
	case attr.Access&^accessFlags != 0:
		return spec, fmt.Errorf("access bits %#x: %w", uint64(attr.Access&^accessFlags), ErrInvalid)
	case attr.Offset != 0:
		return spec, fmt.Errorf("offset %d, must be 0: %w", attr.Offset, ErrInvalid)
	case len(attr.IOV) == 0 || len(attr.IOV) > d.iovLimit:
		return spec, fmt.Errorf("%d buffers, mr_iov_limit %d: %w", len(attr.IOV), d.iovLimit, ErrInvalid)
	case d.mode&MRProvKey != 0 && attr.RequestedKey != 0:
		return spec, fmt.Errorf("requested key %#x under FI_MR_PROV_KEY: %w", attr.RequestedKey, ErrKeyRejected)
	case attr.RequestedKey > math.MaxUint32:
		return spec, fmt.Errorf("requested key %#x wider than the 32-bit R_Key: %w", attr.RequestedKey, ErrKeyRejected)
	}
	if len(attr.AuthKey) != 0 {
		p, err := authKeyPKey(attr.AuthKey)
		if err != nil {
			return spec, err
		}
		spec.PKey = p
	}
	spec.Access = attr.Access.verbs()
	if d.mode&MRVirtAddr == 0 {
		// "The resulting memory regions are accessible by peers starting
		// at a base address of 0."
		spec.Access |= mr.ZeroBased
	}
	if d.mode&MRProvKey == 0 {
		spec.HasKey, spec.Key = true, uint32(attr.RequestedKey)
	}
	spec.Disabled = d.mode&MREndpoint != 0 || (d.mode&MRRMAEvent != 0 && flags&FIRMAEvent != 0)
	return spec, nil
}

// Region returns the table region behind m, or nil while its registration
// is pending or after it failed.
func (m *Registration) Region() *mr.Region { return m.region.Load() }

// Err returns the error of a failed asynchronous registration.
func (m *Registration) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Desc returns the local memory descriptor (fi_mr_desc): the region's lkey,
// for work requests under FI_MR_LOCAL; 0 until the registration completes.
func (m *Registration) Desc() uint32 {
	if r := m.region.Load(); r != nil {
		return r.LKey()
	}
	return 0
}

// Key returns the remote key (fi_mr_key), or KeyNotAvail while the
// registration has not completed or when the domain uses FI_MR_RAW ("the
// memory key must be obtained using the fi_mr_raw_key function instead").
func (m *Registration) Key() uint64 {
	r := m.region.Load()
	if r == nil || m.d.mode&MRRaw != 0 {
		return KeyNotAvail
	}
	return uint64(r.RKey())
}

// RawAttr returns the region's base address and writes its raw key into
// rawKey (fi_mr_raw_attr). It always returns the raw key size; if rawKey is
// shorter it fails with ErrTooSmall. The base address is the one peers
// target: the region's virtual address under FI_MR_VIRT_ADDR, else 0. flags
// must be 0 (ErrBadFlags); a pending registration gives ErrAgain.
func (m *Registration) RawAttr(rawKey []byte, flags uint64) (baseAddr uint64, keySize int, err error) {
	if flags != 0 {
		return 0, RawKeySize, fmt.Errorf("raw_attr flags %#x: %w", flags, ErrBadFlags)
	}
	r := m.region.Load()
	if r == nil {
		return 0, RawKeySize, fmt.Errorf("registration not complete: %w", ErrAgain)
	}
	if len(rawKey) < RawKeySize {
		return 0, RawKeySize, fmt.Errorf("raw key buffer of %d bytes, need %d: %w", len(rawKey), RawKeySize, ErrTooSmall)
	}
	binary.BigEndian.PutUint32(rawKey, r.RKey())
	return r.Addr(), RawKeySize, nil
}

// MapRaw converts a peer's raw key into a key usable in data transfers
// (fi_mr_map_raw). Every mapped key must be released with UnmapKey before
// the domain closes. flags must be 0 (ErrBadFlags); a raw key of the wrong
// size is ErrInvalid.
func (d *Domain) MapRaw(baseAddr uint64, rawKey []byte, flags uint64) (uint64, error) {
	if flags != 0 {
		return 0, fmt.Errorf("map_raw flags %#x: %w", flags, ErrBadFlags)
	}
	if len(rawKey) != RawKeySize {
		return 0, fmt.Errorf("raw key of %d bytes, want %d: %w", len(rawKey), RawKeySize, ErrInvalid)
	}
	key := uint64(binary.BigEndian.Uint32(rawKey))
	d.mu.Lock()
	d.mapped[key]++
	d.mu.Unlock()
	return key, nil
}

// UnmapKey releases a key returned by MapRaw (fi_mr_unmap_key); a key not
// mapped is ErrInvalid.
func (d *Domain) UnmapKey(key uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.mapped[key]
	if n == 0 {
		return fmt.Errorf("key %#x not mapped: %w", key, ErrInvalid)
	}
	if n == 1 {
		delete(d.mapped, key)
	} else {
		d.mapped[key] = n - 1
	}
	return nil
}

// Counter is a completion counter (fid_cntr) that regions bound with
// FI_REMOTE_WRITE increment on every remote write or atomic that modifies
// them. The zero value is ready to use.
type Counter struct {
	n      atomic.Uint64
	closed atomic.Bool
}

// Value returns the counter's value.
func (c *Counter) Value() uint64 { return c.n.Load() }

// Close closes the counter; regions bound to it can then be closed.
func (c *Counter) Close() { c.closed.Store(true) }

// usableLocked returns m's region, or why m cannot be used.
func (m *Registration) usableLocked() (*mr.Region, error) {
	switch {
	case m.closed:
		return nil, fmt.Errorf("region closed: %w", ErrInvalid)
	case m.pending:
		return nil, fmt.Errorf("registration not complete: %w", ErrAgain)
	case m.err != nil:
		return nil, fmt.Errorf("registration failed: %w", m.err)
	}
	return m.region.Load(), nil
}

// BindCounter binds c to m (fi_mr_bind with a counter). events must be
// FIRemoteWrite ("Generates an event whenever a remote RMA write or atomic
// operation modifies the memory region"); other bits are ErrBadFlags.
// Binding after Enable, or under FI_MR_RMA_EVENT to a region registered
// without FIRMAEvent, or to a closed counter, is ErrInvalid.
func (m *Registration) BindCounter(c *Counter, events Flags) error {
	if events&^FIRemoteWrite != 0 {
		return fmt.Errorf("counter events %#x: %w", uint64(events&^FIRemoteWrite), ErrBadFlags)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.usableLocked()
	switch {
	case err != nil:
		return err
	case m.enabled:
		// "After calling fi_mr_enable(), no further resource bindings may
		// be made to the memory region."
		return fmt.Errorf("bind after enable: %w", ErrInvalid)
	case m.d.mode&MRRMAEvent != 0 && m.flags&FIRMAEvent == 0:
		return fmt.Errorf("counter bound to a region registered without FI_RMA_EVENT: %w", ErrInvalid)
	case c.closed.Load():
		return fmt.Errorf("counter closed: %w", ErrInvalid)
	}
	m.counters = append(m.counters, c)
	m.publishLocked(r)
	return nil
}

// BindEndpoint binds m to ep (fi_mr_bind with an endpoint), which
// FI_MR_ENDPOINT requires before Enable: remote accesses then reach the
// region only through ep's QP, others fail with mr.ReasonEndpoint. flags
// must be 0 ("When binding the memory region to an endpoint, flags should
// be 0"). Outside FI_MR_ENDPOINT, after Enable, to a second endpoint or to
// a closed one it is ErrInvalid.
func (m *Registration) BindEndpoint(ep *Endpoint, flags uint64) error {
	if flags != 0 {
		return fmt.Errorf("endpoint bind flags %#x: %w", flags, ErrBadFlags)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.usableLocked()
	switch {
	case err != nil:
		return err
	case m.d.mode&MREndpoint == 0:
		return fmt.Errorf("endpoint binding without FI_MR_ENDPOINT: %w", ErrInvalid)
	case m.enabled:
		return fmt.Errorf("bind after enable: %w", ErrInvalid)
	case m.ep != nil:
		return fmt.Errorf("region already bound to endpoint %#x: %w", m.ep.qp.Num(), ErrInvalid)
	case ep.isClosed():
		return fmt.Errorf("endpoint closed: %w", ErrInvalid)
	}
	m.ep = ep
	m.publishLocked(r)
	return nil
}

// publishLocked hands m's bindings to the table's access check.
func (m *Registration) publishLocked(r *mr.Region) {
	b := &mr.Binding{Counters: make([]*atomic.Uint64, len(m.counters))}
	for i, c := range m.counters {
		b.Counters[i] = &c.n
	}
	if m.ep != nil {
		b.Endpoint, b.EndpointQPN = true, m.ep.qp.Num()
	}
	r.Bind(b)
}

// Enable enables m (fi_mr_enable): regions created disabled (FI_MR_RMA_EVENT
// with FIRMAEvent, FI_MR_ENDPOINT) refuse every access until then. Under
// FI_MR_ENDPOINT the region must be bound to an endpoint first
// (ErrInvalid). Enabling an enabled region does nothing.
func (m *Registration) Enable() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.usableLocked()
	if err != nil {
		return err
	}
	if m.d.mode&MREndpoint != 0 && m.ep == nil {
		return fmt.Errorf("enable before binding an endpoint: %w", ErrInvalid)
	}
	m.enabled = true
	r.Enable()
	return nil
}

// Refresh tells the provider that the pages behind the buffers of iov (all
// of the region when iov is empty) may have changed (fi_mr_refresh), which
// FI_MR_MMU_NOTIFY requires. "The refresh operation has the effect of
// disabling and re-enabling access to the registered region": accesses
// fail with ReasonRefreshing while it runs. softnic's region memory is
// pinned or NIC-owned and cannot change under a registration, so once the
// buffers are checked to lie inside the region there is nothing to
// re-translate. A buffer outside the region is ErrInvalid; flags must be 0.
func (m *Registration) Refresh(iov [][]byte, flags uint64) error {
	if flags != 0 {
		return fmt.Errorf("refresh flags %#x: %w", flags, ErrBadFlags)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.usableLocked()
	if err != nil {
		return err
	}
	for i, b := range iov {
		if !holds(r, b) {
			return fmt.Errorf("refresh buffer %d is not in the region: %w", i, ErrInvalid)
		}
	}
	r.SetRefreshing(true)
	if m.d.refreshHook != nil {
		m.d.refreshHook()
	}
	r.SetRefreshing(false)
	return nil
}

// holds reports whether b lies inside one of r's buffers.
func holds(r *mr.Region, b []byte) bool {
	if len(b) == 0 {
		return false
	}
	start, end := addrOf(b), addrOf(b)+uint64(len(b))
	for _, seg := range r.Segments() {
		if start >= addrOf(seg) && end <= addrOf(seg)+uint64(len(seg)) {
			return true
		}
	}
	return false
}

// Close deregisters m (fi_close). "When closing the MR, there must be no
// opened endpoints or counters associated with the MR": while one is still
// open, or the registration is pending, or a memory window is bound, it
// fails with ErrBusy. Closing a region whose asynchronous registration
// failed only releases it.
func (m *Registration) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("region already closed: %w", ErrInvalid)
	case m.pending:
		return fmt.Errorf("registration not complete: %w", ErrBusy)
	}
	for _, c := range m.counters {
		if !c.closed.Load() {
			return fmt.Errorf("a bound counter is open: %w", ErrBusy)
		}
	}
	if m.ep != nil && !m.ep.isClosed() {
		return fmt.Errorf("bound endpoint %#x is open: %w", m.ep.qp.Num(), ErrBusy)
	}
	if r := m.region.Load(); r != nil {
		if err := m.d.t.Deregister(r); err != nil {
			return err
		}
	}
	m.closed = true
	m.d.mu.Lock()
	m.d.mrs--
	m.d.mu.Unlock()
	return nil
}

// Close closes the domain. It fails with ErrBusy while regions are open,
// raw keys are still mapped ("All mapped keys must be freed before the
// corresponding domain is closed") or cached registrations are in use.
func (d *Domain) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return fmt.Errorf("domain already closed: %w", ErrInvalid)
	case d.mrs != 0:
		return fmt.Errorf("%d regions open: %w", d.mrs, ErrBusy)
	case len(d.mapped) != 0:
		return fmt.Errorf("%d raw keys mapped: %w", len(d.mapped), ErrBusy)
	}
	if err := d.cache.Close(); err != nil {
		return err
	}
	if err := d.pd.Dealloc(); err != nil {
		return err
	}
	d.closed = true
	return nil
}
