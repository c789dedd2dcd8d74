//go:build linux && libsoftnic

package main

/*
#include "softnic.h"
*/
import "C"

import (
	"context"
	"errors"
	"net/netip"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/wire/mad"
)

// librdmacm over package nic's connection manager: an rdma_cm_id is a
// cmID, whose listener, request or connection is nic's; events go to the
// id's event channel or, for a synchronous id (no channel), to the call
// that waits for them.

// cmEvent is an rdma_cm event on its way to the program.
type cmEvent struct {
	id, listen *C.struct_sn_cm_id
	typ        C.enum_rdma_cm_event_type
	status     C.int
	private    []byte
	// The connection's negotiated parameters, as rdma_conn_param.
	rr, depth uint8
	// ud: the event's parameters are rdma_ud_param's, of a UDP id
	// (cm_ud.go): the peer's QP, Q_Key and address for an address handle.
	ud        bool
	qpn, qkey uint32
	peer      netip.Addr
	// context is a multicast join's, the program's, given back as
	// param.ud's private_data (mcast.go).
	context unsafe.Pointer
}

// eventChannel is the Go side of an rdma_event_channel: its queued events,
// one byte each in the socket pair whose end r the program polls. A byte
// read with no event queued was an event's that rdma_migrate_id moved to
// another channel and could not take back (a reader had it already).
type eventChannel struct {
	r, w   int
	mu     sync.Mutex
	events []cmEvent
}

//export snCreateEventChannel
func snCreateEventChannel(ch *C.struct_sn_event_channel) {
	ch.h = C.uintptr_t(cgo.NewHandle(&eventChannel{r: int(ch.ch.fd), w: int(ch.w)}))
}

//export snDestroyEventChannel
func snDestroyEventChannel(ch *C.struct_sn_event_channel) { cgo.Handle(ch.h).Delete() }

func (ch *eventChannel) push(ev cmEvent) {
	ch.mu.Lock()
	ch.events = append(ch.events, ev)
	ch.mu.Unlock()
	unix.Write(ch.w, []byte{1})
}

// take removes the events of the id owner (a listener's CONNECT_REQUEST
// events too) and, without waiting, their bytes, and returns them.
func (ch *eventChannel) take(owner *C.struct_sn_cm_id) []cmEvent {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var taken []cmEvent
	kept := ch.events[:0]
	for _, e := range ch.events {
		if e.listen == owner || e.listen == nil && e.id == owner {
			taken = append(taken, e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(ch.events[len(kept):])
	ch.events = kept
	if len(taken) > 0 {
		unix.Recvfrom(ch.r, make([]byte, len(taken)), unix.MSG_DONTWAIT)
	}
	return taken
}

// owner is the id whose rdma_destroy_id waits for the event's
// acknowledgement: the listener of a CONNECT_REQUEST, else the event's id,
// as librdmacm counts them.
func (e *cmEvent) owner() *C.struct_sn_cm_id {
	if e.listen != nil {
		return e.listen
	}
	return e.id
}

// snNextEvent fills ev with the channel's oldest event, whose byte the
// caller has read; EAGAIN if there is none, the byte a moved event's. The
// event is counted as reported to its owner as it leaves the queue, under
// the channel's lock, which rdma_destroy_id takes to remove the owner's
// events still queued: each event is either removed or waited for.
//
//export snNextEvent
func snNextEvent(c *C.struct_sn_event_channel, ev *C.struct_sn_cm_event) C.int {
	ch := handleOf[*eventChannel](c.h)
	ch.mu.Lock()
	if len(ch.events) == 0 {
		ch.mu.Unlock()
		return C.EAGAIN
	}
	e := ch.events[0]
	ch.events = ch.events[1:]
	idOf(e.owner()).acks.report()
	ch.mu.Unlock()
	fillEvent(ev, &e)
	return 0
}

// snAckEvent counts ev acknowledged (rdma_ack_cm_event), which may let its
// owner's rdma_destroy_id end: ev's owner is not touched after.
//
//export snAckEvent
func snAckEvent(ev *C.struct_sn_cm_event) {
	idOf(ev.owner).acks.complete()
}

// eventAcks counts the events of an id the program read and acknowledged:
// as with librdmacm, rdma_destroy_id waits until every event it read is
// acknowledged, so that a thread handling an event never finds its id
// freed under it by another thread's rdma_destroy_id.
type eventAcks struct {
	mu                  sync.Mutex
	cond                sync.Cond
	reported, completed uint64
}

func (a *eventAcks) report() {
	a.mu.Lock()
	a.reported++
	a.mu.Unlock()
}

func (a *eventAcks) complete() {
	a.mu.Lock()
	a.completed++
	a.cond.Broadcast()
	a.mu.Unlock()
}

// wait returns once every event reported is acknowledged.
func (a *eventAcks) wait() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.completed < a.reported {
		a.cond.Wait()
	}
}

func fillEvent(ev *C.struct_sn_cm_event, e *cmEvent) {
	ev.owner = e.owner()
	ev.ev.id = &e.id.id
	if e.listen != nil {
		ev.ev.listen_id = &e.listen.id
	}
	ev.ev.event = e.typ
	ev.ev.status = e.status
	if e.ud {
		fillUDEvent(ev, e)
		return
	}
	p := (*C.struct_rdma_conn_param)(unsafe.Pointer(&ev.ev.param))
	if n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&ev.private_data)), len(ev.private_data)), e.private); n > 0 {
		p.private_data = unsafe.Pointer(&ev.private_data)
		p.private_data_len = C.uint8_t(n)
	}
	p.responder_resources, p.initiator_depth = C.uint8_t(e.rr), C.uint8_t(e.depth)
	p.retry_count, p.rnr_retry_count = 7, 7
}

