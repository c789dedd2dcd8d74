//go:build linux && !softnic_portable

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysConn is the Linux state of a Conn: the socket, the offloads, and one
// preallocated set of kernel structures per direction.
//
// The socket is in Go's netpoller only while a goroutine may wait for it.
// Listen makes it with net.ListenUDP, keeps a duplicate of its descriptor
// (fd) and closes the net.UDPConn, which takes it out of the runtime's
// epoll set; every call on fd is a system call that does not wait (the
// descriptor is non-blocking). A goroutine that waits to read (ReadBatch,
// ReadBatchTurn) does so in the netpoller, through a registration that
// the first wait makes (waiter) and StopWaiting undoes. A
// registered socket wakes a thread of the process at every datagram,
// whoever reads it: an idle P's thread sleeps in epoll_wait whenever a
// timer is pending, and Linux reports each arrival on an edge-triggered
// registration. For an application that busy-polls the socket with
// TryReadBatch on one CPU, those wakeups would take the other CPU from its
// peer. (A wait in poll(2) instead, outside the netpoller, costs the
// waiting thread its P, which the runtime's monitor takes back and hands
// on at each wait.)
type sysConn struct {
	fd int
	// life is read-held by every system call on fd and taken by Close,
	// which closes fd once no call uses it. closed is set first, and the
	// socket shut down and the waiter closed, which wake the calls that
	// wait.
	life   sync.RWMutex
	closed atomic.Bool
	v6     bool
	// bound is the address the socket is bound to, the Local of every
	// datagram it receives; invalid for a wildcard bind, whose datagrams
	// carry their destination (IP_PKTINFO). Asking for it when it is
	// known cost 0.14-0.5 µs of CPU per datagram sent and received on
	// loopback (2-CPU VM).
	bound          netip.Addr
	gso            atomic.Bool // cleared for good when the kernel refuses a GSO send
	gro            bool
	rcvbuf, sndbuf int
	rd             *reader
	wr             *writer

	// wmu is held by a read that waits, and guards wt and the fields of
	// the wait under way.
	wmu   sync.Mutex
	wt    atomic.Pointer[waiter] // swapped under wmu; Close closes it without
	wread func(fd uintptr) bool  // c.tryReadTurn, bound once so that a wait does not allocate
	wmsgs []Message
	wturn sync.Locker
	wn    int
	werr  error
	// interrupted is set by Interrupt, and cleared by the WaitBatchTurn
	// that finds it stale: while it is set, the registration's read
	// deadline has passed, which ends a wait at once. interrupts counts the
	// Interrupts: a WaitBatchTurn ends at once when it moved since its
	// caller's Rearm, whoever else rearmed meanwhile.
	interrupted atomic.Bool
	interrupts  atomic.Uint64
}

// waiter is the socket's registration in the netpoller: an epoll instance
// of its own that watches the socket for EPOLLIN alone, as an os.File,
// which the runtime's epoll watches in turn. The runtime registers every
// descriptor for EPOLLOUT as well, edge-triggered, and Linux signals a
// socket's write space each time a datagram it sent is freed: registered
// directly, the socket would wake a thread of the process after every
// send, for nothing. The inner instance passes its readiness on at each
// arrival (it is never read: the socket is), and nothing else.
type waiter struct {
	f  *os.File
	rc syscall.RawConn
}

// reader holds what one recvmmsg call needs, built once so ReadBatch does not
// allocate. The mmsghdrs point at names, iovs and oob for good; the iovecs
// point at the buffers of the last call's messages, and are pointed again
// only where a call gives others: a device reads into the same buffers every
// time, and pointing 64 iovecs and resetting 64 headers took a third of
// what a look at an empty socket cost its busy-polling reader.
type reader struct {
	mu    sync.Mutex
	hdrs  [MaxBatch]unix.Mmsghdr
	iovs  [MaxBatch]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	oob   []byte // MaxBatch slots of readOOBSpace bytes
	// stale is how many leading hdrs the kernel may have written since
	// prepare last reset them.
	stale int
}

