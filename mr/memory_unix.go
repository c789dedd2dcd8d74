//go:build unix

package mr

import "golang.org/x/sys/unix"

// mapArena maps size bytes (a multiple of PageSize) of anonymous private
// memory outside the Go heap.
func mapArena(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}

// unmapArena removes a mapping made by mapArena or adopted by AdoptArena.
func unmapArena(b []byte) error { return unix.Munmap(b) }
