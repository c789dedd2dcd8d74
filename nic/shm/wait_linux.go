//go:build linux && !softnic_portable

package shm

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// NewEpoll returns an epoll fd, closed on exec, in which each of efds, the
// eventfds of wakeups, is registered edge-triggered (EPOLLIN|EPOLLET):
// each signal of one queues an event that a Waiter takes, whatever the
// eventfd's counter holds. The epoll fd is what waits; the eventfds stay
// their holders'.
func NewEpoll(efds ...int) (int, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("epoll_create1: %w", err)
	}
	for _, efd := range efds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(efd)}
		if err := unix.EpollCtl(fd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	return fd, nil
}

// takeWakeups takes the events queued in the epoll fd fd without waiting
// (epoll_wait with a timeout of 0) and returns how many there were.
func takeWakeups(fd int) int { return takeWakeupsWaiting(fd, 0) }

// takeWakeupsWaiting is takeWakeups waiting up to wait (rounded up to a
// millisecond) for the first event when none is queued.
func takeWakeupsWaiting(fd int, wait time.Duration) int {
	var evs [4]unix.EpollEvent
	total := 0
	ms := int((wait + time.Millisecond - 1) / time.Millisecond)
	for {
		n, err := unix.EpollWait(fd, evs[:], ms)
		if err == unix.EINTR {
			continue
		}
		ms = 0
		if n <= 0 {
			return total
		}
		total += n
		if n < len(evs) {
			return total
		}
	}
}

func setNonblock(fd int) error { return unix.SetNonblock(fd, true) }