// writer holds what sendmmsg calls need, built once so WriteBatch does not
// allocate. Entry r of hdrs is run r of the chunk being sent: its iovecs are
// consecutive in iovs and point at the caller's buffers, one a message.
type writer struct {
	mu    sync.Mutex
	hdrs  [MaxBatch]unix.Mmsghdr
	iovs  [MaxWriteMessages]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	oob   []byte        // MaxBatch slots of writeOOBSpace bytes
	runs  [MaxBatch]int // messages per entry, from splitRuns
	used  int           // iovecs pointed at the caller's buffers, cleared after the call

	// sendmmsgFn and sendtoFn are the system calls; tests replace them to
	// fake refusals the loopback device never produces, and to see which
	// one a batch took.
	sendmmsgFn func(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno)
	sendtoFn   func(fd int, b []byte, h *unix.Msghdr) syscall.Errno
}

func newReader() *reader {
	r := &reader{oob: make([]byte, MaxBatch*readOOBSpace), stale: MaxBatch}
	for i := range r.hdrs {
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oob[i*readOOBSpace]
	}
	return r
}

func newWriter() *writer {
	w := &writer{oob: make([]byte, MaxBatch*writeOOBSpace)}
	for i := range w.hdrs {
		w.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&w.names[i]))
	}
	w.sendmmsgFn = sendmmsg
	w.sendtoFn = sendto
	return w
}

// send sends hdrs without waiting. An entry alone without a control
// message (one datagram, not a GSO run) goes by sendto, which reads no
// msghdr nor iovec array from the process: a 40-byte datagram's WriteBatch
// and the TryReadBatch that takes it on loopback cost 0.3-0.5 µs less CPU
// than with sendmmsg of one (5.5-6.1 against 5.9-6.4 µs on a 2-CPU VM,
// alternating in one process), and a busy-polled round trip of a small
// operation waits for two such sends, its request's and its response's.
func (w *writer) send(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
	if len(hdrs) != 1 || hdrs[0].Hdr.Controllen != 0 {
		return w.sendmmsgFn(fd, hdrs)
	}
	h := &hdrs[0].Hdr
	b := unsafe.Slice(h.Iov.Base, h.Iov.Len)
	if errno := w.sendtoFn(fd, b, h); errno != 0 {
		return 0, errno
	}
	return 1, 0
}

// init configures the socket (buffers, don't-fragment, pktinfo, the
// offload probes) and takes it out of the netpoller: the descriptor
// duplicated, the net.UDPConn closed.
func (c *Conn) init(opt Options) error {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return err
	}
	c.sys.v6 = c.local.Addr().Is6()
	if a := c.local.Addr(); !a.IsUnspecified() {
		c.sys.bound = a.WithZone("")
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = c.sys.configure(int(fd), opt); serr == nil {
			if c.sys.fd, serr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); serr != nil {
				serr = os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", serr)
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if err := c.uc.Close(); err != nil {
		unix.Close(c.sys.fd)
		return err
	}
	c.sys.rd = newReader()
	c.sys.wr = newWriter()
	c.sys.wread = c.tryReadTurn
	return nil
}

// control calls f with the socket's descriptor, unless the Conn is closed.
func (s *sysConn) control(f func(fd int)) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	f(s.fd)
	return nil
}

// waitFor blocks in poll(2) until the socket has one of events, or is
// closed (net.ErrClosed).
func (s *sysConn) waitFor(events int16) error {
	s.life.RLock()
	defer s.life.RUnlock()
	fds := [1]unix.PollFd{{Fd: int32(s.fd), Events: events}}
	for !s.closed.Load() {
		_, err := unix.Poll(fds[:], -1) // no timeout; ppoll where there is no poll (arm64)
		switch {
		case err == nil && !s.closed.Load():
			return nil
		case err != nil && err != syscall.EINTR:
			return os.NewSyscallError("poll", err)
		}
	}
	return net.ErrClosed
}

// register puts the socket into the netpoller. wmu is held.
func (s *sysConn) register() error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return net.ErrClosed
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		unix.Close(ep)
		return os.NewSyscallError("epoll_ctl", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil { // so that os.NewFile puts it in the netpoller
		unix.Close(ep)
		return os.NewSyscallError("fcntl O_NONBLOCK", err)
	}
	w := &waiter{f: os.NewFile(uintptr(ep), "udp epoll")}
	if w.rc, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return err
	}
	s.wt.Store(w)
	if s.interrupted.Load() {
		w.f.SetReadDeadline(longAgo)
	}
	return nil
}

