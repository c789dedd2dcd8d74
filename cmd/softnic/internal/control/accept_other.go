//go:build !linux

package control

import (
	"net"

	"github.com/softnic/softnic/nic"
)

// take accepts the next connection, at AcceptRate, and returns it,
// recorded as awaited.
// Where the system does not tell who connected (all but Linux), every
// connection is the one unknown peer's, which Admit refuses: the
// connections beyond PerProcess are refused as they come. take returns an
// error only once the server is closed.
func (s *Server) take() (*net.UnixConn, error) {
	peer := nic.PeerCred{PID: -1, UID: -1}
	for {
		if !s.pace.Take(s.done) {
			return nil, net.ErrClosed
		}
		c, err := s.Accepts.Accept(s.Listener, s.done)
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		busy, ok := s.reserve(peer)
		if !ok {
			uc.Close()
			return nil, net.ErrClosed
		}
		if busy != "" {
			uc.Write(s.busyReply(busy))
			uc.Close()
			continue
		}
		if !s.awaiting(uc, peer) {
			uc.Close()
			return nil, net.ErrClosed
		}
		return uc, nil
	}
}

// peerCred is nic.ErrNotSupported: the system does not tell.
func peerCred(int) (nic.PeerCred, error) { return nic.PeerCred{}, nic.ErrNotSupported }

// setBacklog leaves the backlog as it is: elsewhere than Linux it is not
// changed after listen.
func setBacklog(net.Listener, int) {}
