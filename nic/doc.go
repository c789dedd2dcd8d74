// Package nic is the softnic device and the client library linked into
// applications: it owns a UDP socket (port 4791 by default), the memory
// region table, the protection domains, CQs and QPs, and drives the
// transport state machines of package qp with packets and time.
//
// A Device reads its socket in batches on one goroutine, checks each
// packet's ICRC, hands it to the QP it is addressed to, and sends what the
// QP answers; a second goroutine runs the QPs' timers. An application that
// polls a CQ in a loop does the reading and processing itself, on its own
// goroutine, whenever its poll finds nothing, and the reader goroutine
// stays out of its way meanwhile (see package nic/internal/embedded's
// progress.go); CQ.Wait does the same for a while (Config.WaitSpin)
// before it sleeps. Posting a work
// request sends its first packets at once from the caller's goroutine.
// Each QP has a lock that whoever drives it holds from building its
// packets until the socket has taken them, so a QP's packets leave in PSN
// order whichever goroutine sends them; on 2 cores this run-to-completion
// beats handing packets to a per-QP worker, which costs a goroutine wakeup
// per batch (the latency benchmark in package tests measures it). The
// reader answers all the packets of a batch before it sends, so several
// requests asking for an ACK get one coalesced ACK.
// Every packet a device drops is counted (Device.Counters), never logged
// one by one; logs go through the *slog.Logger of the Config and are quiet
// by default.
//
// The verbs of libibverbs map onto methods: ibv_query_device →
// Device.Query, ibv_alloc_pd → Device.AllocPD,
// ibv_reg_mr → PD.RegMR, ibv_rereg_mr → MR.Rereg, ibv_advise_mr → MR.Prefetch, ibv_create_cq → Device.CreateCQ, ibv_create_qp →
// PD.CreateQP, ibv_modify_qp → QP.Modify (or QP.Connect), ibv_post_send →
// QP.PostSend, ibv_poll_cq → CQ.Poll (CQ.Wait blocks), ibv_destroy_qp,
// ibv_destroy_cq and ibv_destroy_srq → QP.Destroy, CQ.Destroy and
// SRQ.Destroy (ErrBusy while a QP uses the CQ or SRQ), ibv_resize_cq →
// CQ.Resize, ibv_modify_srq and ibv_query_srq → SRQ.Modify and SRQ.Attr
// (the SRQ limit's event is Config.OnSRQLimit, as a QP's error is
// Config.OnQPError), ibv_alloc_mw →
// PD.AllocMW (bound by a qp.WRBindMW work request), ibv_attach_mcast and
// ibv_detach_mcast → QP.AttachMulticast and QP.DetachMulticast (UD
// multicast to IPv4 groups, as rxe's on RoCEv2). Errors are
// errno-named sentinels of packages mr and qp, re-exported here, and work
// completions carry ibv_wc_status names (qp.WCStatus).
//
// The connection manager connects RC QPs by address, as rdma_cm does,
// with the IBTA CM protocol between the devices' QP1s: rdma_listen →
// Device.Listen, rdma_accept and rdma_reject → Request.Accept and
// Request.Reject, rdma_connect → Device.Dial, rdma_disconnect → Conn.Close.
// rdma_cm's UDP port space (RDMA_PS_UDP) has no connection: its listener
// (Device.ListenUD) answers each service ID resolution with a UD QP
// (Request.AcceptUD), and rdma_connect → Device.Resolve learns that QP and
// its Q_Key (SIDR_REQ, SIDR_REP). rdma_cm's IB port space (RDMA_PS_IB)
// carries either, by the calls' PortSpace options. A QP its owner connects
// itself (rdma_init_qp_attr, rdma_establish) takes the attributes the
// handshake negotiated (DialOptions.SelfConnect, Conn.Params,
// Conn.Establish). It holds the requests of peers it does not know within CMLimits, and
// answers a REQ with no more than the REQ until the requester shows it
// receives. The path MTU toward each peer is the route's, as rxe takes its
// interface's (Device.PathMTU, RoCEMTU), capped by Config.MTU.
//
// A process may also attach to the device of a softnic daemon (softnic
// serve) instead of running one (Config.Attach, or SOFTNIC_SOCKET): every
// process of a host then shares one NIC, one region table and one UDP
// port, as on a host with a real RDMA NIC, with the same API. The daemon
// side is package nic/attachd. Like the rxe userspace provider, an attached
// process and the daemon share each queue as a ring in memory both map
// (package shm): posting writes a WQE into the send ring and rings a
// doorbell eventfd only when the daemon asks for one (while a QP has
// requests outstanding the daemon takes new ones as it runs the QP), and
// Poll reads completions from the completion ring without a system call;
// Wait arms the ring and sleeps on an eventfd the daemon signals. Regions
// live in memfds the daemon maps too, so that it moves data straight to and
// from the process's memory; memory that is not shared is refused
// (ErrFault), because the daemon could not reach it (nor make an atomic
// atomic with respect to the process) without a system call per access.
// The daemon copies every WQE out of shared memory and checks it before use:
// a corrupt one fails its QP alone. Each process has its own PDs and names
// its objects by handles only it can use; when it detaches, exits or dies,
// the daemon destroys all of them and disconnects its connections.
//
// One API, two providers. The public types (Device, PD, MR, MW, CQ, SRQ,
// QP, Listener, Request, Conn) hold what both kinds of device share and
// send every verb to the device's provider, as libibverbs sends each to
// its provider's verbs_context_ops: the embedded provider runs the NIC in
// this process, the attached one asks the daemon. Their interfaces are
// package nic/internal/provider's, over objects of the providers' own,
// which the public types wrap; what comes back up (a QP to wrap, a QP's
// error) goes through provider.Up. What a provider lacks is an optional
// interface whose absence is ErrNotSupported (or the zero value of a
// query) in one place. The files, by owner:
//
//   - the façade: provider.go, device.go, resources.go, mw.go, connect.go,
//     cm_conn.go, counters.go, errors.go, trace.go, qperror.go, query.go,
//     pathmtu.go, layers.go, attach.go (which mode, and the connection to
//     a trusted daemon), attach_cred.go (which daemon it trusts) and
//     embedded_hooks.go (the hooks of package nic/internal/hooks, through
//     which a daemon reaches the embedded provider);
//   - the embedded provider is package nic/internal/embedded, with its
//     R_Key guard (package nic/internal/guard), its routes to peers
//     (nic/internal/route) and its timer queue (nic/internal/timers);
//   - the attached provider is package nic/internal/attached.
//
// The daemon side, which drives the embedded device through those hooks,
// is package nic/attachd; the attach protocol between it and the attached
// provider is package nic/internal/attachproto, which both sides convert
// their types to and from.
package nic
