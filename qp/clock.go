package qp

import "time"

// Time is a point on the driver's monotonic clock, in nanoseconds. The qp
// package never reads a clock: every call that may start or check a timer is
// handed the current Time, so tests drive it with a fake clock.
type Time int64

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// ackTimeout is the local ACK timeout of the IBTA QP attribute: 4.096 µs ×
// 2^timeout; 0 means wait forever (no retransmission timer).
func ackTimeout(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return time.Duration(4096<<min(timeout, 31)) * time.Nanosecond
}
