package nic

import (
	"fmt"

	"github.com/softnic/softnic/nic/internal/provider"
)

// A connection whose QP its owner connects (DialOptions.SelfConnect,
// AcceptOptions.SelfConnect), as rdma_cm does for a QP it did not make
// (rping -q): the handshake tells the attributes it negotiated (Params),
// the owner moves its QP to RTR and RTS with them (QP.Connect, or
// ibv_modify_qp with rdma_init_qp_attr's), and the dialer then sends the
// RTU (Conn.Establish).

// ConnParams are the attributes a connection's handshake negotiated for
// one side's QP: QP.Connect(p.Remote, p.RemoteQPN, p.Options) connects it.
// Options.LocalPSN is the PSN the QP sends from (sq_psn), RemotePSN the
// one it expects (rq_psn); MaxRdAtomic and MaxDestRdAtomic are the
// initiator depth and responder resources agreed.
type ConnParams = provider.ConnParams

// Params returns what the QP accepting the request with AcceptOptions
// whose ResponderResources and InitiatorDepth are zero is connected with:
// an AcceptOptions.SelfConnect's owner connects it so before (or after)
// Accept, whose REP names Options.RemotePSN. It is nil for a resolution,
// and from a daemon of before it.
func (r *Request) Params() *ConnParams {
	if r.UD() {
		return nil
	}
	return r.prov.Params()
}

// Params returns what a Dial with SelfConnect's QP is connected with, nil
// for other connections.
func (c *Conn) Params() *ConnParams { return c.params }

// Establish sends the RTU of a Dial with SelfConnect, once its owner has
// connected the QP (Params), as rdma_establish does: the acceptor's
// connection is then established. It returns ErrInvalid for another
// connection, or a second time.
func (c *Conn) Establish() error {
	if c.params == nil {
		return fmt.Errorf("softnic: establish with %v: only a Dial with SelfConnect waits for Establish: %w", c.peer, ErrInvalid)
	}
	return c.prov.Establish()
}
