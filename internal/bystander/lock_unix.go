//go:build unix

package bystander

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile waits for an exclusive lock of f, which its closing lets go.
func lockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}
