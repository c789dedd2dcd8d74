// Package udp is the UDP I/O layer of the softnic NIC: one socket, read and
// written in batches (recvmmsg/sendmmsg on Linux; a datagram alone goes by
// sendto, which costs less), with UDP segmentation
// offload on send (GSO, UDP_SEGMENT) and receive coalescing (GRO, UDP_GRO)
// where the kernel offers them.
//
// The socket is unconnected and has the don't-fragment bit set
// (IP_MTU_DISCOVER=IP_PMTUDISC_DO), so Linux stamps IPv4 ID 0 on every
// datagram it sends: the RoCEv2 ICRC covers the IP header, and that is the only
// way a UDP socket's sender can know the ID it must put into the CRC. Each
// datagram a socket bound to a wildcard receives carries the local address it
// was sent to (IP_PKTINFO), the other half of the ICRC's IP header; a socket
// bound to one address receives only what is sent to that address.
//
// A socket connected to each peer would send faster (Linux keeps its route
// instead of looking it up for every datagram: 8-byte ping-pongs in C on
// loopback, busy-polled, took about 1 µs less a round trip with a connected
// send-only socket on each side, none with connected receiving alone), but
// it cannot carry RoCEv2 as it is: a connected socket stamps IPv4 IDs from a
// counter of its own that starts at a random value (a capture shows them),
// and it sends from a port of its own; the ICRC covers both.
//
// GSO changes the IPv4 ID: a coalesced run leaves the socket as one packet
// with ID 0, and the kernel's software segmentation, used before any device
// without UDP segmentation offload (a tap without offloads, most physical
// NICs), numbers its datagrams 0, 1, 2, … On loopback the run stays one packet
// up to the receiving socket, so no datagram is ever seen with its own ID; on
// a wire the i-th datagram of a run carries ID i, which an ICRC computed with
// ID 0 does not match. The tests capture both cases.
//
// The package owns nothing above the datagram: it does not parse RoCEv2, log,
// or keep buffers of its own. Buffers belong to the caller; the package only
// points the kernel at them.
package udp

import (
	"fmt"
	"iter"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// MaxBatch is the most messages one ReadBatch call fills and one sendmmsg call
// of WriteBatch carries; a Conn preallocates its kernel structures for this
// many. Slices of this length make the best use of each system call.
const MaxBatch = 64

// MaxWriteMessages is the most messages one sendmmsg call of WriteBatch
// carries: with GSO its MaxBatch entries may each carry a run of several
// datagrams, so that a batch of this many, a burst of 64 KiB WRITEs or READ
// responses at MTU 4096 (16 operations), goes in one system call. Without
// GSO (or to several destinations) a call carries MaxBatch of them.
const MaxWriteMessages = 4 * MaxBatch

// MaxGSOSegments is the most datagrams one UDP_SEGMENT send carries: the
// kernel's UDP_MAX_SEGMENTS was 64 when UDP GSO appeared in Linux 4.18 (newer
// kernels take more: 6.18 takes 128 and refuses 129 with EINVAL), so 64 is
// safe everywhere. For datagrams of 1 KiB and more the 64 KiB limit on one
// send binds first anyway.
const MaxGSOSegments = 64

// Payload limits of one UDP send, coalesced or not: the IPv4 total length (and
// the IPv6 payload length, which excludes its own header) is a 16-bit field.
const (
	maxPayloadIPv4 = 1<<16 - 1 - 20 - 8
	maxPayloadIPv6 = 1<<16 - 1 - 8
)

// defaultBuffer is the socket buffer size asked for when Options leaves it 0.
// Loopback UDP drops at saturation with anything smaller.
const defaultBuffer = 8 << 20

// Environment switches that turn an offload off for every Conn of the process,
// whatever Options say (any value strconv.ParseBool reads as true).
const (
	EnvNoGSO = "SOFTNIC_NO_GSO"
	EnvNoGRO = "SOFTNIC_NO_GRO"
)

// Options tune a Conn. The zero value is the default.
type Options struct {
	// RecvBuffer and SendBuffer are the socket buffer sizes in bytes; 0 means
	// 8 MiB. As root they are forced past net.core.rmem_max/wmem_max
	// (SO_RCVBUFFORCE/SO_SNDBUFFORCE); otherwise the kernel caps them there.
	RecvBuffer, SendBuffer int
	// DisableGSO and DisableGRO keep the offloads off even when the kernel has
	// them. The environment variables EnvNoGSO and EnvNoGRO do the same.
	DisableGSO, DisableGRO bool
	// IPIDs has the Conn learn the IPv4 identification of the datagrams it
	// receives, for Conn.IPIDOf, from a raw socket beside it (Linux, with
	// CAP_NET_RAW; Features says whether it has one; see ipid.go). Without
	// the privilege the Conn works as without IPIDs.
	IPIDs bool
	// TrafficClass has reads report each datagram's traffic class
	// (Message.TrafficClass), which costs a control message per read
	// datagram (Linux).
	TrafficClass bool
}

// withDefaults fills in the default buffer sizes and applies the environment
// switches.
func (o Options) withDefaults() Options {
	if o.RecvBuffer <= 0 {
		o.RecvBuffer = defaultBuffer
	}
	if o.SendBuffer <= 0 {
		o.SendBuffer = defaultBuffer
	}
	o.DisableGSO = o.DisableGSO || envTrue(EnvNoGSO)
	o.DisableGRO = o.DisableGRO || envTrue(EnvNoGRO)
	return o
}

func envTrue(name string) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && v
}

