// Package attachproto is the attach protocol, between an attached process
// (the client, package nic's attached provider) and the daemon that hosts
// its resources (package nic/attachd): its messages, their arguments and
// results, and the errors that cross the socket. Each side converts its
// own types to and from these at its edge; the package holds no state and
// does no I/O.
//
// The client connects to the daemon's control socket and sends the attach
// line, {"cmd":"attach","version":N} of its Version (AttachLine); from then on
// both sides send Msgs, one JSON line each, with the file descriptors the
// line announces in "fds" (shm.Conn). The daemon's first message answers
// the attach line (id 0): a Hello that states the daemon's Version and
// carries the process's doorbell, an eventfd and the doorbell page, or a
// refusal. A daemon refuses a client of another version, or of none, with
// a *VersionError (EPROTONOSUPPORT), and a client leaves a daemon that
// states another version or none: the two sides of a version speak it
// alone.
//
// The wakeups: the process signals its doorbell eventfd (a write of 1),
// and the daemon waits on an epoll fd of its own in which the eventfd is
// registered; the daemon never reads or writes it. A CQ's wakeup is the
// other way round: create_cq's second descriptor is an epoll fd in which
// an eventfd the daemon keeps to itself is registered edge-triggered; each
// signal of the daemon's (once per arming of the ring) makes the epoll fd
// readable, and the process takes the wakeup with epoll_wait and a
// timeout of 0, then arms the ring again and looks at it before it waits
// (shm.Waiter). Neither side ever holds a descriptor whose open file
// description the other can make blocking and then use to block it.
//
// A request has an id and an op; its reply has the same id and a result or
// an error. Replies come in any order: calls that wait for the network
// (dial, accept_request, accept, disconnect) are answered when done, and
// the client may cancel one ({"op":"cancel"}). The daemon also sends events
// (no id): "conn_ended" when a connection it carries for the client ends,
// "qp_error" when one of the client's QPs enters the error state by itself,
// "srq_limit" when one of its SRQs reaches the limit modify_srq armed.
//
// Objects are named by handles the daemon hands out per process; a process
// can name only its own, which is what keeps processes apart.
package attachproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic/cm"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
)

