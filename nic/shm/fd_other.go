//go:build !unix

package shm

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/softnic/softnic/mr"
)

// Without unix descriptors (Windows) no memfd is made or received, so no
// descriptor or shared mapping ever needs closing, and a socket carries
// lines but no descriptors.

// CloseFD does nothing: there is no descriptor to close.
func CloseFD(int) {}

// DupFD returns mr.ErrNotSupported: there is no descriptor to copy.
func DupFD(int) (int, error) {
	return -1, fmt.Errorf("dup on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

func munmap([]byte) error { return nil }

func rightsSpace(int) int { return 0 }

func unixRights([]int) ([]byte, error) {
	return nil, fmt.Errorf("passing descriptors (SCM_RIGHTS) on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

func parseRights([]byte, int) ([]int, bool, error) {
	return nil, false, errors.New("a control message where descriptors cannot travel")
}
