package bystander

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockFile waits for an exclusive lock of f, which its closing lets go.
func lockFile(f *os.File) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, new(windows.Overlapped))
}
