package quota

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// The waits of Backoff: net/http's Server waits 5 ms after a failed
// Accept, doubling to 1 s. Sometimes logs at most once each logEvery.
const (
	firstBackoff = 5 * time.Millisecond
	maxBackoff   = time.Second
	logEvery     = time.Minute
)

// Backoff carries an accept loop through the errors that pass: a process
// out of descriptors (EMFILE), a system out of files (ENFILE), of socket
// buffers (ENOBUFS) or of memory (ENOMEM), a connection aborted before it
// was accepted. Taking such an error for the listener's end would leave
// the socket unanswered for good once the pressure is gone; retrying at
// once would spin. Backoff waits instead, 5 ms doubling to 1 s as net/http
// does, counts every error, and logs the first of an episode (errors with
// no connection accepted between them) with the count so far, at most
// once a minute: a flood neither floods the log nor goes unseen.
//
// The zero Backoff logs nothing; it is safe for one accept loop at a time,
// and Errors for any goroutine.
type Backoff struct {
	// Log receives one warning per episode, naming What accepts.
	Log  *slog.Logger
	What string

	errors   atomic.Uint64
	delay    time.Duration // the next wait; 0 outside an episode
	episodes Sometimes
	// sleep waits d or until done is closed (a test's fake clock).
	sleep func(d time.Duration, done <-chan struct{}) bool
}

// Accept returns the next connection of l. It returns an error only once
// l is closed (net.ErrClosed) or done is: any other error is counted and
// waited out.
func (b *Backoff) Accept(l net.Listener, done <-chan struct{}) (net.Conn, error) {
	var c net.Conn
	err := b.Do(func() (err error) {
		c, err = l.Accept()
		return err
	}, done)
	return c, err
}

// Do calls accept, which accepts a connection by other means than a
// net.Listener, until it succeeds, as Accept does.
func (b *Backoff) Do(accept func() error, done <-chan struct{}) error {
	for {
		err := accept()
		if err == nil {
			b.delay = 0
			return nil
		}
		select {
		case <-done:
			return net.ErrClosed
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return err
		}
		n := b.errors.Add(1)
		if b.delay == 0 {
			b.delay = firstBackoff
			if b.Log != nil {
				b.episodes.Log(b.Log, "accept failed: trying again, up to each second, until it succeeds (counted in accept_errors; logged at most once a minute)",
					slog.String("socket", b.What), slog.Uint64("accept_errors", n), slog.Any("error", err))
			}
		} else {
			b.delay = min(2*b.delay, maxBackoff)
		}
		sleep := b.sleep
		if sleep == nil {
			sleep = sleepUnless
		}
		sleep(b.delay, done)
	}
}

// Errors returns how many accepts failed and were retried.
func (b *Backoff) Errors() uint64 { return b.errors.Load() }

// sleepUnless waits d and reports true, or false if done is closed first.
func sleepUnless(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
