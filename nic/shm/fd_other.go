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

func closeFD(int) {}

func munmap([]byte) error { return nil }

func rightsSpace(int) int { return 0 }

func unixRights([]int) ([]byte, error) {
	return nil, fmt.Errorf("passing descriptors (SCM_RIGHTS) on %s: %w", runtime.GOOS, mr.ErrNotSupported)
}

func parseRights([]byte, int) ([]int, bool, error) {
	return nil, false, errors.New("a control message where descriptors cannot travel")
}
