package attachproto

import "net/netip"

// The operations of rdma_cm's UDP port space, service ID resolution: a UD
// listener (listen_ud), whose requests accept_request hands out as a
// listener's do, answered with accept_ud (or reject); and resolve, which
// waits for the network as dial does. They are ops of their own, which a
// daemon of before them refuses as unknown: no side misreads the other.
const (
	OpListenUD = "listen_ud"
	OpAcceptUD = "accept_ud"
	OpResolve  = "resolve" // waits for the SIDR_REP
)

// ListenUDArgs is Device.ListenUD; it is answered with a ListenResult.
type ListenUDArgs struct {
	Port      uint16
	Backlog   int
	PortSpace uint16 `json:",omitempty"` // ListenUDOptions.PortSpace, as ListenArgs'
	Held      bool   `json:",omitempty"` // ListenUDOptions.Held, as ListenArgs'
}

// AcceptUDArgs answers a request of a UD listener with the process's UD
// QP named QP (Request.AcceptUD).
type AcceptUDArgs struct {
	Request uint32
	QP      uint32
	Private []byte
}

// ResolveArgs is Device.Resolve with nic.ResolveOptions.
type ResolveArgs struct {
	Remote               netip.AddrPort
	Port                 uint16
	Private              []byte
	CMTimeout, CMRetries uint8
	PortSpace            uint16 `json:",omitempty"` // ResolveOptions.PortSpace, as ListenArgs'
}

// ResolveResult answers resolve: the UD QP that serves the port, its
// Q_Key, and the SIDR_REP's private data.
type ResolveResult struct {
	QPN, QKey uint32
	Private   []byte
}
