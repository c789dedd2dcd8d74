package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// ErrNotShared is returned by Map for a file descriptor that is not a
// memfd sealed against shrinking, or smaller than the mapping asked for:
// mapping it would let its owner truncate the file under the reader, and
// a read past its end is a SIGBUS.
var ErrNotShared = errors.New("not a sealed shared memory file")

// seals are the seals Create puts on its memfds: the size is fixed (no
// shrinking, no growing) and no seal may be added or removed later.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

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
func Create(name string, size int) (*Mapping, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shared memory of %d bytes: %w", size, unix.EINVAL)
	}
	size = RoundUp(size)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("memfd of %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing a memfd: %w", err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
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
// error fd is closed.
func MapRange(fd int, off int64, size int) (*Mapping, error) {
	if size <= 0 || off < 0 || off%PageSize != 0 || off > math.MaxInt64-int64(RoundUp(size)) {
		unix.Close(fd)
		return nil, fmt.Errorf("shared memory of %d bytes at offset %d: %w", size, off, unix.EINVAL)
	}
	size = RoundUp(size)
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&unix.F_SEAL_SHRINK == 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("descriptor %d (seals %#x, %v): %w", fd, got, err, ErrNotShared)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < off+int64(size) {
		unix.Close(fd)
		return nil, fmt.Errorf("descriptor %d holds %d bytes, want %d from offset %d: %w", fd, st.Size, size, off, ErrNotShared)
	}
	b, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
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
		unix.Close(m.fd)
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
	err := unix.Munmap(m.b)
	m.b = nil
	return err
}

// NewEventFD returns a non-blocking eventfd: a counter one side adds to
// (Signal) and the other reads, waking when it is not zero.
func NewEventFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// Signal adds one to the eventfd fd. A counter at its maximum (the reader
// has not read for 2^64-2 signals) already wakes the reader, so EAGAIN is
// not an error.
func Signal(fd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(fd, one[:])
}

// TakeFD returns the descriptor and forgets it: the caller closes it (or
// sends it and closes its copy); the mapping stays.
func (m *Mapping) TakeFD() int {
	fd := m.fd
	m.fd = -1
	return fd
}