// cmID is the Go side of an rdma_cm_id.
type cmID struct {
	cid *C.struct_sn_cm_id
	// The id's event channel, nil for a synchronous id. rdma_migrate_id
	// changes it, under chMu, which an event's delivery holds: an event
	// goes to the channel or is moved with the others.
	ch   atomic.Pointer[eventChannel]
	chMu sync.Mutex
	sync chan cmEvent // a synchronous id's events
	dev  *device
	done chan struct{} // closed by rdma_destroy_id, under chMu
	acks eventAcks     // of the events read from its channel

	mu       sync.Mutex
	local    netip.AddrPort // the bound address and rdma_cm port
	peer     netip.AddrPort // the peer's device (its UDP address)
	rport    uint16         // the peer's rdma_cm port
	listener *nic.Listener
	// accepting says the listener's requests are taken (rdma_listen);
	// before, it only holds the port (snReservePort).
	accepting bool
	lpd       *nic.PD // the listener's PD and CQ, which no QP uses:
	lcq       *nic.CQ // accepted connections use the program's QPs
	req       *nic.Request
	conn      *nic.Conn
	cancel    context.CancelFunc // of a connect under way
	ended     sync.Once          // DISCONNECTED is told once
	groups    []mcJoin           // the multicast groups joined (mcast.go)
	// ackTimeout is the local ACK timeout exponent the program set
	// (rdma_set_option's RDMA_OPTION_ID_ACK_TIMEOUT) for the QP this id
	// connects; 0: not set, the default (or the REQ's) then.
	ackTimeout uint8
	// tos is the type of service the program set (RDMA_OPTION_ID_TOS),
	// the traffic class of the connection rdma_connect makes and of the
	// address vectors of the id's UD events; 0 by default.
	tos uint8
}

//export snCreateID
func snCreateID(c *C.struct_sn_cm_id, ch *C.struct_sn_event_channel) {
	id := &cmID{cid: c, sync: make(chan cmEvent, 16), done: make(chan struct{})}
	id.acks.cond.L = &id.acks.mu
	if ch != nil {
		id.ch.Store(handleOf[*eventChannel](ch.h))
	}
	if c.id.verbs != nil {
		id.dev = deviceOf(c.id.verbs)
		go id.watchDevice()
	}
	c.h = C.uintptr_t(cgo.NewHandle(id))
}

// watchDevice tells the program, with DEVICE_REMOVAL, that the daemon is
// gone, unless the id is destroyed first.
func (id *cmID) watchDevice() {
	select {
	case <-id.dev.dev.Done():
		id.post(cmEvent{typ: C.RDMA_CM_EVENT_DEVICE_REMOVAL})
	case <-id.done:
	}
}

