package mr

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
)

// CacheConfig sizes a registration cache, as fi_mr(3)'s FI_MR_CACHE_*
// variables do.
type CacheConfig struct {
	// MaxSize bounds the bytes of all cached regions; 0 is unlimited
	// (FI_MR_CACHE_MAX_SIZE).
	MaxSize uint64
	// MaxCount bounds the number of cached regions; 0 disables caching
	// (FI_MR_CACHE_MAX_COUNT).
	MaxCount int
	// MergeRegions merges adjacent or overlapping regions into one
	// (FI_MR_CACHE_MERGE_REGIONS).
	MergeRegions bool
}

// DefaultCacheMaxCount is the number of cached regions when
// FI_MR_CACHE_MAX_COUNT is not set: "If not set, a default limit is
// chosen"; libfabric's util cache chooses 1024.
const DefaultCacheMaxCount = 1024

// CacheConfigFromEnv reads FI_MR_CACHE_MAX_SIZE, FI_MR_CACHE_MAX_COUNT and
// FI_MR_CACHE_MERGE_REGIONS. Unset variables keep the man page's defaults
// (unlimited size, DefaultCacheMaxCount, no merging); a malformed one is
// reported and keeps its default too.
func CacheConfigFromEnv() (CacheConfig, error) {
	cfg := CacheConfig{MaxCount: DefaultCacheMaxCount}
	var errs []error
	if v, ok := os.LookupEnv("FI_MR_CACHE_MAX_SIZE"); ok {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("FI_MR_CACHE_MAX_SIZE=%q: %w", v, ErrInvalid))
		} else {
			cfg.MaxSize = n
		}
	}
	if v, ok := os.LookupEnv("FI_MR_CACHE_MAX_COUNT"); ok {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 31)
		if err != nil {
			errs = append(errs, fmt.Errorf("FI_MR_CACHE_MAX_COUNT=%q: %w", v, ErrInvalid))
		} else {
			cfg.MaxCount = int(n)
		}
	}
	if v, ok := os.LookupEnv("FI_MR_CACHE_MERGE_REGIONS"); ok {
		// "If this variable is set to true, yes, or 1"; libfabric's boolean
		// parameters also take on/off and the negative words.
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "yes", "1", "on":
			cfg.MergeRegions = true
		case "false", "no", "0", "off":
		default:
			errs = append(errs, fmt.Errorf("FI_MR_CACHE_MERGE_REGIONS=%q: %w", v, ErrInvalid))
		}
	}
	return cfg, errors.Join(errs...)
}

// Cache is a memory registration cache: it keeps regions registered after
// their last use so that the same buffers are not registered again on every
// transfer, as libfabric providers do for applications that do not
// register their buffers (no FI_MR_LOCAL). Unused regions are evicted least
// recently used first when the count or size limit is reached; when every
// cached region is in use a new one is registered uncached.
type Cache struct {
	t      *Table
	pd     PDHandle
	access Access
	cfg    CacheConfig

	mu     sync.Mutex
	closed bool
	index  addrIndex // cached entries by address
	seq    uint64
	lru    CacheEntry // sentinel of the list of unused cached entries, oldest first
	count  int        // cached entries
	size   uint64     // bytes of cached entries
	out    int        // entries in use, cached or not
	// lruCount and lruBytes are the cached entries not in use: what
	// eviction can free.
	lruCount int
	lruBytes uint64
	stats    CacheStats
}

// CacheStats are a cache's counters.
type CacheStats struct {
	Hits, Misses uint64
	Evictions    uint64 // cached regions deregistered to make room
	Merges       uint64 // cached regions merged into a larger one
	Uncached     uint64 // registrations made outside the cache because it was full
	Entries      int
	Bytes        uint64
}

// CacheEntry is a registration handed out by a cache: a region holding the
// buffer asked for, in use until Put.
type CacheEntry struct {
	c          *Cache
	r          *Region
	buf        []byte
	ext        extent
	uses       int
	cached     bool
	prev, next *CacheEntry // LRU links while unused and cached
}