const waitsInterruptibly = true

// longAgo is a deadline that has passed.
var longAgo = time.Unix(1, 0)

func (c *Conn) interrupt() {
	s := &c.sys
	s.interrupts.Add(1)
	s.interrupted.Store(true)
	if w := s.wt.Load(); w != nil {
		w.f.SetReadDeadline(longAgo) // fails harmlessly on a registration closed meanwhile
	}
}

func (c *Conn) rearm() uint64 { return c.sys.interrupts.Load() }

func (c *Conn) stopWaiting() {
	s := &c.sys
	if !s.wmu.TryLock() {
		return // a goroutine waits for the socket: it stays in the netpoller
	}
	defer s.wmu.Unlock()
	if w := s.wt.Swap(nil); w != nil {
		w.f.Close()
	}
}

func (c *Conn) close() error {
	s := &c.sys
	if s.closed.Swap(true) {
		return fmt.Errorf("udp: close %v: %w", c.local, net.ErrClosed)
	}
	unix.Shutdown(s.fd, unix.SHUT_RDWR) // wakes poll(2); ENOTCONN on an unconnected socket, which it shuts down anyway
	if w := s.wt.Load(); w != nil {
		w.f.Close() // wakes a read that waits, which holds wmu
	}
	s.life.Lock()
	err := os.NewSyscallError("close", unix.Close(s.fd))
	// A registration made while the socket was being closed (register
	// found it open before closed was set) is stored by now, since
	// register holds life: close it too, or its epoll descriptor outlives
	// the socket. Outside life: closing waits for the wait's callback,
	// which takes life.
	w := s.wt.Load()
	s.life.Unlock()
	if w != nil {
		w.f.Close() // ErrClosed if it was closed above
	}
	return err
}

// recvTrafficClass has the kernel tell each datagram's traffic class.
func (s *sysConn) recvTrafficClass(fd int) error {
	var err error
	if s.v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	}
	return os.NewSyscallError("setsockopt RECVTOS", err)
}

func (c *Conn) readTrafficClass() error {
	var err error
	if cerr := c.sys.control(func(fd int) { err = c.sys.recvTrafficClass(fd) }); cerr != nil {
		return cerr
	}
	return err
}

// multicastTTL is the TTL of the datagrams sent to a multicast group.
const multicastTTL = 64

func (s *sysConn) configure(fd int, opt Options) error {
	var err error
	if s.rcvbuf, err = setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, opt.RecvBuffer); err != nil {
		return os.NewSyscallError("setsockopt SO_RCVBUF", err)
	}
	if s.sndbuf, err = setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, opt.SendBuffer); err != nil {
		return os.NewSyscallError("setsockopt SO_SNDBUF", err)
	}
	// IP_PMTUDISC_DO sets DF and never fragments locally; with DF on an
	// unconnected socket Linux sends IP ID 0 (ip_select_ident_segs), which
	// the ICRC needs. IPv6 has no ID, but DF semantics keep both families alike.
	if s.v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err != nil {
		return os.NewSyscallError("setsockopt MTU_DISCOVER", err)
	}
	// A datagram to a multicast group leaves with rxe's TTL, the hop
	// limit of rdma_cm's address vector of a group (64), not the
	// socket's default of 1.
	if !s.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, multicastTTL); err != nil {
			return os.NewSyscallError("setsockopt IP_MULTICAST_TTL", err)
		}
	}
	switch {
	case s.bound.IsValid():
	case s.v6:
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	default:
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}
	if err != nil {
		return os.NewSyscallError("setsockopt PKTINFO", err)
	}
	if opt.TrafficClass {
		if err := s.recvTrafficClass(fd); err != nil {
			return err
		}
	}
	if !opt.DisableGSO {
		// Readable since Linux 4.18, like the send side it stands for.
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		s.gso.Store(err == nil)
	}
	if !opt.DisableGRO && unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO)
		s.gro = err == nil && v == 1
	}
	return nil
}