func idOf(c *C.struct_sn_cm_id) *cmID { return handleOf[*cmID](c.h) }

// post delivers an event of the id: to its channel, or to the synchronous
// call waiting for it (dropped if nothing takes a synchronous id's events).
func (id *cmID) post(ev cmEvent) {
	ev.id = id.cid
	if id.deliver(ev) {
		return
	}
	select {
	case id.sync <- ev:
	default:
	}
}

// deliver queues ev on the id's channel; false for a synchronous id. An
// event of an id being destroyed is dropped.
func (id *cmID) deliver(ev cmEvent) bool {
	id.chMu.Lock()
	defer id.chMu.Unlock()
	select {
	case <-id.done:
		return true
	default:
	}
	ch := id.ch.Load()
	if ch != nil {
		ch.push(ev)
	}
	return ch != nil
}

// snMigrateID moves the id, and its events not yet read, to the channel
// to, or makes it synchronous if to is nil (rdma_migrate_id); then, as
// librdmacm's, it waits until the program has acknowledged the events of
// the id it read, so that none is handled on the old channel after.
//
//export snMigrateID
func snMigrateID(c *C.struct_sn_cm_id, to *C.struct_sn_event_channel) {
	id := idOf(c)
	var dest *eventChannel
	if to != nil {
		dest = handleOf[*eventChannel](to.h)
	}
	id.migrate(dest)
	id.acks.wait()
}

// migrate moves the id and its events not yet read to dest (nil:
// synchronous).
func (id *cmID) migrate(dest *eventChannel) {
	id.chMu.Lock()
	defer id.chMu.Unlock()
	from := id.ch.Load()
	if dest == from {
		return
	}
	var moved []cmEvent
	if from != nil {
		moved = from.take(id.cid)
	}
drain:
	for from == nil {
		select {
		case ev := <-id.sync:
			moved = append(moved, ev)
		default:
			break drain
		}
	}
	id.ch.Store(dest)
	for _, ev := range moved {
		if dest != nil {
			dest.push(ev)
			continue
		}
		select {
		case id.sync <- ev:
		default:
		}
	}
}

// errno is what a synchronous call that waits for an event of type want
// fails with when ev comes, as librdmacm has it: 0 if ev is want,
// ECONNREFUSED for a rejection (whose status is the CM's positive reason,
// not an errno), else the errno of ev's negative status.
func (ev cmEvent) errno(want C.enum_rdma_cm_event_type) C.int {
	if ev.typ == want {
		return 0
	}
	if ev.typ != C.RDMA_CM_EVENT_REJECTED && ev.status < 0 {
		return -ev.status
	}
	return C.ECONNREFUSED
}

// snDestroyID ends the id (rdma_destroy_id): no event of it is queued
// after, those queued are removed, and it waits until the program has
// acknowledged those it read; then its listener, request or connection
// goes.
//
//export snDestroyID
func snDestroyID(c *C.struct_sn_cm_id) {
	id := idOf(c)
	id.chMu.Lock()
	close(id.done)
	var queued []cmEvent
	if ch := id.ch.Load(); ch != nil {
		queued = ch.take(c)
	}
	id.chMu.Unlock()
	for _, ev := range queued {
		if ev.listen == c {
			// A connection request the program never saw: its id goes
			// with the listener, the request rejected.
			C.sn_abi_destroy_id(&ev.id.id)
		}
	}
	id.acks.wait()
	id.mu.Lock()
	l, pd, cq, req, conn, cancel := id.listener, id.lpd, id.lcq, id.req, id.conn, id.cancel
	id.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if l != nil {
		l.Close()
	}
	if cq != nil {
		cq.Destroy()
		pd.Dealloc()
	}
	if req != nil && conn == nil {
		req.Reject(nil)
	}
	if conn != nil {
		conn.Close()
	}
	cgo.Handle(c.h).Delete()
}

// addrOf is an sn_addr as an address and port.
func addrOf(a *C.struct_sn_addr) netip.AddrPort {
	ip := *(*[16]byte)(unsafe.Pointer(&a.ip))
	return netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(a.port))
}

