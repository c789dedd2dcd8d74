package shm

import (
	"errors"
	"fmt"
	"math"
	"syscall"
)

// ErrNotShared is returned by Map for a file descriptor that is not a
// memfd sealed against shrinking, or smaller than the mapping asked for:
// mapping it would let its owner truncate the file under the reader, and
// a read past its end is a SIGBUS.
var ErrNotShared = errors.New("not a sealed shared memory file")

// PageSize is the granularity of mappings: sizes are rounded up to it.
const PageSize = 4096

// RoundUp returns n rounded up to whole pages.
func RoundUp(n int) int { return (n + PageSize - 1) &^ (PageSize - 1) }

// Mapping is a memfd mapped shared into this process: memory another
// process maps too.
type Mapping struct {
	b  []byte
	fd int // -1 once closed
}

// Create makes a memfd of size bytes (rounded up to whole pages) named
// name, as /proc/PID/maps shows it ("/memfd:NAME"), seals its size, and
// maps it shared. The descriptor stays open for sending until CloseFD.
// Where the system has no memfds (all but Linux) it returns
// mr.ErrNotSupported.
func Create(name string, size int) (*Mapping, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shared memory of %d bytes: %w", size, syscall.EINVAL)
	}
	fd, b, err := createSealed(name, RoundUp(size))
	if err != nil {
		return nil, err
	}
	return &Mapping{b: b, fd: fd}, nil
}

// Map maps size bytes (rounded up to whole pages) of fd, a memfd received
// from a peer, after checking that it cannot shrink and holds the size.
// The mapping owns fd; on error fd is closed.
func Map(fd int, size int) (*Mapping, error) { return MapRange(fd, 0, size) }

// MapRange maps size bytes (rounded up to whole pages) of fd from offset
// off, a multiple of PageSize, with Map's checks: fd is a memfd sealed
// against shrinking that holds the whole range. The mapping owns fd; on
// error fd is closed. Where the system has no memfds (all but Linux) it
// returns mr.ErrNotSupported.
func MapRange(fd int, off int64, size int) (*Mapping, error) {
	if size <= 0 || off < 0 || off%PageSize != 0 || off > math.MaxInt64-int64(RoundUp(size)) {
		CloseFD(fd)
		return nil, fmt.Errorf("shared memory of %d bytes at offset %d: %w", size, off, syscall.EINVAL)
	}
	b, err := mapSealed(fd, off, RoundUp(size))
	if err != nil {
		CloseFD(fd)
		return nil, err
	}
	return &Mapping{b: b, fd: fd}, nil
}

// Bytes returns the mapped memory.
func (m *Mapping) Bytes() []byte { return m.b }

// FD returns the memfd's descriptor, -1 after CloseFD.
func (m *Mapping) FD() int { return m.fd }

// CloseFD closes the descriptor; the mapping stays.
func (m *Mapping) CloseFD() {
	if m.fd >= 0 {
		CloseFD(m.fd)
		m.fd = -1
	}
}

// Release closes the descriptor and hands the mapping over to the caller,
// who unmaps it (mr.Table.AdoptArena does); m is empty afterwards.
func (m *Mapping) Release() []byte {
	m.CloseFD()
	b := m.b
	m.b = nil
	return b
}

// Close unmaps the memory and closes the descriptor. The memory must not
// be touched afterwards.
func (m *Mapping) Close() error {
	m.CloseFD()
	if m.b == nil {
		return nil
	}
	err := munmap(m.b)
	m.b = nil
	return err
}

// TakeFD returns the descriptor and forgets it: the caller closes it (or
// sends it and closes its copy); the mapping stays.
func (m *Mapping) TakeFD() int {
	fd := m.fd
	m.fd = -1
	return fd
}