// Features says which offloads a Conn uses and what the kernel granted, for
// logs and `softnic info`.
type Features struct {
	// GSO is true while sends coalesce runs of equal-sized datagrams into one
	// UDP_SEGMENT send. It turns false for good if the kernel refuses one
	// (see Stats.GSOFallbacks).
	GSO bool
	// GRO is true when the kernel may hand ReadBatch several datagrams of one
	// sender in one Message (see Message.Segment).
	GRO bool
	// MaxGSOSegments is the most datagrams one GSO send carries; 0 without GSO.
	MaxGSOSegments int
	// RecvBuffer and SendBuffer are the socket buffer sizes the kernel reports
	// (Linux reports twice the size asked for: half is bookkeeping).
	RecvBuffer, SendBuffer int
	// TrafficClass is true when writes set each datagram's traffic class
	// (Message.TrafficClass); elsewhere every datagram carries 0.
	TrafficClass bool
	// IPIDs is true when Options.IPIDs asked for the identifications of
	// received IPv4 datagrams and the raw socket that shows them is open.
	IPIDs bool
}

// String formats f on one line for logs, e.g. "gso=on(64) gro=on rcvbuf=16777216 sndbuf=16777216".
func (f Features) String() string {
	gso := "off"
	if f.GSO {
		gso = fmt.Sprintf("on(%d)", f.MaxGSOSegments)
	}
	gro := "off"
	if f.GRO {
		gro = "on"
	}
	s := fmt.Sprintf("gso=%s gro=%s rcvbuf=%d sndbuf=%d", gso, gro, f.RecvBuffer, f.SendBuffer)
	if f.IPIDs {
		s += " ipids=raw"
	}
	return s
}

// Stats counts events the Conn absorbed instead of returning them as errors.
type Stats struct {
	// Truncated counts received datagrams dropped because they, or their
	// control data, did not fit (MSG_TRUNC, MSG_CTRUNC). With GRO one drop
	// may be a whole coalesced run.
	Truncated uint64
	// Refused counts ECONNREFUSED reports (an ICMP port unreachable from an
	// earlier send) that were ignored.
	Refused uint64
	// GSOFallbacks counts GSO sends the kernel refused (EIO; or EMSGSIZE
	// where the datagrams passed one at a time: an EMSGSIZE they meet too
	// means they exceed the route's MTU, which is returned, GSO staying on)
	// and that were sent again one datagram at a time; GSO is off after the
	// first.
	GSOFallbacks uint64
}

// counters are the live Stats.
type counters struct {
	truncated, refused, gsoFallbacks atomic.Uint64
}

// Message is one entry of a batch.
//
// For ReadBatch, Buf's capacity is the space offered (give 64 KiB buffers when
// GRO is on: a coalesced run fills up to 64 KiB) and the call sets N, Addr,
// Local and Segment. For WriteBatch, Buf is one datagram and Addr its
// destination; the other fields are ignored.
type Message struct {
	Buf     []byte
	N       int            // read: bytes received into Buf
	Addr    netip.AddrPort // read: the sender; write: the destination
	Local   netip.Addr     // read: our address the datagram was sent to
	Segment int            // read: with GRO, Buf[:N] holds datagrams of Segment bytes (the last may be shorter); 0 = one datagram
	// TrafficClass is the IP header's traffic class byte (the IPv4 TOS,
	// the IPv6 Traffic Class: DSCP in the upper six bits, ECN in the lower
	// two), where the platform has it per datagram (Features.TrafficClass).
	// Write: the class to send with; 0 sends the socket's, 0. Read: the
	// class the datagram came with, with Options.TrafficClass, else 0.
	TrafficClass uint8
}

