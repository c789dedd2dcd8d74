//go:build !linux || softnic_portable

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// sysConn is small off Linux: the portable fallback reads and writes one
// datagram per system call through net.UDPConn, without offloads, without the
// don't-fragment bit (so without the IP ID 0 the ICRC needs for IPv4), and
// reports the bound address as Local. Building with the softnic_portable tag
// selects it on Linux too, so that its tests run there.
//
// ReadBatchTurn cannot wait without reading here: it reads one datagram
// into a stash without holding its turn (waitRead), and the next read
// returns it first. While it waits it holds mu, and TryReadBatch, which
// would wait behind it on the socket, returns nothing at once instead.
type sysConn struct {
	mu    sync.Mutex
	stash []byte // a datagram waitRead read, stash[:n] from from
	n     int
	from  netip.AddrPort
	has   bool
}

func (c *Conn) init(opt Options) error {
	if err := c.uc.SetReadBuffer(opt.RecvBuffer); err != nil {
		return err
	}
	return c.uc.SetWriteBuffer(opt.SendBuffer)
}

func (c *Conn) features() Features { return Features{} }

func (c *Conn) readBatch(msgs []Message, wait bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	s := &c.sys
	if wait {
		s.mu.Lock()
	} else if !s.mu.TryLock() {
		return 0, nil // waitRead is reading
	}
	defer s.mu.Unlock()
	m := &msgs[0]
	if s.has {
		s.has = false
		if s.n > cap(m.Buf) {
			c.stats.truncated.Add(1)
			return 0, nil
		}
		m.N, m.Addr = copy(m.Buf[:cap(m.Buf)], s.stash[:s.n]), s.from
	} else {
		if !wait {
			// A deadline that has passed fails the read before it looks
			// at the socket: this one lets it look, and waits a
			// millisecond at most.
			c.uc.SetReadDeadline(time.Now().Add(time.Millisecond))
			defer c.uc.SetReadDeadline(time.Time{})
		}
		n, addr, err := c.readOne(m.Buf[:cap(m.Buf)])
		switch {
		case !wait && errors.Is(err, os.ErrDeadlineExceeded):
			return 0, nil
		case err != nil:
			return 0, err
		}
		m.N, m.Addr = n, addr
	}
	m.Local, m.Segment = c.local.Addr(), 0
	if m.Local.IsUnspecified() {
		// Bound to a wildcard: the fallback cannot tell which local
		// address the datagram reached.
		m.Local = netip.Addr{}
	}
	return 1, nil
}

// readOne reads one datagram into buf, counting and skipping port
// unreachable reports.
func (c *Conn) readOne(buf []byte) (int, netip.AddrPort, error) {
	for {
		n, _, _, addr, err := c.uc.ReadMsgUDPAddrPort(buf, nil)
		switch {
		case err == nil:
			return n, addr, nil
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
			// ECONNRESET is how Windows reports an ICMP port unreachable.
			c.stats.refused.Add(1)
		case errors.Is(err, net.ErrClosed):
			return 0, addr, fmt.Errorf("udp: read on %v: %w", c.local, net.ErrClosed)
		default:
			return 0, addr, fmt.Errorf("udp: read on %v: %w", c.local, err)
		}
	}
}

func (c *Conn) waitRead() error {
	s := &c.sys
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.has {
		return nil
	}
	if s.stash == nil {
		s.stash = make([]byte, maxPayloadIPv6)
	}
	n, from, err := c.readOne(s.stash)
	if err != nil {
		return err
	}
	s.n, s.from, s.has = n, from, true
	return nil
}

func (c *Conn) readBatchTurn(msgs []Message, turn sync.Locker) (int, error) {
	if err := c.waitRead(); err != nil {
		return 0, err
	}
	turn.Lock()
	n, err := c.readBatch(msgs, false) // the stash, unless a TryReadBatch took it
	if n == 0 || err != nil {
		turn.Unlock()
	}
	return n, err
}

// waitBatchTurn never waits here: waitRead's read cannot be interrupted.
const waitsInterruptibly = false

func (c *Conn) waitBatchTurn([]Message, sync.Locker, uint64) (int, bool, error) { return 0, false, nil }

func (c *Conn) interrupt()    {}
func (c *Conn) rearm() uint64 { return 0 }

func (c *Conn) stopWaiting() {}

func (c *Conn) readTrafficClass() error { return nil }

func (c *Conn) close() error { return c.uc.Close() }

func (c *Conn) writeBatch(msgs []Message) (int, error) {
	for i := range msgs {
		if _, err := c.uc.WriteToUDPAddrPort(msgs[i].Buf, msgs[i].Addr); err != nil {
			return i, fmt.Errorf("udp: send to %v from %v: %w", msgs[i].Addr, c.local, err)
		}
	}
	return len(msgs), nil
}