// NewCache returns a cache registering regions of pd with access.
func NewCache(t *Table, pd PDHandle, access Access, cfg CacheConfig) *Cache {
	c := &Cache{t: t, pd: pd, access: access, cfg: cfg}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// Region returns the entry's region; the buffer given to Get lies in it.
func (e *CacheEntry) Region() *Region { return e.r }

// Get returns a registration holding buf, from the cache when a cached
// region holds it, else newly registered (and cached if there is room).
// Release it with Put.
func (c *Cache) Get(buf []byte) (*CacheEntry, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("empty buffer: %w", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("cache closed: %w", ErrInvalid)
	}
	start := addrOf(buf)
	if ext := c.index.find(start, uint64(len(buf)), findAny, 0); ext != nil {
		e := ext.entry
		if e.uses == 0 {
			c.unlinkLocked(e)
		}
		e.uses++
		c.out++
		c.stats.Hits++
		return e, nil
	}
	c.stats.Misses++
	reg := buf
	if c.cfg.MergeRegions && c.cfg.MaxCount > 0 {
		reg = c.mergeLocked(buf)
	}
	r, err := c.t.Register(c.pd, reg, c.access)
	if err != nil {
		return nil, err
	}
	e := &CacheEntry{c: c, r: r, buf: reg, uses: 1}
	e.ext = extent{start: addrOf(reg), end: addrOf(reg) + uint64(len(reg)), entry: e}
	c.admitLocked(e)
	c.out++
	return e, nil
}

// mergeLocked returns the buffer covering buf and every cached region
// adjacent to or overlapping it, and takes those regions out of the cache.
// Regions can only merge inside one allocation (a Go array or an arena),
// where one slice can cover them all; otherwise buf is returned alone.
func (c *Cache) mergeLocked(buf []byte) []byte {
	start, end := addrOf(buf), addrOf(buf)+uint64(len(buf))
	var near []*CacheEntry
	c.index.overlapping(start, end, func(x *extent) bool {
		near = append(near, x.entry)
		return true
	})
	if len(near) == 0 {
		return buf
	}
	lo, hi := start, end
	for _, e := range near {
		lo, hi = min(lo, e.ext.start), max(hi, e.ext.end)
	}
	// A slice starting at lo reaches as far as its capacity: the end of its
	// allocation.
	var base []byte
	for _, b := range append([][]byte{buf}, bufs(near)...) {
		if addrOf(b) == lo && cap(b) > cap(base) {
			base = b
		}
	}
	if uint64(cap(base)) < hi-lo {
		return buf
	}
	for _, e := range near {
		c.dropLocked(e)
		c.stats.Merges++
	}
	return base[:hi-lo]
}

func bufs(es []*CacheEntry) [][]byte {
	b := make([][]byte, len(es))
	for i, e := range es {
		b[i] = e.buf
	}
	return b
}

// admitLocked caches a new entry if the limits allow, evicting unused
// entries as needed. If evicting every unused entry would not make room,
// nothing is evicted and the entry stays uncached.
func (c *Cache) admitLocked(e *CacheEntry) {
	n := uint64(len(e.buf))
	if c.cfg.MaxCount == 0 || c.count+1-c.lruCount > c.cfg.MaxCount ||
		(c.cfg.MaxSize != 0 && c.size+n-c.lruBytes > c.cfg.MaxSize) {
		c.stats.Uncached++
		return
	}
	for c.full(n) {
		c.dropLocked(c.lru.next)
		c.stats.Evictions++
	}
	e.cached = true
	c.seq++
	e.ext.seq = c.seq
	c.index.insert(&e.ext)
	c.count++
	c.size += n
}

func (c *Cache) full(n uint64) bool {
	return c.count+1 > c.cfg.MaxCount || (c.cfg.MaxSize != 0 && c.size+n > c.cfg.MaxSize)
}

// dropLocked takes a cached entry out of the cache; an unused one is
// deregistered now, one in use when it is put back.
func (c *Cache) dropLocked(e *CacheEntry) {
	c.index.remove(&e.ext)
	e.cached = false
	c.count--
	c.size -= uint64(len(e.buf))
	if e.uses == 0 {
		c.unlinkLocked(e)
		c.deregister(e)
	}
}

func (c *Cache) deregister(e *CacheEntry) {
	// Only a caller that deregistered the entry's region itself makes this
	// fail; the region is gone either way.
	if err := c.t.Deregister(e.r); err != nil {
		c.t.log.Warn("registration cache: deregister", slog.Any("key", e.r.key), slog.Any("error", err))
	}
}

// Put releases an entry returned by Get. A cached entry stays registered
// for later Gets; an uncached one is deregistered.
func (c *Cache) Put(e *CacheEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.c != c || e.uses == 0 {
		return fmt.Errorf("cache entry not in use: %w", ErrInvalid)
	}
	e.uses--
	c.out--
	if e.uses > 0 {
		return nil
	}
	if !e.cached {
		c.deregister(e)
		return nil
	}
	e.prev, e.next = c.lru.prev, &c.lru
	c.lru.prev.next = e
	c.lru.prev = e
	c.lruCount++
	c.lruBytes += uint64(len(e.buf))
	return nil
}

// unlinkLocked takes an unused entry off the LRU list.
func (c *Cache) unlinkLocked(e *CacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	c.lruCount--
	c.lruBytes -= uint64(len(e.buf))
}

// Config returns the cache's configuration.
func (c *Cache) Config() CacheConfig { return c.cfg }

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries, s.Bytes = c.count, c.size
	return s
}

// Close deregisters every cached region. It fails with ErrBusy while an
// entry is in use.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out > 0 {
		return fmt.Errorf("%d registrations in use: %w", c.out, ErrBusy)
	}
	for c.lru.next != &c.lru {
		c.dropLocked(c.lru.next)
	}
	c.closed = true
	return nil
}
