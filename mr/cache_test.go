package mr

import (
	"errors"
	"os"
	"testing"
)

// unsetenv removes k for the rest of the test; t.Setenv first so that the
// old value comes back.
func unsetenv(t *testing.T, k string) {
	t.Setenv(k, "")
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}

func TestCacheConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    CacheConfig
		wantErr bool
	}{
		{"not set: unlimited size, a default count, no merging", nil, CacheConfig{MaxCount: DefaultCacheMaxCount}, false},
		{"FI_MR_CACHE_MAX_SIZE", map[string]string{"FI_MR_CACHE_MAX_SIZE": "1048576"}, CacheConfig{MaxSize: 1 << 20, MaxCount: DefaultCacheMaxCount}, false},
		{"FI_MR_CACHE_MAX_COUNT", map[string]string{"FI_MR_CACHE_MAX_COUNT": "16"}, CacheConfig{MaxCount: 16}, false},
		{"Setting this to zero will disable registration caching", map[string]string{"FI_MR_CACHE_MAX_COUNT": "0"}, CacheConfig{}, false},
		{"merge: true", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "true"}, CacheConfig{MaxCount: DefaultCacheMaxCount, MergeRegions: true}, false},
		{"merge: yes", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "yes"}, CacheConfig{MaxCount: DefaultCacheMaxCount, MergeRegions: true}, false},
		{"merge: 1", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "1"}, CacheConfig{MaxCount: DefaultCacheMaxCount, MergeRegions: true}, false},
		{"merge: TRUE", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "TRUE"}, CacheConfig{MaxCount: DefaultCacheMaxCount, MergeRegions: true}, false},
		{"merge: no", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "no"}, CacheConfig{MaxCount: DefaultCacheMaxCount}, false},
		{"all three", map[string]string{"FI_MR_CACHE_MAX_SIZE": "0x1000", "FI_MR_CACHE_MAX_COUNT": "2", "FI_MR_CACHE_MERGE_REGIONS": "1"}, CacheConfig{MaxSize: 4096, MaxCount: 2, MergeRegions: true}, false},
		{"malformed size keeps the default", map[string]string{"FI_MR_CACHE_MAX_SIZE": "lots"}, CacheConfig{MaxCount: DefaultCacheMaxCount}, true},
		{"negative count keeps the default", map[string]string{"FI_MR_CACHE_MAX_COUNT": "-1"}, CacheConfig{MaxCount: DefaultCacheMaxCount}, true},
		{"malformed merge keeps the default", map[string]string{"FI_MR_CACHE_MERGE_REGIONS": "maybe", "FI_MR_CACHE_MAX_COUNT": "3"}, CacheConfig{MaxCount: 3}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"FI_MR_CACHE_MAX_SIZE", "FI_MR_CACHE_MAX_COUNT", "FI_MR_CACHE_MERGE_REGIONS"} {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				} else {
					unsetenv(t, k)
				}
			}
			got, err := CacheConfigFromEnv()
			if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("CacheConfigFromEnv() = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func newCache(t *testing.T, cfg CacheConfig) (*Table, *Cache) {
	tb := newTable(t)
	c := NewCache(tb, allocPD(t, tb), LocalWrite, cfg)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("cache Close: %v", err)
		}
	})
	return tb, c
}

func get(t *testing.T, c *Cache, b []byte) *CacheEntry {
	t.Helper()
	e, err := c.Get(b)
	wantErr(t, "Get", err, nil)
	if !holds(e.Region(), b) {
		t.Fatalf("entry's region does not hold the buffer")
	}
	return e
}

func put(t *testing.T, c *Cache, e *CacheEntry) {
	t.Helper()
	wantErr(t, "Put", c.Put(e), nil)
}

func TestCacheReuse(t *testing.T) {
	tb, c := newCache(t, CacheConfig{MaxCount: 4})
	buf := make([]byte, 256)
	e := get(t, c, buf)
	put(t, c, e)
	again := get(t, c, buf[16:32]) // inside the cached region
	if again.Region() != e.Region() {
		t.Error("a cached registration was not reused")
	}
	twice := get(t, c, buf)
	put(t, c, again)
	put(t, c, twice)
	if st := c.Stats(); st.Hits != 2 || st.Misses != 1 || st.Entries != 1 || st.Bytes != 256 {
		t.Errorf("stats %+v", st)
	}
	if tb.Stats().Regions != 1 {
		t.Error("the cached region is not kept registered")
	}
	_, err := c.Get(nil)
	wantErr(t, "Get of nothing", err, ErrInvalid)
	wantErr(t, "Put of an entry not in use", c.Put(e), ErrInvalid)
}

// TestCacheDisabled: "Setting this to zero will disable registration
// caching."
func TestCacheDisabled(t *testing.T) {
	tb, c := newCache(t, CacheConfig{MaxCount: 0})
	buf := make([]byte, 64)
	e := get(t, c, buf)
	put(t, c, e)
	if tb.Stats().Regions != 0 {
		t.Error("an uncached registration outlived its use")
	}
	e2 := get(t, c, buf)
	if e2.Region() == e.Region() {
		t.Error("a registration was reused with caching disabled")
	}
	put(t, c, e2)
}