// Segments iterates over the datagrams a received Message holds: Buf[:N]
// split every Segment bytes, or Buf[:N] once when Segment is 0. Each datagram
// is capped at its own length, so appending to it cannot overwrite the next.
func Segments(m *Message) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		b := m.Buf[:m.N:m.N]
		seg := m.Segment
		if seg <= 0 || seg >= len(b) {
			yield(b)
			return
		}
		for len(b) > seg {
			if !yield(b[:seg:seg]) {
				return
			}
			b = b[seg:]
		}
		yield(b)
	}
}

// gsoLimits bounds the runs splitRuns builds: the most datagrams and the most
// payload bytes one send may carry. maxSegments 1 turns coalescing off.
type gsoLimits struct {
	maxSegments int
	maxBytes    int
}

// splitRuns cuts msgs into runs, each to go out as one sendmsg entry, and
// stores the run lengths in runs; it returns how many runs it stored, and
// covers as many leading messages as len(runs) runs can hold.
//
// A run is a maximal sequence of messages with the same destination and
// traffic class, where
// every datagram has the length of the first and the last may be shorter but
// not empty: the kernel cuts the concatenated payload every len(first) bytes,
// so this is exactly what UDP_SEGMENT reproduces. A run ends after a shorter
// datagram, at lim.maxSegments datagrams, or before lim.maxBytes would be
// exceeded. An empty datagram is always a run of its own.
func splitRuns(msgs []Message, lim gsoLimits, runs []int) int {
	nr := 0
	for i := 0; i < len(msgs) && nr < len(runs); nr++ {
		first := &msgs[i]
		seg := len(first.Buf)
		total, n := seg, 1
		if seg > 0 && idInvisible(first.Addr.Addr()) {
			for j := i + 1; j < len(msgs) && n < lim.maxSegments; j++ {
				next := &msgs[j]
				l := len(next.Buf)
				if next.Addr != first.Addr || next.TrafficClass != first.TrafficClass || l == 0 || l > seg || total+l > lim.maxBytes {
					break
				}
				total += l
				n++
				if l < seg {
					break
				}
			}
		}
		runs[nr] = n
		i += n
	}
	return nr
}

// idInvisible reports whether datagrams to addr may be coalesced: when the
// kernel (or a NIC) cuts a GSO send into datagrams it numbers their IPv4
// identifications 0, 1, 2 ..., and RoCEv2's ICRC covers the identification,
// so every datagram after the first would fail the check of a receiver that
// sees the real header (rxe, hardware RoCE, Wireshark). IPv6 has no
// identification; on IPv4 loopback the coalesced send reaches the receiving
// socket whole and is cut there, where no IP header is left to see.
func idInvisible(addr netip.Addr) bool {
	return addr.IsLoopback() || (addr.Is6() && !addr.Is4In6())
}

// Conn is a UDP socket read and written in batches. ReadBatch and WriteBatch
// may run at the same time in different goroutines, and Close may be called
// from any goroutine; concurrent calls of the same method take turns.
type Conn struct {
	uc    *net.UDPConn
	local netip.AddrPort
	stats counters
	sys   sysConn // the platform's state, see conn_linux.go and conn_other.go
	ids   *ipids  // with Options.IPIDs and the privilege: see ipid.go
}

// Listen opens a UDP socket bound to addr (IPv4, or IPv6 only: an IPv6 socket
// does not take IPv4 traffic), with the don't-fragment bit set, destination
// addresses reported per datagram, and GSO/GRO switched on where the kernel
// accepts them and opt allows. Port 0 picks a free port; see LocalAddr.
func Listen(addr netip.AddrPort, opt Options) (*Conn, error) {
	if !addr.IsValid() {
		return nil, fmt.Errorf("udp: listen on %v: %w", addr, syscall.EINVAL)
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	network := "udp4"
	if addr.Addr().Is6() {
		network = "udp6"
	}
	uc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("udp: listen on %v: %w", addr, err)
	}
	la := uc.LocalAddr().(*net.UDPAddr).AddrPort()
	c := &Conn{uc: uc, local: netip.AddrPortFrom(la.Addr().Unmap(), la.Port())}
	if err := c.init(opt.withDefaults()); err != nil {
		uc.Close()
		return nil, fmt.Errorf("udp: listen on %v: %w", addr, err)
	}
	if opt.IPIDs && c.local.Addr().Is4() {
		c.ids, _ = openIPIDs(c.local) // without the privilege, without
	}
	return c, nil
}

// LocalAddr returns the address the socket is bound to, with the port the
// kernel picked when Listen was given port 0.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Features reports the offloads in use; GSO may turn off during the life of
// the Conn (see Stats.GSOFallbacks).
func (c *Conn) Features() Features {
	f := c.features()
	f.IPIDs = c.ids != nil
	return f
}

