package nic

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
)

// The attach protocol, between an attached process (the client) and the
// daemon that hosts its resources. The client connects to the daemon's
// control socket and sends the line {"cmd":"attach"}; from then on both
// sides send attachMsgs, one JSON line each, with the file descriptors the
// line announces in "fds" (shm.Conn). The daemon's first message answers
// the attach line (id 0) and carries the process's doorbell: an eventfd and
// the doorbell page.
//
// A request has an id and an op; its reply has the same id and a result or
// an error. Replies come in any order: calls that wait for the network
// (dial, accept_request, accept, disconnect) are answered when done, and
// the client may cancel one ({"op":"cancel"}). The daemon also sends events
// (no id): "conn_ended" when a connection it carries for the client ends,
// "qp_error" when one of the client's QPs enters the error state by itself.
//
// Objects are named by handles the daemon hands out per process; a process
// can name only its own, which is what keeps processes apart.
type attachMsg struct {
	ID     uint64          `json:"id,omitempty"`
	Op     string          `json:"op,omitempty"`
	FDs    int             `json:"fds,omitempty"` // descriptors sent with the message
	Args   json.RawMessage `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Error, Code and Detail describe a failed call (or why a connection
	// ended): the text, the sentinel's name (attachErrors) and, for
	// *RejectError and *QPError, the error's fields.
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

// attachLine is what a client sends first on the control socket.
const attachLine = `{"cmd":"attach"}`

// attachMaxLine bounds one message of the protocol.
const attachMaxLine = 64 << 10

// The operations of the attach protocol.
const (
	opAllocPD       = "alloc_pd"
	opDeallocPD     = "dealloc_pd"
	opAllocMR       = "alloc_mr"   // with the memfd of the region's memory
	opRegMR         = "reg_mr"     // over memory of an earlier alloc_mr
	opRegShared     = "reg_shared" // with the memfd the process maps the region's memory from
	opDeregMR       = "dereg_mr"   //
	opCreateCQ      = "create_cq"  // replied with the ring's memfd and the CQ's eventfd
	opCreateSRQ     = "create_srq" // replied with the ring's memfd
	opCreateQP      = "create_qp"  // replied with the send (and receive) ring's memfds
	opModifyQP      = "modify_qp"
	opQueryQP       = "query_qp"
	opDestroyQP     = "destroy_qp"
	opDestroyCQ     = "destroy_cq"
	opDestroySRQ    = "destroy_srq"
	opAllocMW       = "alloc_mw"
	opDeallocMW     = "dealloc_mw"
	opCounters      = "counters"
	opListen        = "listen"
	opCloseListener = "close_listener"
	opAcceptRequest = "accept_request" // waits for a connection request
	opAccept        = "accept"         // waits for the RTU; replied with the QP's rings
	opReject        = "reject"
	opDial          = "dial" // waits for the REP; replied with the QP's rings
	opDisconnect    = "disconnect"
	opCancel        = "cancel"
	evConnEnded     = "conn_ended"
	evQPError       = "qp_error"
)

type helloResult struct {
	Addr     netip.AddrPort
	MTU      int
	Features udp.Features
	PID      int        // the daemon's
	Attr     DeviceAttr // what the process's device supports (Device.Query)
}

type handleArgs struct{ H uint32 }

type pdResult struct {
	H  uint32
	PD mr.PDHandle
}

type allocMWArgs struct {
	PD   uint32
	Type mr.WindowType
}

type mwResult struct {
	H    uint32
	RKey uint32
}

type allocMRArgs struct {
	PD     uint32
	Size   int
	Access mr.Access
}

type regMRArgs struct {
	PD     uint32
	Buf    uint32 // the MR whose memory holds the new region
	Off    int
	Len    int
	Access mr.Access
}

// regSharedArgs registers Len bytes at offset Off of the memfd sent with
// the request, which the process maps at IOVA (PD.RegShared).
type regSharedArgs struct {
	PD     uint32
	Off    int64
	Len    int
	IOVA   uint64
	Access mr.Access
}

type mrResult struct {
	H          uint32
	LKey, RKey uint32
	Addr       uint64
}

type createCQArgs struct{ Depth int }

type cqResult struct {
	H     uint32
	Depth int
}

type createSRQArgs struct {
	PD            uint32
	Depth, MaxSGE int
}

type srqResult struct {
	H             uint32
	Depth, MaxSGE int
}

// qpConfigArgs is a QPConfig with its CQs and SRQ named by handle.
type qpConfigArgs struct {
	Type                                                    qp.Type
	SendCQ, RecvCQ, SRQ                                     uint32
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	SignalAll                                               bool
}

type createQPArgs struct {
	PD     uint32
	Config qpConfigArgs
}

// qpResult describes a QP the daemon created: its number, its slot in the
// doorbell page (shm.Doorbell), its queue sizes with the defaults filled
// in, and which descriptors carry its rings.
type qpResult struct {
	H      uint32
	QPN    uint32
	Slot   uint32
	Config qpConfigArgs
	Attr   qp.Attr
}

type modifyQPArgs struct {
	H    uint32
	Attr qp.Attr
	Mask qp.AttrMask
}

type queryQPResult struct {
	Attr   qp.Attr
	Status qp.Status
}

type listenArgs struct {
	Port    uint16
	PD      uint32
	QP      qpConfigArgs
	Backlog int
}

type listenResult struct {
	H    uint32
	Port uint16
}

type requestResult struct {
	H       uint32
	Private []byte
	Remote  netip.AddrPort
}

type acceptArgs struct {
	Request uint32
	Opts    AcceptOptions
	UseQP   uint32 // AcceptOptions.UseQP's handle, 0 for a new QP
}

type rejectArgs struct {
	Request uint32
	Private []byte
}

type dialArgs struct {
	Remote                             netip.AddrPort
	Port                               uint16
	PD                                 uint32
	QP                                 qpConfigArgs
	Private                            []byte
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	MTU                                int
	Timeout, CMRetries, CMTimeout      uint8
	UseQP                              uint32 // DialOptions.UseQP's handle, 0 for a new QP
}

type connResult struct {
	H       uint32
	QP      qpResult
	Private []byte
	Remote  netip.AddrPort
}

type cancelArgs struct{ Target uint64 }

type connEndedEvent struct{ H uint32 }

// qpErrorEvent tells that QP H entered the error state by itself, with the
// status of the error completion that moved it there (Config.OnQPError).
type qpErrorEvent struct {
	H     uint32
	Cause qp.WCStatus
}

// attachErrors names the sentinel errors that cross the socket, so that
// errors.Is holds for an attached device's errors as for an embedded one's.
var attachErrors = []struct {
	code string
	err  error
}{
	{"ECLOSED", ErrClosed}, {"ECONNREFUSED", ErrConnRefused}, {"ETIMEDOUT", ErrTimedOut},
	{"ECONNRESET", ErrConnReset}, {"EOVERFLOW", ErrOverflow}, {"EINVAL", ErrInvalid},
	{"EBUSY", ErrBusy}, {"ENOMEM", ErrNoMem}, {"EAGAIN", ErrAgain}, {"EOPNOTSUPP", ErrNotSupported},
	{"EFAULT", ErrFault}, {"EACCES", ErrAccess}, {"FI_ENOKEY", mr.ErrNoKey}, {"FI_EKEYREJECTED", mr.ErrKeyRejected},
	{"ECANCELED", context.Canceled}, {"EDEADLINE", context.DeadlineExceeded},
}

// setError describes err in m.
func (m *attachMsg) setError(err error) {
	m.Error = err.Error()
	for _, e := range attachErrors {
		if errors.Is(err, e.err) {
			m.Code = e.code
			break
		}
	}
	var rej *RejectError
	var qpe *QPError
	switch {
	case errors.As(err, &rej):
		m.Code = "REJ"
		m.Detail, _ = json.Marshal(rej)
	case errors.As(err, &qpe):
		m.Code = "QPERR"
		m.Detail, _ = json.Marshal(qpe)
	}
}

// err rebuilds the error m describes, nil if none.
func (m *attachMsg) err() error {
	if m.Error == "" {
		return nil
	}
	switch m.Code {
	case "REJ":
		var rej RejectError
		if json.Unmarshal(m.Detail, &rej) == nil {
			return &remoteError{msg: m.Error, err: &rej}
		}
	case "QPERR":
		var qpe QPError
		if json.Unmarshal(m.Detail, &qpe) == nil {
			return &remoteError{msg: m.Error, err: &qpe}
		}
	}
	for _, e := range attachErrors {
		if e.code == m.Code {
			return &remoteError{msg: m.Error, err: e.err}
		}
	}
	return errors.New(m.Error)
}

// remoteError is an error the daemon returned: its text, and the error it
// wraps for errors.Is and errors.As.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// args describes cfg to the daemon, its CQs and SRQ by handle.
func (cfg *QPConfig) args() qpConfigArgs {
	a := qpConfigArgs{
		Type: cfg.Type, MaxSendWR: cfg.MaxSendWR, MaxRecvWR: cfg.MaxRecvWR, MaxSendSGE: cfg.MaxSendSGE,
		MaxRecvSGE: cfg.MaxRecvSGE, MaxInline: cfg.MaxInline, SignalAll: cfg.SignalAll,
	}
	if cfg.SendCQ != nil {
		a.SendCQ = daemonHandle(cfg.SendCQ.prov)
	}
	if cfg.RecvCQ != nil {
		a.RecvCQ = daemonHandle(cfg.RecvCQ.prov)
	}
	if cfg.SRQ != nil {
		a.SRQ = daemonHandle(cfg.SRQ.prov)
	}
	return a
}

// withDefaults fills in the queue sizes a zero field stands for, so that
// both sides size the rings alike.
func (a qpConfigArgs) withDefaults() qpConfigArgs {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if a.Type == 0 {
		a.Type = qp.RC
	}
	def(&a.MaxSendWR, qp.DefaultMaxWR)
	def(&a.MaxRecvWR, qp.DefaultMaxWR)
	def(&a.MaxSendSGE, qp.DefaultMaxSGE)
	def(&a.MaxRecvSGE, qp.DefaultMaxSGE)
	def(&a.MaxInline, qp.DefaultMaxInline)
	if a.RecvCQ == 0 {
		a.RecvCQ = a.SendCQ
	}
	return a
}

// dialArgsOf describes a Dial's options.
func dialArgsOf(remote netip.AddrPort, port uint16, o *DialOptions) dialArgs {
	return dialArgs{
		Remote: remote, Port: port, PD: daemonHandle(o.PD.prov), QP: o.QP.args(), Private: o.PrivateData,
		ResponderResources: o.ResponderResources, InitiatorDepth: o.InitiatorDepth,
		RetryCount: o.RetryCount, RNRRetryCount: o.RNRRetryCount, MTU: o.MTU,
		Timeout: o.Timeout, CMRetries: o.CMRetries, CMTimeout: o.CMTimeout, UseQP: qpHandle(o.UseQP),
	}
}
