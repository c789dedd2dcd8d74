//go:build !linux || softnic_portable

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// sysConn is empty off Linux: the portable fallback reads and writes one
// datagram per system call through net.UDPConn, without offloads, without the
// don't-fragment bit (so without the IP ID 0 the ICRC needs for IPv4), and
// reports the bound address as Local. Building with the softnic_portable tag
// selects it on Linux too, so that its tests run there.
type sysConn struct{}

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
	if !wait {
		// A deadline already passed: the read takes only what is queued.
		c.uc.SetReadDeadline(time.Unix(1, 0))
		defer c.uc.SetReadDeadline(time.Time{})
	}
	m := &msgs[0]
	for {
		n, _, _, addr, err := c.uc.ReadMsgUDPAddrPort(m.Buf[:cap(m.Buf)], nil)
		switch {
		case err == nil:
			m.N, m.Addr, m.Local, m.Segment = n, addr, c.local.Addr(), 0
			if m.Local.IsUnspecified() {
				// Bound to a wildcard: the fallback cannot tell which
				// local address the datagram reached.
				m.Local = netip.Addr{}
			}
			return 1, nil
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
			// ECONNRESET is how Windows reports an ICMP port unreachable.
			c.stats.refused.Add(1)
		case !wait && errors.Is(err, os.ErrDeadlineExceeded):
			return 0, nil
		case errors.Is(err, net.ErrClosed):
			return 0, fmt.Errorf("udp: read on %v: %w", c.local, net.ErrClosed)
		default:
			return 0, fmt.Errorf("udp: read on %v: %w", c.local, err)
		}
	}
}

func (c *Conn) writeBatch(msgs []Message) (int, error) {
	for i := range msgs {
		if _, err := c.uc.WriteToUDPAddrPort(msgs[i].Buf, msgs[i].Addr); err != nil {
			return i, fmt.Errorf("udp: send to %v from %v: %w", msgs[i].Addr, c.local, err)
		}
	}
	return len(msgs), nil
}
