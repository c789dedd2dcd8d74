package nic

import (
	"net/netip"

	"github.com/softnic/softnic/nic/internal/provider"
)

// ConnectOptions are the attributes QP.Connect moves a QP through
// INIT → RTR → RTS with; zero fields take the defaults each field notes.
// They are package nic/internal/provider's, which the connection manager
// connects with too.
type ConnectOptions = provider.ConnectOptions

// Connect moves a QP from RESET to RTS, connected to QP remoteQPN at remote
// (an RC or UC QP; for UD, remote and remoteQPN are ignored). It is the
// out-of-band way of connecting (both sides exchange QPN and PSN, as
// perftest does); the connection manager does it over the network.
func (q *QP) Connect(remote netip.AddrPort, remoteQPN uint32, o ConnectOptions) error {
	mtu := q.dev.MTU()
	if remote.IsValid() {
		mtu = q.dev.PathMTU(remote)
	}
	o.SetDefaults(mtu)
	return provider.Connect(q.prov, q.dev.MTU(), remote, remoteQPN, &o)
}