// setAddr writes ap into a socket address of the id's route.
func setAddr(ss *C.struct_sockaddr_storage, ap netip.AddrPort) {
	var a C.struct_sn_addr
	*(*[16]byte)(unsafe.Pointer(&a.ip)) = ap.Addr().As16()
	a.port = C.uint16_t(ap.Port())
	C.sn_abi_set_addr(ss, &a)
}

func (id *cmID) srcAddr() *C.struct_sockaddr_storage {
	return (*C.struct_sockaddr_storage)(unsafe.Pointer(&id.cid.id.route.addr.anon0))
}

func (id *cmID) dstAddr() *C.struct_sockaddr_storage {
	return (*C.struct_sockaddr_storage)(unsafe.Pointer(&id.cid.id.route.addr.anon1))
}

// ownAddr checks that a is the device's address (or unspecified).
func (id *cmID) ownAddr(a netip.Addr) bool {
	return a.IsUnspecified() || a == id.dev.dev.Addr().Addr().Unmap()
}

//export snBindAddr
func snBindAddr(c *C.struct_sn_cm_id, a *C.struct_sn_addr) C.int {
	id := idOf(c)
	ap := addrOf(a)
	if id.dev == nil {
		return C.ENODEV
	}
	if !id.ownAddr(ap.Addr()) {
		return C.EADDRNOTAVAIL
	}
	id.mu.Lock()
	id.local = ap
	id.mu.Unlock()
	setAddr(id.srcAddr(), ap)
	return 0
}

//export snListen
func snListen(c *C.struct_sn_cm_id, backlog C.int) C.int {
	id := idOf(c)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || !id.local.IsValid() {
		return C.EINVAL
	}
	if id.listener == nil {
		if rc := id.listenLocked(backlog, false); rc != 0 {
			return rc
		}
	} else if err := id.listener.Open(max(int(backlog), 0)); err != nil {
		return errnoOf(err)
	}
	if !id.accepting {
		id.accepting = true
		go id.acceptLoop(id.listener)
	}
	return 0
}

// snReservePort gives an id bound to port 0 (rdma_bind_addr) its port
// now, for rdma_get_src_port, as Linux assigns one at the bind: it makes
// the id's listener held (nic.ListenOptions.Held), which refuses
// requests as Linux does for a port bound and not listened on, until
// rdma_listen opens it with its backlog. An id that is not bound so,
// listens already, or resolves a peer keeps its port; a failure leaves it
// 0, for rdma_listen to report.
//
//export snReservePort
func snReservePort(c *C.struct_sn_cm_id) {
	id := idOf(c)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev != nil && id.local.IsValid() && id.local.Port() == 0 && id.listener == nil && !id.peer.IsValid() {
		id.listenLocked(0, true)
	}
}

// listenLocked makes the id's listener on its bound port (0: a free one)
// with room for backlog requests, held if asked; id.mu is held. Its
// requests wait for the accept loop that snListen starts.
func (id *cmID) listenLocked(backlog C.int, held bool) C.int {
	if id.ud() {
		return id.listenUDLocked(backlog, held)
	}
	pd, err := id.dev.dev.AllocPD()
	if err != nil {
		return errnoOf(err)
	}
	cq, err := id.dev.dev.CreateCQ(1)
	if err != nil {
		pd.Dealloc()
		return errnoOf(err)
	}
	l, err := id.dev.dev.Listen(id.local.Port(), nic.ListenOptions{PD: pd, QP: nic.QPConfig{SendCQ: cq}, Backlog: max(int(backlog), 0), PortSpace: id.portSpace(), Held: held})
	if err != nil {
		cq.Destroy()
		pd.Dealloc()
		if errors.Is(err, nic.ErrBusy) {
			return C.EADDRINUSE
		}
		return errnoOf(err)
	}
	id.lpd, id.lcq = pd, cq
	id.listening(l)
	return 0
}

// listening records the listener l of the id, whose mu is held, and the
// port it holds.
func (id *cmID) listening(l *nic.Listener) {
	id.listener = l
	id.local = netip.AddrPortFrom(id.local.Addr(), l.Port())
	setAddr(id.srcAddr(), id.local)
}