// Msg is one line of the protocol: a request, its reply or an event.
type Msg struct {
	ID     uint64          `json:"id,omitempty"`
	Op     string          `json:"op,omitempty"`
	FDs    int             `json:"fds,omitempty"` // descriptors sent with the message
	Args   json.RawMessage `json:"args,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	// Error, Code and Detail describe a failed call (or why a connection
	// ended): the text, the sentinel's name (sentinels) and, for
	// *RejectError and *QPError, the error's fields.
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
	Detail json.RawMessage `json:"detail,omitempty"`
}

// Version is the attach protocol's version, which the client sends in its
// attach line and the daemon states in its Hello; the two must be equal.
// Bump it with any change a client or daemon of the previous version
// would misread: to a message, an op, an argument or a result, the
// descriptors a message carries, the shared memory's layout, or the
// wakeup scheme. Version 1 is the protocol before commit 967f5db, where
// create_cq's second descriptor was an eventfd the process read; 2 is
// 967f5db's, where it is an epoll fd (see above), and the first that
// names itself: neither side of 1, nor of 2 before this constant, sent a
// version, so that a side that states none speaks one of the two, and
// the other side cannot tell which; it refuses it.
const Version = 2

// CmdAttach is the command of the attach line.
const CmdAttach = "attach"

// AttachRequest is the attach line, the first a client sends on the
// control socket.
type AttachRequest struct {
	Cmd     string `json:"cmd"`               // CmdAttach
	Version int    `json:"version,omitempty"` // the client's; 0, absent: a client of before versions
}

// MaxAttachLine bounds the attach line a daemon reads, its newline
// included.
const MaxAttachLine = 128

// AttachLine returns the attach line of a client of protocol version v,
// without its newline; a client of this package sends AttachLine(Version).
func AttachLine(v int) []byte {
	b, _ := json.Marshal(AttachRequest{Cmd: CmdAttach, Version: v})
	return b
}

// ParseAttachLine decodes the first line a client sent on the control
// socket, which may end in a newline. It returns an error wrapping
// mr.ErrInvalid for a line that is not JSON or not the attach command;
// it does not check the version (CheckVersion does).
func ParseAttachLine(line []byte) (AttachRequest, error) {
	var r AttachRequest
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("attach line: %v: %w", err, mr.ErrInvalid)
	}
	if r.Cmd != CmdAttach {
		return r, fmt.Errorf("the command %q is not attach: %w", r.Cmd, mr.ErrInvalid)
	}
	return r, nil
}

// CheckVersion returns nil if the daemon, of version daemon, and the
// client, of version client, speak one protocol, or else a *VersionError.
func CheckVersion(daemon, client int) error {
	if daemon == Version && client == Version {
		return nil
	}
	return &VersionError{Daemon: daemon, Client: client}
}

// ErrProtoNotSupported (EPROTONOSUPPORT): a daemon and a client that speak
// different versions of the attach protocol (VersionError); package nic's
// ErrProtoNotSupported. libibverbs fails ibv_get_device_list with ENOSYS
// when the kernel's ABI is not its own; EPROTONOSUPPORT says more
// precisely what is wrong, and is not what a verb softnic lacks answers
// (EOPNOTSUPP).
var ErrProtoNotSupported = errors.New("protocol not supported (EPROTONOSUPPORT)")

// VersionError is an attach that failed because the daemon and the
// client speak different versions of the attach protocol, 0 for a side
// that stated none (a release before versions). It is errors.Is
// ErrProtoNotSupported, and crosses the socket with its fields.
type VersionError struct {
	Daemon, Client int
}

func (e *VersionError) Error() string {
	name := func(v int) string {
		if v == 0 {
			return "none (a release before protocol versions)"
		}
		return strconv.Itoa(v)
	}
	return fmt.Sprintf("the daemon speaks attach protocol %s, the library %s: use a library and a daemon of one release: %v",
		name(e.Daemon), name(e.Client), ErrProtoNotSupported)
}

func (e *VersionError) Unwrap() error { return ErrProtoNotSupported }

// MaxLine bounds one message of the protocol.
const MaxLine = 64 << 10

// The operations of the attach protocol.
const (
	OpAllocPD       = "alloc_pd"
	OpDeallocPD     = "dealloc_pd"
	OpAllocMR       = "alloc_mr"   // with the memfd of the region's memory
	OpRegMR         = "reg_mr"     // over memory of an earlier alloc_mr
	OpRegShared     = "reg_shared" // with the memfd the process maps the region's memory from
	OpDeregMR       = "dereg_mr"   //
	OpCreateCQ      = "create_cq"  // replied with the ring's memfd and the CQ's wakeup (an epoll fd)
	OpCreateSRQ     = "create_srq" // replied with the ring's memfd
	OpCreateQP      = "create_qp"  // replied with the send (and receive) ring's memfds
	OpModifyQP      = "modify_qp"
	OpQueryQP       = "query_qp"
	OpDestroyQP     = "destroy_qp"
	OpDestroyCQ     = "destroy_cq"
	OpDestroySRQ    = "destroy_srq"
	OpAllocMW       = "alloc_mw"
	OpDeallocMW     = "dealloc_mw"
	OpCounters      = "counters"
	OpListen        = "listen"
	OpCloseListener = "close_listener"
	OpOpenListener  = "open_listener"  // a held listener takes requests (OpenListenerArgs)
	OpAcceptRequest = "accept_request" // waits for a connection request
	OpAccept        = "accept"         // waits for the RTU; replied with the QP's rings
	OpReject        = "reject"
	OpDial          = "dial" // waits for the REP; replied with the QP's rings
	OpDisconnect    = "disconnect"
	OpCancel        = "cancel"
	EvConnEnded     = "conn_ended"
	EvQPError       = "qp_error"
)

// WaitsForNetwork reports whether the daemon answers op only once
// something comes from the network (a connection request, a REP, an RTU, a
// DREP, a SIDR_REP), however long that takes; it answers every other
// operation at once, from what it holds, in the order they came.
func WaitsForNetwork(op string) bool {
	switch op {
	case OpAcceptRequest, OpAccept, OpDial, OpDisconnect, OpResolve:
		return true
	}
	return false
}

// The operations and event on the sizes and limits of CQs and SRQs.
const (
	OpResizeCQ  = "resize_cq"  // replied with the new ring's memfd
	OpModifySRQ = "modify_srq" // replied with the new ring's memfd if the SRQ was resized
	OpQuerySRQ  = "query_srq"
	EvSRQLimit  = "srq_limit"
)

// OpReregMR changes the PD and/or the access of a region of the process
// in place (ibv_rereg_mr); its handle and keys stay.
const OpReregMR = "rereg_mr"

// OpPrefetchMR makes pages of an on-demand paging region of the process
// resident ahead of use (ibv_advise_mr's prefetch advice).
const OpPrefetchMR = "prefetch_mr"

// PrefetchMRArgs names region H and the range [Addr, Addr+Len) of its
// address space to prefetch (prefetch_mr).
type PrefetchMRArgs struct {
	H         uint32
	Addr, Len uint64
}

// OpAttachMcast and OpDetachMcast attach a UD QP of the process to a
// multicast group and detach it (ibv_attach_mcast, ibv_detach_mcast).
const (
	OpAttachMcast = "attach_mcast"
	OpDetachMcast = "detach_mcast"
)

// Hello is the daemon's answer to the attach line.
type Hello struct {
	Addr     netip.AddrPort
	MTU      int
	Features udp.Features
	PID      int             // the daemon's
	Version  int             // the daemon's protocol version (Version); absent, 0, from a daemon of before versions
	Attr     json.RawMessage // a nic.DeviceAttr: what the process's device supports (Device.Query)
}

// HandleArgs names one object of the process, for the ops that take
// nothing else (dealloc_pd, dereg_mr, destroy_*, query_qp, dealloc_mw,
// close_listener, accept_request, disconnect).
type HandleArgs struct{ H uint32 }

// PDResult answers alloc_pd: the PD's handle, and its handle in the
// daemon's region table.
type PDResult struct {
	H  uint32
	PD mr.PDHandle
}

// AllocMWArgs asks for a memory window of a type in PD.
type AllocMWArgs struct {
	PD   uint32
	Type mr.WindowType
}

// MWResult answers alloc_mw.
type MWResult struct {
	H    uint32
	RKey uint32
}

// AllocMRArgs registers Size bytes of the memfd sent with the request
// (alloc_mr).
type AllocMRArgs struct {
	PD     uint32
	Size   int
	Access mr.Access
}

// RegMRArgs registers more memory of a region of alloc_mr (reg_mr).
type RegMRArgs struct {
	PD     uint32
	Buf    uint32 // the MR whose memory holds the new region
	Off    int
	Len    int
	Access mr.Access
}

// RegSharedArgs registers Len bytes at offset Off of the memfd sent with
// the request, which the process maps at IOVA (PD.RegShared).
type RegSharedArgs struct {
	PD     uint32
	Off    int64
	Len    int
	IOVA   uint64
	Access mr.Access
}

// MRResult answers alloc_mr, reg_mr and reg_shared.
type MRResult struct {
	H          uint32
	LKey, RKey uint32
	Addr       uint64
}

// ReregMRArgs re-registers region H (rereg_mr): Flags says what changes,
// PD is the process's handle of the new PD (with mr.ReregPD) and Access
// the new access (with mr.ReregAccess).
type ReregMRArgs struct {
	H      uint32
	Flags  mr.ReregFlags
	PD     uint32
	Access mr.Access
}

// CreateCQArgs asks for a CQ of Depth entries.
type CreateCQArgs struct{ Depth int }

// CQResult answers create_cq.
type CQResult struct {
	H     uint32
	Depth int
}

// CreateSRQArgs asks for an SRQ of PD.
type CreateSRQArgs struct {
	PD            uint32
	Depth, MaxSGE int
}

// SRQResult answers create_srq.
type SRQResult struct {
	H             uint32
	Depth, MaxSGE int
}

// QPConfig is a nic.QPConfig with its CQs and SRQ named by handle.
type QPConfig struct {
	Type                                                    verbs.Type
	SendCQ, RecvCQ, SRQ                                     uint32
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline int
	SignalAll                                               bool
}

// CreateQPArgs asks for a QP of PD.
type CreateQPArgs struct {
	PD     uint32
	Config QPConfig
}

// QPResult describes a QP the daemon created: its number, its slot in the
// doorbell page (shm.Doorbell), its queue sizes with the defaults filled
// in, and which descriptors carry its rings.
type QPResult struct {
	H      uint32
	QPN    uint32
	Slot   uint32
	Config QPConfig
	Attr   verbs.Attr
}

// ModifyQPArgs is QP.Modify of QP H.
type ModifyQPArgs struct {
	H    uint32
	Attr verbs.Attr
	Mask verbs.AttrMask
}

// McastArgs names QP H and the multicast group of attach_mcast and
// detach_mcast.
type McastArgs struct {
	H     uint32
	Group netip.Addr
}

// QueryQPResult answers modify_qp and query_qp.
type QueryQPResult struct {
	Attr   verbs.Attr
	Status qp.Status
}

// ListenArgs is Device.Listen: the QPs of the connections accepted are
// made with QP in PD.
type ListenArgs struct {
	Port    uint16
	PD      uint32
	QP      QPConfig
	Backlog int
	// PortSpace is ListenOptions.PortSpace (0: the default). A daemon of
	// before it ignores it, and listens in the TCP port space.
	PortSpace uint16 `json:",omitempty"`
	// Held is ListenOptions.Held. A daemon of before it ignores it and
	// listens at once, and refuses open_listener as unknown.
	Held bool `json:",omitempty"`
}

// OpenListenerArgs is Listener.Open: the held listener H takes requests,
// with room for Backlog.
type OpenListenerArgs struct {
	H       uint32
	Backlog int
}

// ListenResult answers listen.
type ListenResult struct {
	H    uint32
	Port uint16
}

// RequestResult answers accept_request with a connection request.
type RequestResult struct {
	H       uint32
	Private []byte
	Remote  netip.AddrPort
	Params  *ConnParams `json:",omitempty"` // Request.Params (selfconnect.go)
}

// AcceptArgs accepts a connection request with nic.AcceptOptions.
type AcceptArgs struct {
	Request                            uint32
	PrivateData                        []byte
	ResponderResources, InitiatorDepth uint8
	RNRRetryCount                      uint8
	// Timeout is AcceptOptions.Timeout. A daemon of before it ignores it:
	// the QP takes the REQ's.
	Timeout     uint8  `json:",omitempty"`
	UseQP       uint32 // AcceptOptions.UseQP's handle, 0 for a new QP
	SelfConnect bool   `json:",omitempty"` // AcceptOptions.SelfConnect (selfconnect.go)
}

// RejectArgs is Request.Reject.
type RejectArgs struct {
	Request uint32
	Private []byte
}

// DialArgs is Device.Dial with nic.DialOptions.
type DialArgs struct {
	Remote                             netip.AddrPort
	Port                               uint16
	PD                                 uint32
	QP                                 QPConfig
	Private                            []byte
	ResponderResources, InitiatorDepth uint8
	RetryCount, RNRRetryCount          uint8
	MTU                                int
	Timeout, CMRetries, CMTimeout      uint8
	UseQP                              uint32 // DialOptions.UseQP's handle, 0 for a new QP
	PortSpace                          uint16 `json:",omitempty"` // DialOptions.PortSpace, as ListenArgs'
	SelfConnect                        bool   `json:",omitempty"` // DialOptions.SelfConnect (selfconnect.go)
	TrafficClass                       uint8  `json:",omitempty"` // DialOptions.TrafficClass
}

// ConnResult answers dial and accept: the connection's handle, and its
// QP's.
type ConnResult struct {
	H       uint32
	QP      QPResult
	Private []byte
	Remote  netip.AddrPort
	Params  *ConnParams `json:",omitempty"` // a dial with SelfConnect's (selfconnect.go)
}

// CancelArgs cancels the waiting call whose id is Target.
type CancelArgs struct{ Target uint64 }

// ConnEnded tells that connection H ended; the message's error says why.
type ConnEnded struct{ H uint32 }

// ResizeCQArgs resizes CQ H to Depth entries (resize_cq). The process
// polls no completion while it waits for the answer: the daemon moves
// those not polled, from the ring's consumer index on, to the start of the
// new ring, whose producer index is then their count, and unmaps the old.
type ResizeCQArgs struct {
	H     uint32
	Depth int
}

// ModifySRQArgs changes the attributes of SRQ H that Mask selects
// (modify_srq). The process posts nothing while it waits for the answer:
// the daemon takes what the ring holds first, and a resized SRQ gets a new
// ring, whose producer index starts at Prod.
type ModifySRQArgs struct {
	H    uint32
	Attr verbs.SRQAttr
	Mask verbs.SRQAttrMask
}

// ModifySRQResult answers modify_srq: whether the SRQ has a new ring,
// sent with the answer, and the producer index the process posts to it
// from.
type ModifySRQResult struct {
	Resized bool
	Prod    uint32
}

// SRQLimitEvent tells that SRQ H reached the limit modify_srq armed, which
// is disarmed (Config.OnSRQLimit).
type SRQLimitEvent struct{ H uint32 }

// QPErrorEvent tells that QP H entered the error state by itself, with the
// status of the error completion that moved it there (Config.OnQPError).
type QPErrorEvent struct {
	H     uint32
	Cause verbs.WCStatus
}

// ErrAccess (EACCES): a user the daemon does not serve, or a control
// socket of a user the client does not trust; package nic's ErrAccess.
var ErrAccess = errors.New("permission denied (EACCES)")

// sentinels names the sentinel errors that cross the socket, so that
// errors.Is holds for an attached device's errors as for an embedded one's.
var sentinels = []struct {
	code string
	err  error
}{
	{"ECLOSED", cm.ErrClosed}, {"ECONNREFUSED", cm.ErrConnRefused}, {"ETIMEDOUT", cm.ErrTimedOut},
	{"ECONNRESET", cm.ErrConnReset}, {"EOVERFLOW", qp.ErrOverflow}, {"EINVAL", mr.ErrInvalid},
	{"EBUSY", mr.ErrBusy}, {"ENOMEM", mr.ErrNoMem}, {"EAGAIN", mr.ErrAgain}, {"EOPNOTSUPP", mr.ErrNotSupported},
	{"EFAULT", mr.ErrFault}, {"EACCES", ErrAccess}, {"FI_ENOKEY", mr.ErrNoKey}, {"FI_EKEYREJECTED", mr.ErrKeyRejected},
	{"ECANCELED", context.Canceled}, {"EDEADLINE", context.DeadlineExceeded},
	{"EPROTONOSUPPORT", ErrProtoNotSupported},
}

// SetError describes err in m: its text, the code of the sentinel it is,
// and the fields of a *cm.RejectError, *cm.SIDRError, *cm.QPError or
// *VersionError.
func (m *Msg) SetError(err error) {
	m.Error = err.Error()
	for _, e := range sentinels {
		if errors.Is(err, e.err) {
			m.Code = e.code
			break
		}
	}
	var rej *cm.RejectError
	var qpe *cm.QPError
	var ver *VersionError
	var sidr *cm.SIDRError
	switch {
	case errors.As(err, &rej):
		m.Code = "REJ"
		m.Detail, _ = json.Marshal(rej)
	case errors.As(err, &sidr):
		m.Code = "SIDR"
		m.Detail, _ = json.Marshal(sidr)
	case errors.As(err, &qpe):
		m.Code = "QPERR"
		m.Detail, _ = json.Marshal(qpe)
	case errors.As(err, &ver):
		m.Detail, _ = json.Marshal(ver)
	}
}

// Err rebuilds the error m describes, nil if none: it has m's text, and
// errors.Is and errors.As find in it what they found in the error the
// other side described.
func (m *Msg) Err() error {
	if m.Error == "" {
		return nil
	}
	switch m.Code {
	case "REJ":
		var rej cm.RejectError
		if json.Unmarshal(m.Detail, &rej) == nil {
			return &remoteError{msg: m.Error, err: &rej}
		}
	case "QPERR":
		var qpe cm.QPError
		if json.Unmarshal(m.Detail, &qpe) == nil {
			return &remoteError{msg: m.Error, err: &qpe}
		}
	case "SIDR":
		var sidr cm.SIDRError
		if json.Unmarshal(m.Detail, &sidr) == nil {
			return &remoteError{msg: m.Error, err: &sidr}
		}
	case "EPROTONOSUPPORT":
		var ver VersionError
		if json.Unmarshal(m.Detail, &ver) == nil {
			return &remoteError{msg: m.Error, err: &ver}
		}
	}
	for _, e := range sentinels {
		if e.code == m.Code {
			return &remoteError{msg: m.Error, err: e.err}
		}
	}
	return errors.New(m.Error)
}

// remoteError is an error the other side described: its text, and the
// error it wraps for errors.Is and errors.As.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// WithDefaults fills in the queue sizes a zero field stands for, so that
// both sides size the rings alike.
func (a QPConfig) WithDefaults() QPConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if a.Type == 0 {
		a.Type = verbs.RC
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
