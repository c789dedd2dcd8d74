//go:build !linux || softnic_portable

package udp

import (
	"errors"
	"net/netip"
)

// rawIPSocket has no raw socket to read here: Options.IPIDs is not
// available, and Features().IPIDs stays false.
type rawIPSocket struct{}

func openIPIDs(netip.AddrPort) (*ipids, error) {
	return nil, errors.New("the IPv4 identifications of received datagrams are read only on Linux")
}

func (rawIPSocket) read([]byte) (int, error) { return 0, nil }

func (rawIPSocket) close() error { return nil }