// acceptLoop turns each connection request into a new id and a
// CONNECT_REQUEST event, until the listener closes.
func (id *cmID) acceptLoop(l *nic.Listener) {
	for {
		r, err := l.AcceptRequest(context.Background())
		if err != nil {
			return
		}
		c := C.sn_abi_new_child(id.cid)
		if c == nil {
			r.Reject(nil)
			continue
		}
		child := idOf(c)
		child.mu.Lock()
		child.req, child.local, child.peer = r, id.local, r.RemoteAddr()
		child.mu.Unlock()
		setAddr(child.dstAddr(), netip.AddrPortFrom(r.RemoteAddr().Addr(), 0))
		ev := cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_REQUEST, listen: id.cid, private: r.PrivateData(), rr: 16, depth: 16, ud: r.UD()}
		ev.id = c
		if !id.deliver(ev) {
			id.sync <- ev
		}
	}
}

//export snGetRequest
func snGetRequest(c *C.struct_sn_cm_id, out **C.struct_sn_cm_id) C.int {
	id := idOf(c)
	if id.ch.Load() != nil {
		return C.EINVAL
	}
	select {
	case ev := <-id.sync:
		if ev.typ != C.RDMA_CM_EVENT_CONNECT_REQUEST {
			return C.EINVAL
		}
		*out = ev.id
		return 0
	case <-id.done:
		return C.EINVAL
	}
}

//export snResolveAddr
func snResolveAddr(c *C.struct_sn_cm_id, src, dst *C.struct_sn_addr, hasSrc C.int) C.int {
	id := idOf(c)
	if id.dev == nil {
		return C.ENODEV
	}
	d := addrOf(dst)
	if hasSrc != 0 && !id.ownAddr(addrOf(src).Addr()) {
		return C.EADDRNOTAVAIL
	}
	gid := d.Addr().As16()
	peer, ok := id.dev.peerOf(&gid)
	if !ok {
		return C.EINVAL
	}
	id.mu.Lock()
	id.peer, id.rport = peer, d.Port()
	if !id.local.IsValid() {
		id.local = netip.AddrPortFrom(id.dev.dev.Addr().Addr().Unmap(), 0)
	}
	local := id.local
	id.mu.Unlock()
	setAddr(id.srcAddr(), local)
	setAddr(id.dstAddr(), d)
	if id.ch.Load() == nil {
		return 0
	}
	id.post(cmEvent{typ: C.RDMA_CM_EVENT_ADDR_RESOLVED})
	return 0
}

//export snResolveRoute
func snResolveRoute(c *C.struct_sn_cm_id) C.int {
	id := idOf(c)
	id.mu.Lock()
	resolved := id.peer.IsValid()
	id.mu.Unlock()
	if !resolved {
		return C.EINVAL
	}
	id.cid.id.route.num_paths = 1
	if id.ch.Load() != nil {
		id.post(cmEvent{typ: C.RDMA_CM_EVENT_ROUTE_RESOLVED})
	}
	return 0
}

// rdLimit is a responder resources or initiator depth a program asked
// for, within what a softnic QP takes (RDMA_MAX_RESP_RES, 255, asks for
// the most).
func rdLimit(n C.int) uint8 { return uint8(min(int(n), qp.MaxRdAtomicLimit)) }

// programQP is the QP the connection uses: the one the program created
// on the id (rdma_create_qp), or else the program's QP numbered qpn
// (rdma_conn_param's qp_num), which the program connects itself (self):
// rdma_init_qp_attr tells it how, and rdma_establish ends the dialer's
// handshake (cm_self.go).
func (id *cmID) programQP(qpn C.uint32_t) (q *nic.QP, self bool) {
	if id.cid.id.qp != nil {
		return qpOf(id.cid.id.qp).q, false
	}
	if qpn == 0 || id.dev == nil {
		return nil, false
	}
	q = id.dev.async.qpNumbered(uint32(qpn))
	return q, q != nil
}

