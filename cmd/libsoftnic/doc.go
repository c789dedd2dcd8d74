// Command libsoftnic is not a command: built with -buildmode=c-shared and
// the libsoftnic build tag on Linux (it shares memory with the daemon
// through memfds, as attach mode does), it is a shared library with the
// public ABI of rdma-core's libibverbs and librdmacm (rdma-core 44, Debian
// bookworm), backed by a softnic daemon through the attach protocol, so that
// unmodified programs built for those libraries (perftest, rping,
// ibv_devinfo, ibv_rc_pingpong …) run on softnic with no kernel module and
// no root. Build it with
//
//	cmd/libsoftnic/build.sh DIR
//
// and run a program on it with softnic run (or LD_LIBRARY_PATH=DIR and
// SOFTNIC_SOCKET=PATH): see the README's "Running RDMA programs on softnic".
//
// # Design
//
// One implementation of the attach protocol's client: the verbs are Go
// over package nic's attach mode (nic.Open with Config.Attach), the same
// code Go programs use, and a thin C layer owns only the ABI: the
// structures programs read (ibv_context preceded by its verbs_context, so
// that the inline verbs of <infiniband/verbs.h> find their ops, those
// softnic lacks left NULL so that the inlines answer EOPNOTSUPP; ibv_pd,
// ibv_mr with its keys, ibv_cq, ibv_qp with qp_num and state, ibv_srq,
// ibv_ah, ibv_comp_channel with a pollable descriptor; rdma_cm_id,
// rdma_event_channel, rdma_cm_event), the entry points with their symbol
// versions (abi/libsoftnic.map), and the calls softnic does not support, each
// answering EOPNOTSUPP (or NULL with errno set) and naming itself once on
// stderr. The extended verbs with rxe's behaviour (abi/verbs_ex.c:
// ibv_query_device_ex, ibv_advise_mr, ibv_create_cq_ex, ibv_create_qp_ex
// and its ibv_wr_* work request API) are C over the ordinary ones and a
// few Go calls (snPrefetchMR): an extended CQ polls one
// completion at a time through ibv_poll_cq's path, and an extended QP
// builds the ibv_send_wr chain of ibv_post_send in arrays allocated with
// it, posted whole or not at all at ibv_wr_complete. The C layer (abi/)
// is a library of its own, the one programs load: one file provides both
// libraries, its SONAME libibverbs.so.1, and librdmacm.so.1 is a symbolic
// link to it, which the dynamic loader maps once (it recognises the file).
// So are libmlx5.so.1 and libefa.so.1, the two provider libraries Debian's
// perftest links against: their few entry points answer EOPNOTSUPP, and
// none of rdma-core's libraries is loaded at all. This package is the Go
// side, libsoftnic-go.so beside it, which the C layer loads (dlopen) at
// the first call that needs it (abi/golib.c) and calls through pointers
// (abi/golib.h; build.sh lists them from the Go library's header); it
// calls back the few C functions it needs through the struct sn_abi the C
// layer hands it then (snLinkABI).
//
// Memory: a C program registers memory it owns (malloc'd, stack, its data,
// an anonymous mmap) and passes its own addresses in every work request
// and to its peers, while the daemon can reach only memory it maps too.
// ibv_reg_mr therefore moves the pages holding the buffer onto a memfd in
// place (package pages: the contents are copied into the memfd and the
// memfd is mapped over the same addresses, so every pointer stays valid)
// and registers that memfd range at the program's address
// (nic.PD.RegShared, which the daemon maps): the daemon then moves data
// straight to and from the program's pages, and its atomics are atomic
// for the program too. The alternative, the daemon reading and writing the
// program's memory with process_vm_readv/writev, would cost a system call
// per access and could not make an atomic atomic. The price of moving is a
// copy of the registered pages at ibv_reg_mr and at the last ibv_dereg_mr
// of them (when they move back to private memory), measured in the
// README; moved pages are not inherited by fork (MADV_DONTFORK, as
// ibv_fork_init does), and MAP_SHARED mappings and huge pages cannot be
// registered (see package pages).
//
// fork: a Go runtime does not survive fork(). The Go side is therefore
// loaded at the first call, not with the program: a child forked before
// it (a server that forks for each client, as qperf's) loads a runtime of
// its own. In a child forked after it (without exec) the calls that open a
// device fail with EOPNOTSUPP, said on stderr in C (abi/golib.c), rather
// than wait for ever on the runtime's threads, which the child lacks.
//
// Completion events (events.go): a completion channel's descriptor is an
// epoll set of its CQs' wakeup descriptors (nic.CQ.Wakeup), which the
// daemon signals itself when a CQ that ibv_req_notify_cq armed gets its
// completion: a program asleep in poll, epoll or ibv_get_cq_event is woken
// by the daemon, with no thread of its own in between. A thread that
// waits in a blocking ibv_get_cq_event first watches the channel's armed
// CQs itself for a few round trips, and takes the event with no thread
// woken; whichever claims an arming first delivers its event, once.
// (testdata/event_pingpong.c in package tests, 3,000 round trips of 8-byte
// SENDs, both sides on one daemon of a 2-CPU VM, five runs of each,
// alternating: sleeping in poll, medians 51-62 µs and 99th percentiles
// 100-150 µs, where a goroutine per arming that wrote the CQ to a pipe
// took 69-218 and 349-419 µs; in ibv_get_cq_event, medians 29-31 against
// 32-34 µs, 99th percentiles 73-125 against 182-379 µs.) A signal that
// comes while the thread watches ends the wait with EINTR, as one that
// comes while it sleeps.
//
// The connection manager: librdmacm's calls run on package nic's
// connection manager (Device.Listen, Dial, Request.Accept and Reject,
// Conn.Close), with the QP the program created on the rdma_cm_id;
// events reach the program through the event channel, whose descriptor
// polls readable while events wait. An rdma_cm_id of the UDP port space
// (RDMA_PS_UDP) has a UD QP, in RTS with RDMA_UDP_QKEY from
// rdma_create_qp on, and no connection (cm_ud.go): rdma_listen is
// Device.ListenUD, rdma_accept Request.AcceptUD, and rdma_connect
// Device.Resolve, whose ESTABLISHED carries the peer's QPN, Q_Key and
// address handle attributes in param.ud. An id of the IB port space
// (RDMA_PS_IB) is either, by its QP type (RC unless rdma_getaddrinfo's
// ai_qp_type asks for UD), with the IB port space's service IDs
// (the PortSpace options of package nic's calls). A QP the program creates
// and connects itself (rping -q: the id has none, conn_param's qp_num
// names it) gets the attributes the handshake negotiated from
// rdma_init_qp_attr, and rdma_establish sends the dialer's RTU after its
// CONNECT_RESPONSE (cm_self.go, package nic's SelfConnect).
//
// Multicast (mcast.go) is rxe's and librdmacm's on RoCEv2:
// ibv_attach_mcast and ibv_detach_mcast are package nic's
// QP.AttachMulticast and DetachMulticast, and rdma_join_multicast (or
// _ex, a full or send-only member) of a UD id needs no subnet
// administrator: the group's GID is its IPv4-mapped address, its Q_Key
// RDMA_UDP_QKEY, and RDMA_CM_EVENT_MULTICAST_JOIN carries them with the
// multicast QPN and the program's context in param.ud, the id's QP
// attached already; an address handle of the group's GID sends to the
// group at the daemon's port.
package main

func main() {}