// setBuffer asks for a socket buffer of size bytes, past the sysctl limit when
// the process may (CAP_NET_ADMIN), and returns what the kernel reports.
func setBuffer(fd, force, plain, size int) (int, error) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size); err != nil {
			return 0, err
		}
	}
	return unix.GetsockoptInt(fd, unix.SOL_SOCKET, plain)
}

func (c *Conn) features() Features {
	f := Features{
		GSO:          c.sys.gso.Load(),
		GRO:          c.sys.gro,
		RecvBuffer:   c.sys.rcvbuf,
		SendBuffer:   c.sys.sndbuf,
		TrafficClass: true,
	}
	if f.GSO {
		f.MaxGSOSegments = MaxGSOSegments
	}
	return f
}

func (c *Conn) readBatch(msgs []Message, wait bool) (int, error) {
	if !wait {
		return c.tryRead(msgs)
	}
	return c.readBatchTurn(msgs, noTurn{})
}

// noTurn is the turn of a reader that takes no turns.
type noTurn struct{}

func (noTurn) Lock()   {}
func (noTurn) Unlock() {}

func (c *Conn) readBatchTurn(msgs []Message, turn sync.Locker) (int, error) {
	s := &c.sys
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n, err := c.waitLocked(msgs, turn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Interrupted: the deadline is this wait's to clear, so that the
		// next ReadBatchTurn waits; the next WaitBatchTurn's caller
		// rearms.
		s.wt.Load().f.SetReadDeadline(time.Time{})
		return 0, nil
	}
	return n, err
}

func (c *Conn) waitBatchTurn(msgs []Message, turn sync.Locker, armed uint64) (int, bool, error) {
	s := &c.sys
	if !s.wmu.TryLock() {
		return 0, false, nil
	}
	defer s.wmu.Unlock()
	if s.interrupts.Load() != armed {
		return 0, true, nil
	}
	// What is left of an Interrupt before the caller armed is stale: it
	// is cleared here, by the one goroutine that waits, and not by Rearm,
	// which another goroutine may call while this one waits, undoing an
	// Interrupt meant for this wait (it then slept until a datagram came).
	if s.interrupted.Swap(false) {
		if w := s.wt.Load(); w != nil {
			w.f.SetReadDeadline(time.Time{})
		}
		if s.interrupts.Load() != armed {
			return 0, true, nil // one came as the deadline was cleared
		}
	}
	n, err := c.waitLocked(msgs, turn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, true, nil
	}
	return n, true, err
}

// waitLocked waits for the socket in the netpoller, registering it if it
// is not, and reads with turn held once it is readable (tryReadTurn). wmu
// is held. It returns os.ErrDeadlineExceeded, unwrapped, when an
// Interrupt ended the wait.
func (c *Conn) waitLocked(msgs []Message, turn sync.Locker) (int, error) {
	s := &c.sys
	w := s.wt.Load()
	if w == nil {
		if err := s.register(); err != nil {
			return 0, c.ioError("register", err)
		}
		w = s.wt.Load()
	}
	s.wmsgs, s.wturn, s.wn, s.werr = msgs, turn, 0, nil
	err := w.rc.Read(s.wread)
	n, rerr := s.wn, s.werr
	s.wmsgs, s.wturn, s.werr = nil, nil, nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && !s.closed.Load():
		return 0, os.ErrDeadlineExceeded
	case err != nil:
		return 0, c.ioError("wait", err)
	}
	return n, rerr
}

// tryReadTurn is a wait's RawConn callback, called once the registration
// was reset and again after each readiness event: with the turn held, it
// reads without waiting, and reports whether it is done (it read, or
// failed) or waits for the next event with the turn released. The read
// after the reset is what makes an event that came before the wait
// harmless: what it announced is read then.
func (c *Conn) tryReadTurn(uintptr) bool {
	s := &c.sys
	s.wturn.Lock()
	n, err := c.tryRead(s.wmsgs)
	if n > 0 && err == nil {
		s.wn = n
		return true
	}
	s.wturn.Unlock()
	s.werr = err
	return err != nil
}

