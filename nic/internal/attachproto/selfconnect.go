package attachproto

import "github.com/softnic/softnic/nic/internal/provider"

// A connection whose QP its owner connects (nic.DialOptions.SelfConnect,
// nic.AcceptOptions.SelfConnect): dial answers at the REP, with the
// attributes the process moves its QP to RTR and RTS with
// (ConnResult.Params), and establish then sends the RTU; accept_request
// tells those of the acceptor's QP (RequestResult.Params). A daemon of
// before them ignores SelfConnect and answers without Params, which the
// process takes as EOPNOTSUPP, and refuses establish as unknown.
const OpEstablish = "establish" // HandleArgs: the connection's handle

// ConnParams are the attributes a self-connected QP takes.
type ConnParams = provider.ConnParams
