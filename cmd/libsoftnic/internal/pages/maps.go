//go:build linux

package pages

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readMaps returns the mappings that cover [start, end), in order. A
// hole fails with ErrFault. Where the kernel answers PROCMAP_QUERY (Linux
// 6.11) it asks it for each of them; elsewhere it reads /proc/self/maps
// up to them, a line for every mapping below end: a 4 KiB registration
// above 20,000 mappings took 10.7 ms that way, 0.15 ms asking
// (tests/testdata/libsoftnic_regcost.c).
func readMaps(start, end uintptr) ([]vma, error) {
	if out, ok, err := queryMaps(start, end); ok {
		return out, err
	}
	return scanMaps(start, end)
}

// procmapQuery is struct procmap_query of <linux/fs.h>: the question
// PROCMAP_QUERY asks of a /proc/PID/maps descriptor, and its answer.
type procmapQuery struct {
	size, queryFlags, queryAddr                               uint64
	vmaStart, vmaEnd, vmaFlags, vmaPageSize, vmaOffset, inode uint64
	devMajor, devMinor, vmaNameSize, buildIDSize              uint32
	vmaNameAddr, buildIDAddr                                  uint64
}

const (
	procmapQueryIoctl = 0xC0686611 // _IOWR('f', 17, struct procmap_query)
	coveringOrNextVMA = 0x10       // PROCMAP_QUERY_COVERING_OR_NEXT_VMA
)

// The answer's vma_flags.
const (
	vmaReadable = 1 << iota
	vmaWritable
	vmaExecutable
	vmaShared
)

// mapsQuery holds /proc/self/maps open for the queries, and the buffer
// the kernel writes a mapping's name into: heap memory, which stays where
// it is while the kernel writes it.
var mapsQuery struct {
	once sync.Once
	mu   sync.Mutex
	f    *os.File // nil where the kernel does not answer
	name []byte
}

// queryMaps is readMaps through PROCMAP_QUERY; ok is false where the
// kernel does not answer it (before Linux 6.11).
func queryMaps(start, end uintptr) (out []vma, ok bool, err error) {
	mapsQuery.once.Do(func() {
		f, err := os.Open("/proc/self/maps")
		if err != nil {
			return
		}
		mapsQuery.name = make([]byte, unix.PathMax)
		mapsQuery.f = f
		if _, err := queryOne(0); errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
			f.Close()
			mapsQuery.f = nil
		}
	})
	if mapsQuery.f == nil {
		return nil, false, nil
	}
	for at := start; at < end; {
		v, err := queryOne(at)
		switch {
		case errors.Is(err, unix.ENOENT) || err == nil && v.start > at:
			return nil, true, fmt.Errorf("no mapping at %#x: %w", at, ErrFault)
		case err != nil:
			return nil, true, fmt.Errorf("PROCMAP_QUERY at %#x: %w", at, err)
		}
		out = append(out, v)
		at = v.end
	}
	return out, true, nil
}

// queryOne returns the mapping that covers addr, or the first above it.
func queryOne(addr uintptr) (vma, error) {
	mapsQuery.mu.Lock()
	defer mapsQuery.mu.Unlock()
	name := mapsQuery.name
	q := procmapQuery{queryFlags: coveringOrNextVMA, queryAddr: uint64(addr),
		vmaNameSize: uint32(len(name)), vmaNameAddr: uint64(uintptr(unsafe.Pointer(&name[0])))}
	q.size = uint64(unsafe.Sizeof(q))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, mapsQuery.f.Fd(), procmapQueryIoctl, uintptr(unsafe.Pointer(&q)))
	if e != 0 {
		return vma{}, e
	}
	perms := []byte("---p")
	for i, bit := range []uint64{vmaReadable, vmaWritable, vmaExecutable} {
		if q.vmaFlags&bit != 0 {
			perms[i] = "rwx"[i]
		}
	}
	if q.vmaFlags&vmaShared != 0 {
		perms[3] = 's'
	}
	v := vma{start: uintptr(q.vmaStart), end: uintptr(q.vmaEnd), perms: string(perms), off: int64(q.vmaOffset), ino: q.inode}
	if n := int(q.vmaNameSize); n > 0 {
		v.path = strings.TrimRight(string(name[:n]), "\x00")
	}
	return v, nil
}

// vma is a line of /proc/self/maps.
type vma struct {
	start, end uintptr
	perms      string // "rw-p"
	off        int64
	ino        uint64
	path       string
}

// scanMaps is readMaps that reads /proc/self/maps up to end.
func scanMaps(start, end uintptr) ([]vma, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("reading /proc/self/maps: %w", err)
	}
	defer f.Close()
	var out []vma
	at := start
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() && at < end {
		v, ok := parseMapsLine(sc.Text())
		if !ok || v.end <= at {
			continue
		}
		if v.start > at {
			break
		}
		out = append(out, v)
		at = v.end
	}
	if at < end {
		return nil, fmt.Errorf("no mapping at %#x: %w", at, ErrFault)
	}
	return out, nil
}

// parseMapsLine parses "start-end perms offset dev inode path".
func parseMapsLine(line string) (vma, bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return vma{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	a, err1 := strconv.ParseUint(lo, 16, 64)
	b, err2 := strconv.ParseUint(hi, 16, 64)
	off, err3 := strconv.ParseInt(f[2], 16, 64)
	ino, err4 := strconv.ParseUint(f[4], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(f[1]) != 4 {
		return vma{}, false
	}
	v := vma{start: uintptr(a), end: uintptr(b), perms: f[1], off: off, ino: ino}
	if len(f) > 5 {
		v.path = strings.Join(f[5:], " ")
	}
	return v, true
}
