package quota

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
)

// Machine is what the defaults are derived from.
type Machine struct {
	RAM         int64 // bytes of memory the daemon may use: the machine's, or its cgroup's if less
	Descriptors int64 // the daemon's descriptor limit (RLIMIT_NOFILE)
	MaxMapCount int64 // mappings one process may have (vm.max_map_count)
	QPs         int64 // QPs of the device
}

// Probe reads the machine the daemon runs on, for a device of qps QPs.
// What it cannot read takes a modest value: 4 GiB, 1024 descriptors,
// 65530 mappings (Linux's default).
func Probe(qps int) Machine {
	m := Machine{RAM: 4 << 30, Descriptors: 1024, MaxMapCount: 65530, QPs: int64(qps)}
	if n, ok := memTotal(); ok {
		m.RAM = n
	}
	if n, ok := cgroupMemoryMax(); ok && n < m.RAM {
		m.RAM = n
	}
	if n, ok := descriptorLimit(); ok {
		m.Descriptors = n
	}
	if n, ok := readInt("/proc/sys/vm/max_map_count"); ok && n > 0 {
		m.MaxMapCount = n
	}
	return m
}

// memTotal reads MemTotal of /proc/meminfo.
func memTotal() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err == nil && kb > 0
		}
	}
	return 0, false
}

// cgroupMemoryMax reads the memory limit of the daemon's cgroup (v2).
func cgroupMemoryMax() (int64, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			n, ok := readInt("/sys/fs/cgroup" + path + "/memory.max")
			return n, ok && n > 0
		}
	}
	return 0, false
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// DefaultLimits returns limits that a laptop and a large server both live
// with: counts the daemon can carry anywhere, and shares of what the
// machine has. A process may make one CQ and one SRQ as deep as the
// device allows (qp.MaxCQE, qp.MaxSRQWR), as an embedded device may, if
// its memory and heap limits let it. One process gets an eighth of the device's QPs, one user a
// quarter, all attached processes together three quarters: the rest is
// kept for the daemon's own connections from remote peers. Memory mapped
// for one process may reach half the RAM, for one user three quarters,
// in total the RAM; the daemon's heap spent for them a thirty-second, a
// sixteenth and an eighth of it; mappings an eighth, a quarter and half
// of vm.max_map_count (the rest is the Go runtime's); descriptors an
// eighth, a half and three quarters of the daemon's limit.
func DefaultLimits(m Machine) Limits {
	var l Limits
	set := func(r Resource, proc, user, total int64) {
		total = max(total, 1)
		user = min(max(user, 1), total)
		l[Process][r], l[User][r], l[Total][r] = min(max(proc, 1), user), user, total
	}
	set(Sessions, 64, 256, 4096)
	set(Waits, 1024, 4096, 16384)
	set(Objects, 16384, 65536, 262144)
	set(QPs, m.QPs/8, m.QPs/4, m.QPs-m.QPs/4)
	set(CQEntries, qp.MaxCQE, 4*qp.MaxCQE, 16*qp.MaxCQE)
	set(SRQEntries, qp.MaxSRQWR, 4*qp.MaxSRQWR, 16*qp.MaxSRQWR)
	set(Memory, m.RAM/2, m.RAM/4*3, m.RAM)
	set(Mappings, m.MaxMapCount/8, m.MaxMapCount/4, m.MaxMapCount/2)
	set(Heap, m.RAM/32, m.RAM/16, m.RAM/8)
	desc := m.Descriptors - m.Descriptors/4
	set(Descriptors, desc/8, desc/2, desc)
	return l
}

// Set sets the limit key, scope.resource such as process.qps or
// uid.memory, to n; math.MaxInt64 stands for no limit.
func (l *Limits) Set(key string, n int64) error {
	sc, rs, ok := strings.Cut(key, ".")
	s, r := Scope(slices.Index(scopeNames[:], sc)), Resource(slices.Index(resourceNames[:], rs))
	switch {
	case !ok:
		return fmt.Errorf("limit %q: want SCOPE.RESOURCE, such as process.qps: %w", key, mr.ErrInvalid)
	case s < 0:
		return fmt.Errorf("limit %q: scope %q: want %s: %w", key, sc, strings.Join(scopeNames[:], ", "), mr.ErrInvalid)
	case r < 0:
		return fmt.Errorf("limit %q: resource %q: want %s: %w", key, rs, strings.Join(resourceNames[:], ", "), mr.ErrInvalid)
	case n <= 0:
		return fmt.Errorf("limit %s: %d: want a positive number: %w", key, n, mr.ErrInvalid)
	}
	l[s][r] = n
	return nil
}