// TestCacheLimits: FI_MR_CACHE_MAX_COUNT bounds the number of cached
// regions, FI_MR_CACHE_MAX_SIZE their bytes; unused ones go least recently
// used first, and a registration that does not fit is not cached.
func TestCacheLimits(t *testing.T) {
	tests := []struct {
		name         string
		cfg          CacheConfig
		sizes        []int
		wantEvicted  []int // buffers no longer cached at the end
		wantEntries  int
		wantUncached uint64
	}{
		{"count: the least recently used goes", CacheConfig{MaxCount: 2}, []int{10, 10, 10}, []int{0}, 2, 0},
		{"size: evict until the new one fits", CacheConfig{MaxCount: 10, MaxSize: 100}, []int{40, 40, 50}, []int{0}, 2, 0},
		{"size: evict several", CacheConfig{MaxCount: 10, MaxSize: 100}, []int{30, 30, 30, 90}, []int{0, 1, 2}, 1, 0},
		{"too big for the cache at all: nothing is evicted for it", CacheConfig{MaxCount: 10, MaxSize: 100}, []int{40, 101}, nil, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newCache(t, tc.cfg)
			var regions []*Region
			for _, n := range tc.sizes {
				e := get(t, c, make([]byte, n))
				regions = append(regions, e.Region())
				put(t, c, e)
			}
			for _, i := range tc.wantEvicted {
				if regions[i].live() {
					t.Errorf("buffer %d still registered", i)
				}
			}
			st := c.Stats()
			if st.Entries != tc.wantEntries || st.Uncached != tc.wantUncached || st.Evictions != uint64(len(tc.wantEvicted)) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestCacheInUseIsNeverEvicted(t *testing.T) {
	tb, c := newCache(t, CacheConfig{MaxCount: 1})
	a := get(t, c, make([]byte, 8))
	b := get(t, c, make([]byte, 8)) // the cache is full of a, in use
	if st := c.Stats(); st.Uncached != 1 || st.Evictions != 0 {
		t.Errorf("stats %+v", st)
	}
	if !a.Region().live() {
		t.Fatal("an entry in use was evicted")
	}
	wantErr(t, "Close with entries in use", c.Close(), ErrBusy)
	put(t, c, b)
	if b.Region().live() {
		t.Error("an uncached entry outlived its use")
	}
	put(t, c, a)
	if tb.Stats().Regions != 1 {
		t.Error("the cached entry was not kept")
	}
}

// TestCacheMerge: "If this variable is set to true, yes, or 1, then memory
// regions that are adjacent or overlapping will be merged into a single
// larger region."
func TestCacheMerge(t *testing.T) {
	tb, c := newCache(t, CacheConfig{MaxCount: 8, MergeRegions: true})
	arr := make([]byte, 1000)
	a := get(t, c, arr[0:100])
	put(t, c, a)
	b := get(t, c, arr[100:200]) // adjacent to a
	if b.Region().Len() != 200 || b.Region().Addr() != addrOf(arr) {
		t.Errorf("merged region [%#x, +%d), want [%#x, +200)", b.Region().Addr(), b.Region().Len(), addrOf(arr))
	}
	if a.Region().live() {
		t.Error("the merged-in region is still registered")
	}
	held := get(t, c, arr[150:300]) // overlaps b, which is in use
	if held.Region().Len() != 300 {
		t.Errorf("merged region of %d bytes, want 300", held.Region().Len())
	}
	if !b.Region().live() {
		t.Error("a merged-in region in use was deregistered")
	}
	put(t, c, b)
	if b.Region().live() {
		t.Error("a merged-in region outlived its use")
	}
	hit := get(t, c, arr[10:290])
	if hit.Region() != held.Region() {
		t.Error("a range inside the merged region missed")
	}
	put(t, c, hit)
	put(t, c, held)
	if st := c.Stats(); st.Merges != 2 || st.Entries != 1 || st.Bytes != 300 {
		t.Errorf("stats %+v", st)
	}
	if tb.Stats().Regions != 1 {
		t.Errorf("%d regions registered, want the merged one", tb.Stats().Regions)
	}
}

// TestCacheMergeStaysInOneAllocation: memory of two allocations is never
// covered by one region, however close they lie.
func TestCacheMergeStaysInOneAllocation(t *testing.T) {
	_, c := newCache(t, CacheConfig{MaxCount: 8, MergeRegions: true})
	arr := make([]byte, 64)
	short := arr[:32:32] // its capacity ends at 32: nothing past it is known to be the same allocation
	e1 := get(t, c, short)
	put(t, c, e1)
	e2 := get(t, c, arr[32:64])
	if e2.Region() == e1.Region() || e2.Region().Len() != 32 {
		t.Errorf("merged past a slice's capacity: region of %d bytes", e2.Region().Len())
	}
	put(t, c, e2)
	if st := c.Stats(); st.Merges != 0 || st.Entries != 2 {
		t.Errorf("stats %+v", st)
	}
}
