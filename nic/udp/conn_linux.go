//go:build linux && !softnic_portable

package udp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysConn is the Linux state of a Conn: the raw socket, the offloads, and one
// preallocated set of kernel structures per direction.
type sysConn struct {
	rc             syscall.RawConn
	v6             bool
	gso            atomic.Bool // cleared for good when the kernel refuses a GSO send
	gro            bool
	rcvbuf, sndbuf int
	rd             *reader
	wr             *writer
}

// reader holds what one recvmmsg call needs, built once so ReadBatch does not
// allocate. The mmsghdrs point at names, iovs and oob for good; the iovecs are
// pointed at the caller's buffers for the length of one call.
type reader struct {
	mu    sync.Mutex
	hdrs  [MaxBatch]unix.Mmsghdr
	iovs  [MaxBatch]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	oob   []byte // MaxBatch slots of readOOBSpace bytes

	// recv is r.recvmmsg bound once, for RawConn.Read; vlen is its input,
	// n and errno its result.
	recv   func(fd uintptr) bool
	vlen   int
	nowait bool // return at once when nothing is queued
	n      int
	errno  syscall.Errno
}

// writer holds what sendmmsg calls need, built once so WriteBatch does not
// allocate. Entry r of hdrs is run r of the chunk being sent: its iovecs are
// consecutive in iovs and point at the caller's buffers.
type writer struct {
	mu    sync.Mutex
	hdrs  [MaxBatch]unix.Mmsghdr
	iovs  [MaxBatch]unix.Iovec
	names [MaxBatch]unix.RawSockaddrInet6
	oob   []byte        // MaxBatch slots of writeOOBSpace bytes
	runs  [MaxBatch]int // messages per entry, from splitRuns

	// send is w.sendmmsg bound once, for RawConn.Write; it sends
	// hdrs[off:vlen] and leaves its result in n and errno.
	send      func(fd uintptr) bool
	off, vlen int
	n         int
	errno     syscall.Errno

	// sendmmsgFn is the system call; tests replace it to fake refusals
	// the loopback device never produces.
	sendmmsgFn func(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno)
}

func newReader() *reader {
	r := &reader{oob: make([]byte, MaxBatch*readOOBSpace)}
	for i := range r.hdrs {
		h := &r.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oob[i*readOOBSpace]
	}
	r.recv = r.recvmmsg
	return r
}

func newWriter() *writer {
	w := &writer{oob: make([]byte, MaxBatch*writeOOBSpace)}
	for i := range w.hdrs {
		w.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&w.names[i]))
	}
	w.send = w.sendmmsg
	w.sendmmsgFn = sendmmsg
	return w
}

// init configures the socket: buffers, don't-fragment, pktinfo, and the
// offload probes.
func (c *Conn) init(opt Options) error {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return err
	}
	c.sys.rc = rc
	c.sys.v6 = c.local.Addr().Is6()
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = c.sys.configure(int(fd), opt) }); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	c.sys.rd = newReader()
	c.sys.wr = newWriter()
	return nil
}

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
	if s.v6 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}
	if err != nil {
		return os.NewSyscallError("setsockopt PKTINFO", err)
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
		GSO:        c.sys.gso.Load(),
		GRO:        c.sys.gro,
		RecvBuffer: c.sys.rcvbuf,
		SendBuffer: c.sys.sndbuf,
	}
	if f.GSO {
		f.MaxGSOSegments = MaxGSOSegments
	}
	return f
}

// ioError turns an error of RawConn.Read/Write into the package's: closing
// is reported as net.ErrClosed, the rest with the operation and address.
func (c *Conn) ioError(op string, err error) error {
	if errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("udp: %s on %v: %w", op, c.local, net.ErrClosed)
	}
	return fmt.Errorf("udp: %s on %v: %w", op, c.local, err)
}

func (c *Conn) readBatch(msgs []Message, wait bool) (int, error) {
	msgs = msgs[:min(len(msgs), MaxBatch)]
	if len(msgs) == 0 {
		return 0, nil
	}
	r := c.sys.rd
	r.mu.Lock()
	defer r.mu.Unlock()
	defer clear(r.iovs[:len(msgs)])
	r.nowait = !wait
	for {
		r.prepare(msgs)
		if err := c.sys.rc.Read(r.recv); err != nil {
			return 0, c.ioError("recvmmsg", err)
		}
		if r.n == 0 && r.errno == syscall.EAGAIN {
			return 0, nil
		}
		switch r.errno {
		case 0:
		case syscall.ECONNREFUSED:
			c.stats.refused.Add(1)
			continue
		default:
			return 0, c.ioError("recvmmsg", r.errno)
		}
		if n := c.collect(msgs, r.n); n > 0 {
			return n, nil
		}
	}
}

