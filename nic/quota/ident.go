package quota

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Identify returns the identity of process pid, which has just connected:
// its PID and when it started (/proc/PID/stat), so that a process that
// takes the PID of one that exited, whose resources the daemon may still
// be releasing, is a process of its own. Where the start cannot be read
// (the process is already gone, or no /proc), it is 0.
func Identify(pid int) ProcessID {
	id := ProcessID{PID: pid}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		id.Start, _ = startTime(b)
	}
	return id
}

// startTime returns the starttime field (the 22nd) of a /proc/PID/stat
// line. The command name, the 2nd field, is in parentheses and may hold
// anything, spaces and parentheses included: the fields after it are
// counted from the last ')'.
func startTime(stat []byte) (uint64, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(stat[i+1:]) // from the 3rd field, state
	if len(f) < 22-2 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[22-3]), 10, 64)
	return n, err == nil
}
