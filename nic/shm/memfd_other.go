//go:build !linux || softnic_portable

package shm

import (
	"fmt"
	"runtime"
	"time"

	"github.com/softnic/softnic/mr"
)

// Attach mode shares memory through sealed memfds and wakes through
// eventfds, which only Linux has: elsewhere they are not supported. A
// Linux build with the softnic_portable tag goes without them too, so
// that it runs what macOS, Windows and FreeBSD run.

// Supported returns an error wrapping mr.ErrNotSupported: this build has
// no memfds and eventfds.
func Supported() error {
	return fmt.Errorf("sealed memfds and eventfds on %s: %w", platform(), mr.ErrNotSupported)
}

// platform names the system, or the build that acts as another's.
func platform() string {
	if runtime.GOOS == "linux" {
		return "a softnic_portable build"
	}
	return runtime.GOOS
}

func createSealed(string, int) (int, []byte, error) {
	return -1, nil, fmt.Errorf("memfd_create on %s: %w", platform(), mr.ErrNotSupported)
}

func mapSealed(int, int64, int) ([]byte, error) {
	return nil, fmt.Errorf("sealed memfds on %s: %w", platform(), mr.ErrNotSupported)
}

// NewEventFD returns mr.ErrNotSupported: the system has no eventfds.
func NewEventFD() (int, error) {
	return -1, fmt.Errorf("eventfd on %s: %w", platform(), mr.ErrNotSupported)
}

// Signal does nothing: NewEventFD makes no eventfd to signal.
func Signal(int) {}

// Yield lets the process's other goroutines run: there is no daemon
// sharing memory with this build to give the CPU to.
func Yield() { runtime.Gosched() }

// NewEpoll returns mr.ErrNotSupported: wakeups are eventfds, which the
// system does not have.
func NewEpoll(...int) (int, error) {
	return -1, fmt.Errorf("epoll on %s: %w", platform(), mr.ErrNotSupported)
}

func takeWakeups(int) int { return 0 }

func takeWakeupsWaiting(int, time.Duration) int { return 0 }

func setNonblock(int) error { return fmt.Errorf("epoll on %s: %w", platform(), mr.ErrNotSupported) }
