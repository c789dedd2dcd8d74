//go:build linux

package pages

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The system calls on raw addresses: the memory they touch is the C
// program's, never Go's, so addresses stay uintptrs and the kernel does
// the copying.

// pwriteAll writes the n bytes at addr into fd at offset addr.
func pwriteAll(fd int, addr, n uintptr) error {
	for done := uintptr(0); done < n; {
		w, _, e := unix.Syscall6(unix.SYS_PWRITE64, uintptr(fd), addr+done, n-done, addr+done, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EFAULT:
			return fmt.Errorf("reading %#x-%#x: %w", addr, addr+n, ErrFault)
		case e != 0:
			return fmt.Errorf("copying %#x-%#x to shared memory: %w", addr, addr+n, e)
		case w == 0:
			return fmt.Errorf("copying %#x-%#x to shared memory: no progress: %w", addr, addr+n, unix.EIO)
		}
		done += w
	}
	return nil
}

// preadAll reads n bytes of fd at offset off into addr.
func preadAll(fd int, addr, n uintptr, off int64) error {
	for done := uintptr(0); done < n; {
		r, _, e := unix.Syscall6(unix.SYS_PREAD64, uintptr(fd), addr+done, n-done, uintptr(off)+done, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e != 0:
			return fmt.Errorf("copying shared memory at %#x back: %w", off, e)
		case r == 0:
			return fmt.Errorf("copying shared memory at %#x back: end of file: %w", off, unix.EIO)
		}
		done += r
	}
	return nil
}

// mmapFixed maps n bytes at addr (anywhere if addr is 0).
func mmapFixed(addr, n uintptr, prot, flags, fd int, off int64) (uintptr, error) {
	if addr != 0 {
		flags |= unix.MAP_FIXED
	}
	r, _, e := unix.Syscall6(unix.SYS_MMAP, addr, n, uintptr(prot), uintptr(flags), uintptr(fd), uintptr(off))
	if e != 0 {
		return 0, e
	}
	return r, nil
}

// mremapFixed moves the n-byte mapping at from over to, atomically
// replacing what was mapped there.
func mremapFixed(from, n, to uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_MREMAP, from, n, n, unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, to, 0)
	if e != 0 {
		return e
	}
	return nil
}

func munmap(addr, n uintptr) {
	unix.Syscall(unix.SYS_MUNMAP, addr, n, 0)
}

func madvise(addr, n uintptr, advice int) {
	unix.Syscall(unix.SYS_MADVISE, addr, n, uintptr(advice))
}

func mprotect(addr, n uintptr, prot int) {
	unix.Syscall(unix.SYS_MPROTECT, addr, n, uintptr(prot))
}