//export snConnect
func snConnect(c *C.struct_sn_cm_id, data unsafe.Pointer, n, rr, depth, retry, rnr C.int, qpn C.uint32_t) C.int {
	id := idOf(c)
	q, self := id.programQP(qpn)
	if q == nil {
		unsupported("rdma_connect without a QP made by rdma_create_qp on the id or named by conn_param's qp_num")
		return C.EOPNOTSUPP
	}
	if id.ud() {
		if self {
			unsupported("rdma_connect of a UD id with conn_param's qp_num")
			return C.EOPNOTSUPP
		}
		return id.resolveUD(C.GoBytes(data, n))
	}
	id.mu.Lock()
	peer, rport := id.peer, id.rport
	if !peer.IsValid() || id.conn != nil || id.cancel != nil {
		id.mu.Unlock()
		return C.EINVAL
	}
	ctx, cancel := context.WithCancel(context.Background())
	id.cancel = cancel
	timeout, tos := id.ackTimeout, id.tos
	id.mu.Unlock()
	opts := nic.DialOptions{
		PD: q.PD(), UseQP: q, PrivateData: C.GoBytes(data, n), ResponderResources: rdLimit(rr),
		InitiatorDepth: rdLimit(depth), RetryCount: uint8(min(retry, 7)), RNRRetryCount: uint8(min(rnr, 7)),
		Timeout: timeout, PortSpace: id.portSpace(), SelfConnect: self, TrafficClass: tos,
	}
	return id.establish(func() (*nic.Conn, error) { return dialListening(ctx, id.dev.dev, peer, rport, opts) },
		opts.ResponderResources, opts.InitiatorDepth, self)
}

// listenGrace is how long a connect goes on asking a port nothing listens
// on (REJ "invalid service ID"). A program may stop listening on a port
// and listen on it again between two connections, as perftest -R's
// server does, and its client's second connect may come in between; with
// rdma_cm over a kernel that race is rarely lost, with a daemon close by
// it often is.
const listenGrace = time.Second

// dialListening dials, and dials again while the port has no listener,
// for at most listenGrace.
func dialListening(ctx context.Context, d *nic.Device, peer netip.AddrPort, port uint16, opts nic.DialOptions) (*nic.Conn, error) {
	deadline := time.Now().Add(listenGrace)
	for {
		conn, err := d.Dial(ctx, peer, port, opts)
		var rej *nic.RejectError
		if err == nil || !errors.As(err, &rej) || rej.Reason != mad.RejectInvalidServiceID || time.Now().After(deadline) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// establish makes a connection with connect: a synchronous id waits for
// it, an id with a channel is told with an event: ESTABLISHED, or
// CONNECT_RESPONSE when the program connects its QP itself (self).
func (id *cmID) establish(connect func() (*nic.Conn, error), rr, depth uint8, self bool) C.int {
	result := func() cmEvent {
		conn, err := connect()
		if err == nil {
			err = id.connected(conn)
		}
		return connectEvent(err, conn, rr, depth)
	}
	if id.ch.Load() == nil {
		want := C.enum_rdma_cm_event_type(C.RDMA_CM_EVENT_ESTABLISHED)
		if self {
			want = C.RDMA_CM_EVENT_CONNECT_RESPONSE
		}
		return result().errno(want)
	}
	go func() { id.post(result()) }()
	return 0
}

// connected records an established connection, unless the id was
// destroyed meanwhile, and watches for its end.
func (id *cmID) connected(conn *nic.Conn) error {
	id.mu.Lock()
	id.cancel = nil
	select {
	case <-id.done:
		id.mu.Unlock()
		conn.Close()
		return nic.ErrClosed
	default:
	}
	id.conn = conn
	id.mu.Unlock()
	if id.cid.id.qp != nil {
		id.cid.id.qp.state = C.IBV_QPS_RTS
	}
	go func() {
		select {
		case <-conn.Done():
			id.disconnected()
		case <-id.done:
		}
	}()
	return nil
}

// snNotify is rdma_notify: the program passes a QP event on to the
// connection manager. The one Linux's CM acts on, IBV_EVENT_COMM_EST (the
// QP took a request before the RTU came), establishes the connection; here
// the QP's first request does that by itself, as the RTU does, and
// rdma_accept returns and ESTABLISHED comes only after one of them. So an
// id's connection is established whenever a program can notify it, and
// the answer is Linux's for that: EISCONN. EINVAL for an id without a
// connection open, and for the other events (Linux takes LID_CHANGE to
// move to an alternate path, which softnic's connections do not have).
//
//export snNotify
func snNotify(c *C.struct_sn_cm_id, event C.int) C.int {
	id := idOf(c)
	id.mu.Lock()
	conn := id.conn
	id.mu.Unlock()
	if event != C.IBV_EVENT_COMM_EST || conn == nil {
		return C.EINVAL
	}
	select {
	case <-conn.Done():
		return C.EINVAL
	default:
		return C.EISCONN
	}
}

// disconnected tells the program once that the connection ended.
func (id *cmID) disconnected() {
	id.ended.Do(func() { id.post(cmEvent{typ: C.RDMA_CM_EVENT_DISCONNECTED}) })
}

// connectEvent is the event that ends a connect or an accept.
func connectEvent(err error, conn *nic.Conn, rr, depth uint8) cmEvent {
	var rej *nic.RejectError
	switch {
	case err == nil && conn.Params() != nil:
		return cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_RESPONSE, private: conn.PrivateData(), rr: rr, depth: depth}
	case err == nil:
		return cmEvent{typ: C.RDMA_CM_EVENT_ESTABLISHED, private: conn.PrivateData(), rr: rr, depth: depth}
	case errors.As(err, &rej):
		return cmEvent{typ: C.RDMA_CM_EVENT_REJECTED, status: C.int(rej.Reason), private: rej.PrivateData}
	case errors.Is(err, nic.ErrTimedOut):
		return cmEvent{typ: C.RDMA_CM_EVENT_UNREACHABLE, status: -C.ETIMEDOUT}
	}
	return cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_ERROR, status: -errnoOf(err)}
}

