//go:build linux && !softnic_portable

package shm

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Supported returns nil: Linux has the sealed memfds and eventfds attach
// mode needs.
func Supported() error { return nil }

// seals are the seals Create puts on its memfds: the size is fixed (no
// shrinking, no growing) and no seal may be added or removed later.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// createSealed makes a memfd of size bytes, a multiple of PageSize, seals
// it and maps it shared.
func createSealed(name string, size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("memfd of %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("sealing a memfd: %w", err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return fd, b, nil
}

// mapSealed maps size bytes (a multiple of PageSize) of fd from offset off
// once it has checked that fd is sealed against shrinking and holds them.
// The caller closes fd on error.
func mapSealed(fd int, off int64, size int) ([]byte, error) {
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("descriptor %d (seals %#x, %v): %w", fd, got, err, ErrNotShared)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < off+int64(size) {
		return nil, fmt.Errorf("descriptor %d holds %d bytes, want %d from offset %d: %w", fd, st.Size, size, off, ErrNotShared)
	}
	b, err := unix.Mmap(fd, off, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

// NewEventFD returns a non-blocking eventfd: a counter one side adds to
// (Signal), which wakes the waiter of an epoll fd it is registered in
// (NewEpoll, Waiter). Where the system has no eventfds (all but Linux) it
// returns mr.ErrNotSupported.
func NewEventFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// Signal adds one to the eventfd fd, which must be non-blocking. A
// counter at its maximum (2^64-2 signals; nobody reads it) fails with
// EAGAIN, which is ignored: the waiter has woken for the signals before.
func Signal(fd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(fd, one[:])
}

// Yield gives up the thread's CPU to another thread that is ready to run
// (sched_yield), such as the daemon's, which is to write what the caller
// polls its shared memory for: on a host with few CPUs, a poller that
// kept its CPU would make the daemon wait for a scheduler time slice.
func Yield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