// Stats returns a snapshot of the Conn's counters.
func (c *Conn) Stats() Stats {
	return Stats{
		Truncated:    c.stats.truncated.Load(),
		Refused:      c.stats.refused.Load(),
		GSOFallbacks: c.stats.gsoFallbacks.Load(),
	}
}

// ReadBatch blocks until at least one datagram arrives and fills up to
// min(len(msgs), MaxBatch) messages, returning how many. Truncated datagrams
// are dropped and counted; to keep msgs[:n] dense, ReadBatch may swap entries
// of msgs (every Buf stays in exactly one entry). After Close, or when Close
// interrupts it, it returns an error matching net.ErrClosed.
func (c *Conn) ReadBatch(msgs []Message) (int, error) { return c.readBatch(msgs, true) }

// TryReadBatch is ReadBatch without the wait: it returns 0 at once when no
// datagram is queued (the portable fallback may wait a millisecond).
func (c *Conn) TryReadBatch(msgs []Message) (int, error) { return c.readBatch(msgs, false) }

// WriteBatch sends every message of msgs and returns how many it sent. With
// GSO on, each run of consecutive datagrams to one destination that have the
// same length (the last may be shorter) goes to the kernel as one send that
// the kernel segments, without a copy (see the package doc for what that does
// to the IPv4 ID). When the socket buffer is full it waits
// until there is room. On error, n messages were sent and msgs[n] is the one
// that failed.
func (c *Conn) WriteBatch(msgs []Message) (int, error) { return c.writeBatch(msgs) }

// ReadBatchTurn is ReadBatch for a socket that several goroutines read,
// taking turns through turn: it waits until a datagram (or an error to
// report, such as a port unreachable) is queued without holding turn, then
// takes turn and reads without waiting. It returns with turn held when it
// read datagrams (n > 0), and with turn released otherwise. Goroutines that
// read only under turn, with ReadBatchTurn or TryReadBatch, each read
// distinct datagrams in the order they came, and none sleeps holding turn:
// one may sleep here while others poll with TryReadBatch. After Close, or
// when Close interrupts it, it returns an error matching net.ErrClosed;
// Interrupt ends it with 0. Goroutines that call it at once wait in turn.
func (c *Conn) ReadBatchTurn(msgs []Message, turn sync.Locker) (int, error) {
	return c.readBatchTurn(msgs, turn)
}

// WaitBatchTurn is ReadBatchTurn for a goroutine that waits for something
// else too, which another goroutine's Interrupt reports, and which may
// find the socket waited for already: it returns at once, with waited
// false, when another goroutine waits in ReadBatchTurn or WaitBatchTurn
// (and always with the portable fallback, whose waits cannot be
// interrupted). Otherwise it waits as ReadBatchTurn does, and returns 0
// without error when Interrupt was called during the wait, or before it
// and since the Rearm that returned armed. A goroutine that waits for an
// event X calls Rearm, then makes sure that whoever causes X calls
// Interrupt afterwards, then checks that X has not happened, then waits,
// giving what Rearm returned: it cannot miss X, whatever other goroutines
// rearm meanwhile.
func (c *Conn) WaitBatchTurn(msgs []Message, turn sync.Locker, armed uint64) (n int, waited bool, err error) {
	return c.waitBatchTurn(msgs, turn, armed)
}

// WaitsInterruptibly reports whether WaitBatchTurn can wait (on Linux; not
// with the portable fallback).
func (c *Conn) WaitsInterruptibly() bool { return waitsInterruptibly }

// Interrupt ends a WaitBatchTurn under way, and every one given a Rearm's
// result from before it; and a ReadBatchTurn under way, which returns 0.
func (c *Conn) Interrupt() { c.interrupt() }

// Rearm returns what a WaitBatchTurn that is to end at the Interrupts
// after this call, and at none before it, is given.
func (c *Conn) Rearm() (armed uint64) { return c.rearm() }

// ReadTrafficClass has the reads from now on report each datagram's
// traffic class, as Options.TrafficClass has them from the start, for a
// user that needs the class only once something asks for it. Where the
// platform carries no class (Features.TrafficClass) it does nothing.
func (c *Conn) ReadTrafficClass() error { return c.readTrafficClass() }

// StopWaiting takes the socket out of Go's netpoller until the next
// ReadBatch or ReadBatchTurn waits for it: a process that polls the socket
// with TryReadBatch, and has no goroutine waiting for it, is then not
// woken by its datagrams (see conn_linux.go). During such a wait it does
// nothing, as it does off Linux.
func (c *Conn) StopWaiting() { c.stopWaiting() }

// Close closes the socket and wakes a ReadBatch, ReadBatchTurn or
// WriteBatch blocked on it.
func (c *Conn) Close() error {
	if c.ids != nil {
		c.ids.close()
	}
	return c.close()
}