// ioError turns an error of a system call into the package's: with the
// operation and address, net.ErrClosed once closed.
func (c *Conn) ioError(op string, err error) error {
	if c.sys.closed.Load() {
		err = net.ErrClosed
	}
	return fmt.Errorf("udp: %s on %v: %w", op, c.local, err)
}

// tryRead fills msgs with what is queued, without waiting.
func (c *Conn) tryRead(msgs []Message) (int, error) {
	msgs = msgs[:min(len(msgs), MaxBatch)]
	if len(msgs) == 0 {
		return 0, nil
	}
	s := &c.sys
	r := s.rd
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		r.prepare(msgs)
		n, errno := s.recvmmsg(r.hdrs[:len(msgs)])
		// The kernel writes the headers of the datagrams it returns;
		// the entry it failed on is counted too, to be safe.
		r.stale = min(n+1, len(msgs))
		switch errno {
		case 0:
		case syscall.EAGAIN:
			return 0, nil
		case syscall.ECONNREFUSED:
			c.stats.refused.Add(1)
			continue
		default:
			r.stale = len(msgs)
			return 0, c.ioError("recvmmsg", errno)
		}
		if n := c.collect(msgs, n); n > 0 {
			return n, nil
		}
	}
}

// recvmmsg reads into hdrs without waiting; EBADF once closed.
func (s *sysConn) recvmmsg(hdrs []unix.Mmsghdr) (int, syscall.Errno) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return 0, syscall.EBADF
	}
	for {
		n, errno := recvmmsg(s.fd, hdrs)
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}

// prepare points the iovecs at the buffers of msgs, where they point
// elsewhere, and resets what the kernel overwrote in the headers.
func (r *reader) prepare(msgs []Message) {
	for i := range msgs {
		buf := msgs[i].Buf
		if iov := &r.iovs[i]; iov.Base != unsafe.SliceData(buf) || uint64(iov.Len) != uint64(cap(buf)) {
			iov.Base = unsafe.SliceData(buf)
			iov.SetLen(cap(buf))
		}
	}
	for i := range r.stale {
		h := &r.hdrs[i]
		h.Len = 0
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(readOOBSpace)
		h.Hdr.Flags = 0
	}
	r.stale = 0
}

// collect fills msgs from the first n mmsghdrs, dropping truncated datagrams,
// and returns how many remain at the front of msgs.
func (c *Conn) collect(msgs []Message, n int) int {
	r := c.sys.rd
	kept := 0
	for i := range n {
		h := &r.hdrs[i]
		if h.Hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			c.stats.truncated.Add(1)
			continue
		}
		m := &msgs[i]
		m.N = int(h.Len)
		m.Addr = sockaddrAddrPort(&r.names[i])
		oob := r.oob[i*readOOBSpace:][:h.Hdr.Controllen]
		m.Local, m.Segment, m.TrafficClass = parseControl(oob)
		if c.sys.bound.IsValid() {
			m.Local = c.sys.bound
		}
		if m.Segment >= m.N {
			m.Segment = 0
		}
		if kept != i {
			msgs[kept], msgs[i] = msgs[i], msgs[kept]
		}
		kept++
	}
	return kept
}

func (c *Conn) writeBatch(msgs []Message) (int, error) {
	w := c.sys.wr
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.release()
	sent := 0
	// plain is set after the kernel refused a GSO send with EMSGSIZE: the
	// chunk goes again one datagram at a time, which tells whether the
	// kernel refused the segmentation (the datagram goes: GSO is turned
	// off) or the datagrams are larger than the route carries (it fails
	// too, and the caller hears of it; GSO stays on).
	plain := false
	for sent < len(msgs) {
		chunk := msgs[sent:min(len(msgs), sent+MaxWriteMessages)]
		lim := gsoLimits{maxSegments: 1, maxBytes: maxPayloadIPv4}
		if c.sys.v6 {
			lim.maxBytes = maxPayloadIPv6
		}
		if c.sys.gso.Load() && !plain {
			lim.maxSegments = MaxGSOSegments
		}
		nr := splitRuns(chunk, lim, w.runs[:])
		packed, errno := w.pack(chunk, nr, c.sys.v6)
		done, refused, err := c.sendRuns(chunk, packed)
		if plain && done > 0 {
			c.gsoRefused() // the datagram the GSO send carried went alone
		}
		plain = false
		sent += done
		switch {
		case err != nil:
			return sent, err
		case refused == syscall.EIO:
			c.gsoRefused()
			continue
		case refused == syscall.EMSGSIZE:
			plain = true
			continue
		case errno != 0:
			return sent, fmt.Errorf("udp: send to %v from %v: %w", msgs[sent].Addr, c.local, errno)
		}
	}
	return sent, nil
}

