//go:build !unix

package mr

// mapArena returns size bytes (a multiple of PageSize) of zeroed Go memory
// starting on a page boundary, where the system has no mmap (Windows). Go's
// collector does not move heap objects, and the arena's memory holds the
// slice, so the address stays valid until the arena is released.
func mapArena(size int) ([]byte, error) {
	b := make([]byte, size+PageSize)
	off := int(-addrOf(b) & (PageSize - 1))
	return b[off : off+size : off+size], nil
}

// unmapArena leaves the memory to the collector: nothing references it
// once the arena is released.
func unmapArena([]byte) error { return nil }