// prepare points the iovecs at the buffers of msgs and resets what the kernel
// overwrites.
func (r *reader) prepare(msgs []Message) {
	for i := range msgs {
		buf := msgs[i].Buf
		r.iovs[i].Base = unsafe.SliceData(buf)
		r.iovs[i].SetLen(cap(buf))
		h := &r.hdrs[i]
		h.Len = 0
		h.Hdr.Namelen = unix.SizeofSockaddrInet6
		h.Hdr.SetControllen(readOOBSpace)
		h.Hdr.Flags = 0
	}
	r.vlen = len(msgs)
}

func (r *reader) recvmmsg(fd uintptr) bool {
	for {
		n, errno := recvmmsg(int(fd), r.hdrs[:r.vlen])
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if !r.nowait {
				return false
			}
			n = 0
		}
		r.n, r.errno = n, errno
		return true
	}
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
		m.Local, m.Segment = parseControl(oob)
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
	defer clear(w.iovs[:])
	sent := 0
	for sent < len(msgs) {
		chunk := msgs[sent:min(len(msgs), sent+MaxBatch)]
		lim := gsoLimits{maxSegments: 1, maxBytes: maxPayloadIPv4}
		if c.sys.v6 {
			lim.maxBytes = maxPayloadIPv6
		}
		if c.sys.gso.Load() {
			lim.maxSegments = MaxGSOSegments
		}
		nr := splitRuns(chunk, lim, w.runs[:])
		packed, errno := w.pack(chunk, nr, c.sys.v6)
		done, retry, err := c.sendRuns(chunk, packed)
		sent += done
		switch {
		case err != nil:
			return sent, err
		case retry:
			continue
		case errno != 0:
			return sent, fmt.Errorf("udp: send to %v from %v: %w", msgs[sent].Addr, c.local, errno)
		}
	}
	return sent, nil
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
		if n > 1 {
			oob := w.oob[r*writeOOBSpace:][:writeOOBSpace]
			putSegmentControl(oob, uint16(len(first.Buf)))
			h.Control = unsafe.SliceData(oob)
			h.SetControllen(writeOOBSpace)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		i += n
	}
	return nr, 0
}

// sendRuns sends the first nr packed entries and returns how many messages of
// chunk went out. retry means the kernel refused a GSO send: GSO is now off
// and the caller should pack the rest again.
func (c *Conn) sendRuns(chunk []Message, nr int) (done int, retry bool, err error) {
	w := c.sys.wr
	for k := 0; k < nr; {
		w.off, w.vlen = k, nr
		if err := c.sys.rc.Write(w.send); err != nil {
			return done, false, c.ioError("sendmmsg", err)
		}
		for _, n := range w.runs[k : k+w.n] {
			done += n
		}
		k += w.n
		switch {
		case w.errno == 0:
		case w.errno == syscall.ECONNREFUSED:
			// A pending ICMP error, reported and cleared instead of
			// sending this entry: count it and send the entry again.
			c.stats.refused.Add(1)
		case w.runs[k] > 1 && (w.errno == syscall.EMSGSIZE || w.errno == syscall.EIO):
			// The kernel refused segmentation: EIO when the route's
			// device cannot checksum, EMSGSIZE when a segment exceeds
			// the path MTU (in which case the plain sends fail too and
			// report it).
			c.sys.gso.Store(false)
			c.stats.gsoFallbacks.Add(1)
			return done, true, nil
		default:
			return done, false, fmt.Errorf("udp: sendmmsg to %v from %v: %w", chunk[done].Addr, c.local, w.errno)
		}
	}
	return done, false, nil
}

func (w *writer) sendmmsg(fd uintptr) bool {
	for {
		n, errno := w.sendmmsgFn(int(fd), w.hdrs[w.off:w.vlen])
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		w.n, w.errno = n, errno
		return true
	}
}