// release forgets the caller's buffers the iovecs point at.
func (w *writer) release() {
	clear(w.iovs[:w.used])
	w.used = 0
}

// gsoRefused turns GSO off for good: the kernel refused a segmentation
// that the same datagrams sent one by one passed.
func (c *Conn) gsoRefused() {
	c.sys.gso.Store(false)
	c.stats.gsoFallbacks.Add(1)
}

// pack builds one sendmmsg entry per run of chunk (run lengths in w.runs[:nr])
// and returns how many it built; it stops at a run whose destination the
// socket cannot take and returns why.
func (w *writer) pack(chunk []Message, nr int, v6 bool) (int, syscall.Errno) {
	i := 0
	for r := range nr {
		n := w.runs[r]
		first := &chunk[i]
		h := &w.hdrs[r].Hdr
		namelen, errno := putSockaddr(&w.names[r], first.Addr, v6)
		if errno != 0 {
			return r, errno
		}
		h.Namelen = namelen
		h.Iov = &w.iovs[i]
		h.SetIovlen(n)
		for j := range n {
			buf := chunk[i+j].Buf
			w.iovs[i+j].Base = unsafe.SliceData(buf)
			w.iovs[i+j].SetLen(len(buf))
		}
		w.used = max(w.used, i+n)
		segment := uint16(0)
		if n > 1 {
			segment = uint16(len(first.Buf))
		}
		oob := w.oob[r*writeOOBSpace:][:writeOOBSpace]
		if l := putSendControl(oob, segment, first.TrafficClass, v6); l > 0 {
			h.Control = unsafe.SliceData(oob)
			h.SetControllen(l)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		i += n
	}
	return nr, 0
}

// sendRuns sends the first nr packed entries and returns how many messages
// of chunk went out. refused is the errno with which the kernel refused a
// GSO send (EIO when the route's device cannot checksum, EMSGSIZE when a
// segment exceeds the path MTU or the kernel's limits): the caller packs
// the rest again.
func (c *Conn) sendRuns(chunk []Message, nr int) (done int, refused syscall.Errno, err error) {
	w := c.sys.wr
	for k := 0; k < nr; {
		n, errno := c.sys.sendmmsg(w, w.hdrs[k:nr])
		if errno == syscall.EAGAIN {
			// The socket buffer is full: wait for room.
			if err := c.sys.waitFor(unix.POLLOUT); err != nil {
				return done, 0, c.ioError("poll", err)
			}
			continue
		}
		for _, n := range w.runs[k : k+n] {
			done += n
		}
		k += n
		switch {
		case errno == 0:
		case errno == syscall.ECONNREFUSED:
			// A pending ICMP error, reported and cleared instead of
			// sending this entry: count it and send the entry again.
			c.stats.refused.Add(1)
		case w.runs[k] > 1 && (errno == syscall.EMSGSIZE || errno == syscall.EIO):
			return done, errno, nil
		case c.sys.closed.Load():
			return done, 0, c.ioError("sendmmsg", net.ErrClosed)
		default:
			return done, 0, fmt.Errorf("udp: sendmmsg to %v from %v: %w", chunk[done].Addr, c.local, errno)
		}
	}
	return done, 0, nil
}

// sendmmsg sends hdrs without waiting (see writer.send); EBADF once closed.
func (s *sysConn) sendmmsg(w *writer, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return 0, syscall.EBADF
	}
	for {
		n, errno := w.send(s.fd, hdrs)
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}
