//go:build unix

package quota

import (
	"math"

	"golang.org/x/sys/unix"
)

// descriptorLimit returns the process's descriptor limit (RLIMIT_NOFILE).
func descriptorLimit() (int64, bool) {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil || rl.Cur == 0 || rl.Cur >= math.MaxInt64 {
		return 0, false
	}
	return int64(rl.Cur), true
}