//export snAccept
func snAccept(c *C.struct_sn_cm_id, data unsafe.Pointer, n, rr, depth, rnr C.int, qpn C.uint32_t) C.int {
	id := idOf(c)
	q, self := id.programQP(qpn)
	if q == nil {
		unsupported("rdma_accept without a QP made by rdma_create_qp on the id or named by conn_param's qp_num")
		return C.EOPNOTSUPP
	}
	if id.ud() && self {
		unsupported("rdma_accept of a UD id with conn_param's qp_num")
		return C.EOPNOTSUPP
	}
	if id.ud() {
		return id.acceptUD(q, C.GoBytes(data, n))
	}
	id.mu.Lock()
	r, timeout := id.req, id.ackTimeout
	id.mu.Unlock()
	if r == nil {
		return C.EINVAL
	}
	opts := nic.AcceptOptions{PrivateData: C.GoBytes(data, n), ResponderResources: rdLimit(rr), InitiatorDepth: rdLimit(depth),
		RNRRetryCount: uint8(min(rnr, 7)), Timeout: timeout, UseQP: q, SelfConnect: self}
	// rdma_accept returns with the QP ready to send, as librdmacm's does
	// (programs post at once, before ESTABLISHED): Accept returns once the
	// peer's RTU came, a round trip after the REP, and the event follows.
	conn, err := r.Accept(opts)
	if err == nil {
		err = id.connected(conn)
	}
	if id.ch.Load() != nil && err == nil {
		id.post(connectEvent(nil, conn, opts.ResponderResources, opts.InitiatorDepth))
	}
	return errnoOf(err)
}

//export snReject
func snReject(c *C.struct_sn_cm_id, data unsafe.Pointer, n C.int) C.int {
	id := idOf(c)
	id.mu.Lock()
	r := id.req
	id.mu.Unlock()
	if r == nil {
		return C.EINVAL
	}
	return errnoOf(r.Reject(C.GoBytes(data, n)))
}

// snDisconnect ends the connection: Close flushes the QP's work requests
// and waits for the peer's DREP; DISCONNECTED follows (at once for a
// synchronous id).
//
//export snDisconnect
func snDisconnect(c *C.struct_sn_cm_id) C.int {
	id := idOf(c)
	id.mu.Lock()
	conn, cancel := id.conn, id.cancel
	id.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if conn == nil {
		if cancel != nil {
			return 0
		}
		return C.EINVAL
	}
	end := func() {
		conn.Close()
		id.disconnected()
	}
	if id.ch.Load() == nil {
		end()
		return 0
	}
	go end()
	return 0
}
