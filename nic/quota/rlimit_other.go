//go:build !unix

package quota

// descriptorLimit reports no limit where the system has no RLIMIT_NOFILE
// (Windows): Probe keeps its default.
func descriptorLimit() (int64, bool) { return 0, false }
