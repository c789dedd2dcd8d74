//go:build linux && !softnic_portable

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireOffloads skips the test when the kernel lacks an offload it needs.
func requireOffloads(t *testing.T, c *Conn, gso, gro bool) {
	t.Helper()
	f := c.Features()
	if gso && !f.GSO || gro && !f.GRO {
		t.Skipf("kernel offloads %v, test needs gso=%v gro=%v", f, gso, gro)
	}
}

// payload fills b with a pattern unique to (sender, seq) and stamps both in
// its first 8 bytes when there is room.
func payload(b []byte, sender, seq int) {
	for i := range b {
		b[i] = byte(sender*131 + seq*7 + i)
	}
	if len(b) >= 8 {
		binary.BigEndian.PutUint32(b, uint32(sender))
		binary.BigEndian.PutUint32(b[4:], uint32(seq))
	}
}

// outgoing builds one message per size, to dst, with payload(sender, i).
func outgoing(sizes []int, dst netip.AddrPort, sender int) []Message {
	msgs := make([]Message, len(sizes))
	for i, n := range sizes {
		msgs[i] = Message{Buf: make([]byte, n), Addr: dst}
		payload(msgs[i].Buf, sender, i)
	}
	return msgs
}

// received is one datagram as ReadBatch delivered it.
type received struct {
	data      []byte
	from      netip.AddrPort
	local     netip.Addr
	coalesced bool // arrived in a Message with Segment > 0
	tclass    uint8
}

// readDatagrams reads from c until want datagrams have arrived, splitting GRO
// runs, with buffers of bufSize bytes.
func readDatagrams(t *testing.T, c *Conn, want, bufSize int) []received {
	t.Helper()
	timer := time.AfterFunc(watchdog, func() { c.Close() })
	defer timer.Stop()
	msgs := make([]Message, MaxBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, bufSize)
	}
	var got []received
	for len(got) < want {
		n, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", len(got), want, err)
		}
		for _, m := range msgs[:n] {
			for d := range Segments(&m) {
				got = append(got, received{bytes.Clone(d), m.Addr, m.Local, m.Segment > 0, m.TrafficClass})
			}
		}
	}
	return got
}

// roundTripSizes mixes runs that coalesce (equal sizes, a short tail),
// breaks (a longer datagram, an empty one) and more messages than MaxBatch.
func roundTripSizes() []int {
	var sizes []int
	sizes = append(sizes, repeat(30, 1200)...)
	sizes = append(sizes, 700)
	sizes = append(sizes, repeat(5, 1300)...)
	sizes = append(sizes, 0)
	sizes = append(sizes, repeat(3, 100)...)
	sizes = append(sizes, repeat(100, 4096)...)
	sizes = append(sizes, 9000, 9000, 1)
	return sizes
}

// TestWriteBatchOneCall: a burst of MaxWriteMessages datagrams cut as
// softnic cuts 64 KiB WRITEs at MTU 4096 (a first packet with a RETH, then
// 15 shorter ones: two runs an operation) leaves in one sendmmsg call, and
// arrives whole and in order.
func TestWriteBatchOneCall(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	rx := listen(t, "127.0.0.1:0", Options{DisableGSO: true})
	requireOffloads(t, tx, true, false)
	calls := 0
	tx.sys.wr.sendmmsgFn = func(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
		calls++
		return sendmmsg(fd, hdrs)
	}
	var sizes []int
	for len(sizes) < MaxWriteMessages {
		sizes = append(sizes, 12+16+4096+4)
		sizes = append(sizes, repeat(15, 12+4096+4)...)
	}
	msgs := outgoing(sizes, rx.LocalAddr(), 1)
	if n, err := tx.WriteBatch(msgs); err != nil || n != len(msgs) {
		t.Fatalf("WriteBatch = %d, %v, want %d, nil", n, err, len(msgs))
	}
	if calls != 1 {
		t.Errorf("%d sendmmsg calls for %d datagrams, want 1", calls, len(msgs))
	}
	for i, r := range readDatagrams(t, rx, len(msgs), 1<<16) {
		if !bytes.Equal(r.data, msgs[i].Buf) {
			t.Fatalf("datagram %d: got %d bytes, want %d", i, len(r.data), len(msgs[i].Buf))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		addr     string
		gso, gro bool
	}{
		{name: "ipv4 plain", addr: "127.0.0.1:0"},
		{name: "ipv4 gso", addr: "127.0.0.1:0", gso: true},
		{name: "ipv4 gro", addr: "127.0.0.1:0", gro: true},
		{name: "ipv4 gso and gro", addr: "127.0.0.1:0", gso: true, gro: true},
		{name: "ipv6 plain", addr: "[::1]:0"},
		{name: "ipv6 gso", addr: "[::1]:0", gso: true},
		{name: "ipv6 gro", addr: "[::1]:0", gro: true},
		{name: "ipv6 gso and gro", addr: "[::1]:0", gso: true, gro: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, tt.addr, Options{DisableGSO: !tt.gso, DisableGRO: true})
			rx := listen(t, tt.addr, Options{DisableGSO: true, DisableGRO: !tt.gro})
			requireOffloads(t, tx, tt.gso, false)
			requireOffloads(t, rx, false, tt.gro)
			if f := tx.Features(); f.GSO != tt.gso || f.GRO {
				t.Fatalf("sender features %v, want gso=%v gro=false", f, tt.gso)
			}
			if f := rx.Features(); f.GRO != tt.gro || f.GSO {
				t.Fatalf("receiver features %v, want gso=false gro=%v", f, tt.gro)
			}

			sizes := roundTripSizes()
			msgs := outgoing(sizes, rx.LocalAddr(), 1)
			n, err := tx.WriteBatch(msgs)
			if err != nil || n != len(msgs) {
				t.Fatalf("WriteBatch = %d, %v, want %d, nil", n, err, len(msgs))
			}
			got := readDatagrams(t, rx, len(msgs), 1<<16)

			coalesced := 0
			for i, r := range got {
				if !bytes.Equal(r.data, msgs[i].Buf) {
					t.Fatalf("datagram %d: got %d bytes %x…, want %d bytes %x…", i, len(r.data), head(r.data), len(msgs[i].Buf), head(msgs[i].Buf))
				}
				if r.from != tx.LocalAddr() || r.local != rx.LocalAddr().Addr() {
					t.Fatalf("datagram %d: from %v to %v, want from %v to %v", i, r.from, r.local, tx.LocalAddr(), rx.LocalAddr().Addr())
				}
				if r.coalesced {
					coalesced++
				}
			}
			switch {
			case tt.gso && tt.gro && coalesced == 0:
				t.Errorf("GSO sender and GRO receiver: no datagram arrived coalesced")
			case !tt.gro && coalesced > 0:
				t.Errorf("%d datagrams arrived coalesced at a receiver without GRO", coalesced)
			}
			if s := rx.Stats(); s != (Stats{}) {
				t.Errorf("receiver stats %+v, want none", s)
			}
			if s := tx.Stats(); s != (Stats{}) {
				t.Errorf("sender stats %+v, want none", s)
			}
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 8)] }

// TestTrafficClass: each datagram leaves with its Message's traffic class
// in the IP header (IPv4 TOS, IPv6 Traffic Class), in a GSO run as alone,
// and a class change ends a run; 0 leaves the header's 0. A plain socket
// that asks the kernel for each datagram's class sees them, and so does a
// Conn with Options.TrafficClass, with GRO (which merges only datagrams of
// one class) and without, and one that asked later (ReadTrafficClass);
// one without either reports 0.
func TestTrafficClass(t *testing.T) {
	for _, tt := range []struct {
		name, addr        string
		level, recv, kind int
	}{
		{"ipv4", "127.0.0.1:0", unix.IPPROTO_IP, unix.IP_RECVTOS, unix.IP_TOS},
		{"ipv6", "[::1]:0", unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, unix.IPV6_TCLASS},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, tt.addr, Options{DisableGRO: true})
			if !tx.Features().TrafficClass {
				t.Fatalf("features %v: no per-datagram traffic class on Linux", tx.Features())
			}
			rx, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tt.addr)))
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			raw, err := rx.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), tt.level, tt.recv, 1) })
			if serr != nil {
				t.Fatal(serr)
			}
			classes := []uint8{0, 0xb8, 0xb8, 0xb8, 0x02, 0}
			msgs := make([]Message, len(classes))
			for i, c := range classes {
				msgs[i] = Message{Buf: bytes.Repeat([]byte{byte(i)}, 100), Addr: rx.LocalAddr().(*net.UDPAddr).AddrPort(), TrafficClass: c}
			}
			send := func(to netip.AddrPort) {
				t.Helper()
				for i := range msgs {
					msgs[i].Addr = to
				}
				if n, err := tx.WriteBatch(msgs); n != len(msgs) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
			}
			send(rx.LocalAddr().(*net.UDPAddr).AddrPort())
			rx.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf, oob := make([]byte, 200), make([]byte, 64)
			for i, want := range classes {
				n, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
				if err != nil {
					t.Fatalf("datagram %d: %v", i, err)
				}
				got, ok := receivedClass(t, oob[:oobn], tt.level, tt.kind)
				if n != 100 || buf[0] != byte(i) || !ok || got != want {
					t.Errorf("datagram %d: %d bytes of %d, class %#x (reported %v), want 100 of %d, class %#x", i, n, buf[0], got, ok, i, want)
				}
			}
			for _, rc := range []struct {
				o     Options
				later bool // ReadTrafficClass before the datagrams come
			}{{Options{TrafficClass: true}, false}, {Options{TrafficClass: true, DisableGRO: true}, false}, {Options{}, false}, {Options{}, true}} {
				c := listen(t, tt.addr, rc.o)
				if rc.later {
					if err := c.ReadTrafficClass(); err != nil {
						t.Fatal(err)
					}
				}
				send(c.LocalAddr())
				for i, r := range readDatagrams(t, c, len(classes), 1<<16) {
					want := classes[i]
					if !rc.o.TrafficClass && !rc.later {
						want = 0
					}
					if r.data[0] != byte(i) || r.tclass != want {
						t.Errorf("%+v (ReadTrafficClass: %v): datagram %d: %d with class %#x, want %d with %#x", rc.o, rc.later, i, r.data[0], r.tclass, i, want)
					}
				}
			}
		})
	}
}

// receivedClass finds in oob the traffic class control message of
// level and kind (the kernel writes IP_TOS's as a byte, IPV6_TCLASS's as
// an int).
func receivedClass(t *testing.T, oob []byte, level, kind int) (uint8, bool) {
	t.Helper()
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cmsgs {
		if int(m.Header.Level) == level && int(m.Header.Type) == kind && len(m.Data) > 0 {
			return m.Data[0], true
		}
	}
	return 0, false
}

// TestLoneDatagramsGoBySendto: a batch of one datagram, not a GSO run,
// leaves by sendto; anything else by sendmmsg. Each arrives byte for byte as
// the same datagram sent whole, from the sender's address.
func TestLoneDatagramsGoBySendto(t *testing.T) {
	tests := []struct {
		name     string
		addr     string
		sizes    []int
		sendto   int // calls of each
		sendmmsg int
	}{
		{name: "ipv4 one", addr: "127.0.0.1:0", sizes: []int{12 + 16 + 8 + 4}, sendto: 1},
		{name: "ipv6 one", addr: "[::1]:0", sizes: []int{12 + 4 + 8 + 4}, sendto: 1},
		{name: "empty", addr: "127.0.0.1:0", sizes: []int{0}, sendto: 1},
		{name: "one large", addr: "127.0.0.1:0", sizes: []int{9000}, sendto: 1},
		{name: "two", addr: "127.0.0.1:0", sizes: []int{40, 60}, sendmmsg: 1},
		{name: "gso run", addr: "127.0.0.1:0", sizes: repeat(3, 1000), sendmmsg: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, tt.addr, Options{})
			rx := listen(t, tt.addr, Options{DisableGRO: true})
			requireOffloads(t, tx, true, false)
			var sendtos, sendmmsgs int
			w := tx.sys.wr
			w.sendtoFn = func(fd int, b []byte, h *unix.Msghdr) syscall.Errno {
				sendtos++
				return sendto(fd, b, h)
			}
			w.sendmmsgFn = func(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
				sendmmsgs++
				return sendmmsg(fd, hdrs)
			}
			whole := outgoing(tt.sizes, rx.LocalAddr(), 1)
			if n, err := tx.WriteBatch(whole); err != nil || n != len(whole) {
				t.Fatalf("WriteBatch = %d, %v, want %d, nil", n, err, len(whole))
			}
			if sendtos != tt.sendto || sendmmsgs != tt.sendmmsg {
				t.Errorf("%d sendto and %d sendmmsg calls, want %d and %d", sendtos, sendmmsgs, tt.sendto, tt.sendmmsg)
			}
			for i, r := range readDatagrams(t, rx, len(whole), 1<<16) {
				if !bytes.Equal(r.data, whole[i].Buf) || r.from != tx.LocalAddr() {
					t.Fatalf("datagram %d: %d bytes %x… from %v, want %d bytes %x… from %v", i, len(r.data), head(r.data), r.from, len(whole[i].Buf), head(whole[i].Buf), tx.LocalAddr())
				}
			}
		})
	}
}

func TestLocalAddressOfWildcard(t *testing.T) {
	tests := []struct {
		name, bind, dst string
	}{
		{name: "ipv4 wildcard", bind: "0.0.0.0:0", dst: "127.0.0.1"},
		{name: "ipv4 bound", bind: "127.0.0.1:0", dst: "127.0.0.1"},
		{name: "ipv6 wildcard", bind: "[::]:0", dst: "::1"},
		{name: "ipv6 bound", bind: "[::1]:0", dst: "::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rx := listen(t, tt.bind, Options{})
			tx := listen(t, tt.bind, Options{})
			dst := netip.AddrPortFrom(netip.MustParseAddr(tt.dst), rx.LocalAddr().Port())
			if _, err := tx.WriteBatch(outgoing([]int{64}, dst, 1)); err != nil {
				t.Fatal(err)
			}
			got := readDatagrams(t, rx, 1, 2048)
			if got[0].local != dst.Addr() {
				t.Fatalf("Local = %v, want %v", got[0].local, dst.Addr())
			}
			if got[0].from.Addr() != dst.Addr() || got[0].from.Port() != tx.LocalAddr().Port() {
				t.Fatalf("Addr = %v, want %v:%d", got[0].from, dst.Addr(), tx.LocalAddr().Port())
			}
		})
	}
}

// sockopt reads an integer socket option of c.
func sockopt(t *testing.T, c *Conn, level, opt int) int {
	t.Helper()
	var v int
	var serr error
	if err := c.sys.control(func(fd int) { v, serr = unix.GetsockoptInt(fd, level, opt) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("getsockopt(%d, %d): %v", level, opt, serr)
	}
	return v
}

func TestSocketOptions(t *testing.T) {
	tests := []struct {
		name       string
		addr       string
		level, opt int
		want       int
	}{
		{name: "ipv4 DF", addr: "127.0.0.1:0", level: unix.IPPROTO_IP, opt: unix.IP_MTU_DISCOVER, want: unix.IP_PMTUDISC_DO},
		{name: "ipv4 pktinfo", addr: "0.0.0.0:0", level: unix.IPPROTO_IP, opt: unix.IP_PKTINFO, want: 1},
		{name: "ipv4 bound, no pktinfo", addr: "127.0.0.1:0", level: unix.IPPROTO_IP, opt: unix.IP_PKTINFO, want: 0},
		{name: "ipv4 multicast TTL as rxe's", addr: "127.0.0.1:0", level: unix.IPPROTO_IP, opt: unix.IP_MULTICAST_TTL, want: 64},
		{name: "ipv6 DF", addr: "[::1]:0", level: unix.IPPROTO_IPV6, opt: unix.IPV6_MTU_DISCOVER, want: unix.IPV6_PMTUDISC_DO},
		{name: "ipv6 pktinfo", addr: "[::]:0", level: unix.IPPROTO_IPV6, opt: unix.IPV6_RECVPKTINFO, want: 1},
		{name: "ipv6 bound, no pktinfo", addr: "[::1]:0", level: unix.IPPROTO_IPV6, opt: unix.IPV6_RECVPKTINFO, want: 0},
		{name: "ipv6 only", addr: "[::]:0", level: unix.IPPROTO_IPV6, opt: unix.IPV6_V6ONLY, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := listen(t, tt.addr, Options{})
			if got := sockopt(t, c, tt.level, tt.opt); got != tt.want {
				t.Fatalf("getsockopt = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBufferSizes(t *testing.T) {
	c := listen(t, "127.0.0.1:0", Options{RecvBuffer: 3 << 20, SendBuffer: 5 << 20})
	f := c.Features()
	if got := sockopt(t, c, unix.SOL_SOCKET, unix.SO_RCVBUF); got != f.RecvBuffer {
		t.Fatalf("Features().RecvBuffer = %d, SO_RCVBUF = %d", f.RecvBuffer, got)
	}
	if got := sockopt(t, c, unix.SOL_SOCKET, unix.SO_SNDBUF); got != f.SendBuffer {
		t.Fatalf("Features().SendBuffer = %d, SO_SNDBUF = %d", f.SendBuffer, got)
	}
	if unix.Geteuid() != 0 {
		t.Skip("not root: the kernel caps buffers at net.core.[rw]mem_max")
	}
	// Linux doubles the size asked for, for its bookkeeping.
	if f.RecvBuffer != 2*(3<<20) || f.SendBuffer != 2*(5<<20) {
		t.Fatalf("buffers %d, %d, want %d, %d (forced past the sysctl limits)", f.RecvBuffer, f.SendBuffer, 2*(3<<20), 2*(5<<20))
	}
}

func TestDisableOffloads(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		opt      Options
		gso, gro bool
	}{
		{name: "options", opt: Options{DisableGSO: true, DisableGRO: true}},
		{name: "no gso from env", env: EnvNoGSO, gro: true},
		{name: "no gro from env", env: EnvNoGRO, gso: true},
	}
	probe := listen(t, "127.0.0.1:0", Options{})
	requireOffloads(t, probe, true, true)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(tt.env, "1")
			}
			c := listen(t, "127.0.0.1:0", tt.opt)
			if f := c.Features(); f.GSO != tt.gso || f.GRO != tt.gro || (f.MaxGSOSegments > 0) != tt.gso {
				t.Fatalf("Features() = %v, want gso=%v gro=%v", f, tt.gso, tt.gro)
			}
			gro := sockopt(t, c, unix.IPPROTO_UDP, unix.UDP_GRO)
			if (gro == 1) != tt.gro {
				t.Fatalf("UDP_GRO socket option = %d, want on=%v", gro, tt.gro)
			}
		})
	}
}

func TestListenErrors(t *testing.T) {
	tests := []struct {
		name string
		addr netip.AddrPort
		want error
	}{
		{name: "zero address", addr: netip.AddrPort{}, want: syscall.EINVAL},
		{name: "port in use", addr: netip.MustParseAddrPort("127.0.0.1:0"), want: syscall.EADDRINUSE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr
			if tt.want == syscall.EADDRINUSE {
				addr = listen(t, "127.0.0.1:0", Options{}).LocalAddr()
			}
			c, err := Listen(addr, Options{})
			if !errors.Is(err, tt.want) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("Listen(%v) error %v, want %v", addr, err, tt.want)
			}
		})
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name     string
		bind     string
		bad      netip.AddrPort
		wantErr  error
		wantSent int
	}{
		{name: "ipv6 destination on ipv4 socket", bind: "127.0.0.1:0", bad: netip.MustParseAddrPort("[::1]:9"), wantErr: syscall.EAFNOSUPPORT, wantSent: 3},
		{name: "ipv4 destination on ipv6 socket", bind: "[::1]:0", bad: netip.MustParseAddrPort("127.0.0.1:9"), wantErr: syscall.EAFNOSUPPORT, wantSent: 3},
		{name: "mapped destination on ipv6 socket", bind: "[::1]:0", bad: netip.MustParseAddrPort("[::ffff:127.0.0.1]:9"), wantErr: syscall.EAFNOSUPPORT, wantSent: 3},
		{name: "zero destination", bind: "127.0.0.1:0", bad: netip.AddrPort{}, wantErr: syscall.EINVAL, wantSent: 3},
		{name: "port zero", bind: "127.0.0.1:0", bad: netip.MustParseAddrPort("127.0.0.1:0"), wantErr: syscall.EINVAL, wantSent: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, tt.bind, Options{})
			rx := listen(t, tt.bind, Options{})
			msgs := outgoing(repeat(5, 100), rx.LocalAddr(), 1)
			msgs[3].Addr = tt.bad
			n, err := tx.WriteBatch(msgs)
			if n != tt.wantSent || !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteBatch = %d, %v, want %d, %v", n, err, tt.wantSent, tt.wantErr)
			}
			got := readDatagrams(t, rx, tt.wantSent, 2048)
			for i, r := range got {
				if !bytes.Equal(r.data, msgs[i].Buf) {
					t.Fatalf("datagram %d differs", i)
				}
			}
		})
	}
}

func TestTruncatedDatagramsAreDropped(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", Options{DisableGSO: true})
			rx := listen(t, "127.0.0.1:0", Options{DisableGRO: !gro})
			msgs := outgoing([]int{50, 2000, 60, 3000, 3000, 70}, rx.LocalAddr(), 1)
			if _, err := tx.WriteBatch(msgs); err != nil {
				t.Fatal(err)
			}
			got := readDatagrams(t, rx, 3, 1000)
			for i, want := range []int{0, 2, 5} {
				if !bytes.Equal(got[i].data, msgs[want].Buf) {
					t.Fatalf("datagram %d: got %d bytes, want message %d (%d bytes)", i, len(got[i].data), want, len(msgs[want].Buf))
				}
			}
			if s := rx.Stats(); s.Truncated != 3 {
				t.Fatalf("Stats().Truncated = %d, want 3", s.Truncated)
			}
		})
	}
}

// TestReadBatchKeepsEveryBuffer checks that dropping truncated datagrams
// permutes the buffers among the messages without losing or duplicating one.
func TestReadBatchKeepsEveryBuffer(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", Options{DisableGSO: true})
	rx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	out := outgoing([]int{2000, 10, 2000, 20, 30}, rx.LocalAddr(), 1)
	if _, err := tx.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, len(out))
	owners := map[*byte]bool{}
	for i := range msgs {
		msgs[i].Buf = make([]byte, 1000)
		owners[&msgs[i].Buf[0]] = true
	}
	n, err := rx.ReadBatch(msgs)
	if err != nil || n != 3 {
		t.Fatalf("ReadBatch = %d, %v, want 3, nil", n, err)
	}
	for i, want := range []int{1, 3, 4} {
		if !bytes.Equal(msgs[i].Buf[:msgs[i].N], out[want].Buf) {
			t.Fatalf("message %d holds %x, want message %d", i, msgs[i].Buf[:msgs[i].N], want)
		}
	}
	for i := range msgs {
		if !owners[&msgs[i].Buf[0]] {
			t.Fatalf("message %d holds a buffer not in the batch, or one twice", i)
		}
		delete(owners, &msgs[i].Buf[0])
	}
}

// deadPort returns a loopback port nothing listens on: one the kernel just
// handed out and that was closed again.
func deadPort(t *testing.T, addr string) netip.AddrPort {
	t.Helper()
	c, err := Listen(netip.MustParseAddrPort(addr), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := c.LocalAddr()
	c.Close()
	return p
}

// TestRefusedIsIgnored makes the kernel report an ICMP port unreachable on
// both the write and the read path. An unconnected socket only sees them with
// IP_RECVERR, which the test turns on for that purpose.
func TestRefusedIsIgnored(t *testing.T) {
	tests := []struct {
		name string
		addr string
		opt  func(fd int) error
	}{
		{name: "ipv4", addr: "127.0.0.1:0", opt: func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1) }},
		{name: "ipv6", addr: "[::1]:0", opt: func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listen(t, tt.addr, Options{})
			b := listen(t, tt.addr, Options{})
			var serr error
			if err := a.sys.control(func(fd int) { serr = tt.opt(fd) }); err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			dead := deadPort(t, tt.addr)

			// Write path: the ICMP error of the first send is reported
			// instead of sending the second, which must go out anyway.
			if _, err := a.WriteBatch(outgoing([]int{10}, dead, 1)); err != nil {
				t.Fatal(err)
			}
			toB := outgoing([]int{20}, b.LocalAddr(), 1)
			if n, err := a.WriteBatch(toB); n != 1 || err != nil {
				t.Fatalf("WriteBatch after ICMP error = %d, %v, want 1, nil", n, err)
			}
			// The refused send did not go out, so the next datagram b
			// sees after toB is the next one a sends, not a copy of toB.
			next := outgoing([]int{21}, b.LocalAddr(), 3)
			if _, err := a.WriteBatch(next); err != nil {
				t.Fatal(err)
			}
			got := readDatagrams(t, b, 2, 2048)
			if !bytes.Equal(got[0].data, toB[0].Buf) || !bytes.Equal(got[1].data, next[0].Buf) {
				t.Fatalf("b received %x, %x; want %x, %x", got[0].data, got[1].data, toB[0].Buf, next[0].Buf)
			}
			if s := a.Stats(); s.Refused != 1 {
				t.Fatalf("after the write: Stats().Refused = %d, want 1", s.Refused)
			}

			// Read path: the error is pending when a reads.
			if _, err := a.WriteBatch(outgoing([]int{10}, dead, 1)); err != nil {
				t.Fatal(err)
			}
			toA := outgoing([]int{30}, a.LocalAddr(), 2)
			if _, err := b.WriteBatch(toA); err != nil {
				t.Fatal(err)
			}
			if got := readDatagrams(t, a, 1, 2048); !bytes.Equal(got[0].data, toA[0].Buf) {
				t.Fatalf("a received %x, want %x", got[0].data, toA[0].Buf)
			}
			if s := a.Stats(); s.Refused != 2 {
				t.Fatalf("after the read: Stats().Refused = %d, want 2", s.Refused)
			}
		})
	}
}

// refusingSendmmsg fakes a kernel that refuses UDP_SEGMENT sends with errno
// and passes everything else to the real system call, stopping, as sendmmsg
// does, at the first entry that fails.
func refusingSendmmsg(errno syscall.Errno) func(int, []unix.Mmsghdr) (int, syscall.Errno) {
	return func(fd int, hdrs []unix.Mmsghdr) (int, syscall.Errno) {
		for i := range hdrs {
			if hdrs[i].Hdr.Controllen == 0 {
				continue
			}
			if i == 0 {
				return 0, errno
			}
			hdrs = hdrs[:i]
			break
		}
		return sendmmsg(fd, hdrs)
	}
}

func TestGSORefused(t *testing.T) {
	tests := []struct {
		name          string
		errno         syscall.Errno
		sizes         []int
		wantSent      int
		wantErr       error
		wantFallbacks uint64
		wantGSO       bool
	}{
		{name: "EMSGSIZE falls back", errno: syscall.EMSGSIZE, sizes: append([]int{50, 60}, repeat(10, 1000)...), wantSent: 12, wantFallbacks: 1},
		{name: "EIO falls back", errno: syscall.EIO, sizes: repeat(200, 1000), wantSent: 200, wantFallbacks: 1},
		{name: "other errors are returned", errno: syscall.ENOBUFS, sizes: append([]int{50, 60}, repeat(10, 1000)...), wantSent: 2, wantErr: syscall.ENOBUFS, wantGSO: true},
		{name: "no run, no refusal", errno: syscall.EMSGSIZE, sizes: []int{10, 20, 30, 40}, wantSent: 4, wantGSO: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
			rx := listen(t, "127.0.0.1:0", Options{DisableGSO: true, DisableGRO: true})
			requireOffloads(t, tx, true, false)
			tx.sys.wr.sendmmsgFn = refusingSendmmsg(tt.errno)
			msgs := outgoing(tt.sizes, rx.LocalAddr(), 1)
			n, err := tx.WriteBatch(msgs)
			if n != tt.wantSent || !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteBatch = %d, %v, want %d, %v", n, err, tt.wantSent, tt.wantErr)
			}
			got := readDatagrams(t, rx, tt.wantSent, 2048)
			for i, r := range got {
				if !bytes.Equal(r.data, msgs[i].Buf) {
					t.Fatalf("datagram %d differs", i)
				}
			}
			if s := tx.Stats(); s.GSOFallbacks != tt.wantFallbacks {
				t.Fatalf("Stats().GSOFallbacks = %d, want %d", s.GSOFallbacks, tt.wantFallbacks)
			}
			if f := tx.Features(); f.GSO != tt.wantGSO {
				t.Fatalf("Features().GSO = %v after the batch, want %v", f.GSO, tt.wantGSO)
			}
		})
	}
}

// TestGROSplit has two senders blast equal-sized datagrams, one coalescing
// them with GSO and one not, at a GRO receiver: every datagram must arrive
// byte for byte, in order per sender, however the kernel grouped them.
func TestGROSplit(t *testing.T) {
	const (
		size    = 1200
		count   = 3000 // per sender, 3.6 MB each: less than the 8 MiB receive buffer
		perCall = 48
	)
	rx := listen(t, "127.0.0.1:0", Options{})
	requireOffloads(t, rx, false, true)
	senders := []*Conn{
		listen(t, "127.0.0.1:0", Options{DisableGRO: true}),
		listen(t, "127.0.0.1:0", Options{DisableGSO: true, DisableGRO: true}),
	}
	requireOffloads(t, senders[0], true, false)
	index := map[netip.AddrPort]int{}
	var wg sync.WaitGroup
	errs := make([]error, len(senders))
	for s, tx := range senders {
		index[tx.LocalAddr()] = s
		msgs := outgoing(repeat(count, size), rx.LocalAddr(), s)
		wg.Go(func() {
			for off := 0; off < count; off += perCall {
				if _, err := tx.WriteBatch(msgs[off:min(count, off+perCall)]); err != nil {
					errs[s] = err
					return
				}
			}
		})
	}
	got := readDatagrams(t, rx, len(senders)*count, 1<<16)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	next := make([]int, len(senders))
	coalesced := make([]int, len(senders))
	want := make([]byte, size)
	for i, r := range got {
		s, ok := index[r.from]
		if !ok {
			t.Fatalf("datagram %d from unknown sender %v", i, r.from)
		}
		payload(want, s, next[s])
		if !bytes.Equal(r.data, want) {
			seq := -1
			if len(r.data) >= 8 {
				seq = int(binary.BigEndian.Uint32(r.data[4:]))
			}
			t.Fatalf("datagram %d from sender %d: %d bytes with sequence number %d, want %d bytes of number %d", i, s, len(r.data), seq, size, next[s])
		}
		next[s]++
		if r.coalesced {
			coalesced[s]++
		}
	}
	if coalesced[0] == 0 {
		t.Errorf("none of the GSO sender's %d datagrams arrived coalesced", count)
	}
	if coalesced[1] != 0 {
		t.Errorf("%d of the plain sender's datagrams arrived coalesced; loopback should not merge them", coalesced[1])
	}
	t.Logf("coalesced per sender: %v of %d", coalesced, count)
}

func TestBatchesDoNotAllocate(t *testing.T) {
	tests := []struct {
		name     string
		addr     string
		gso, gro bool
		one      bool // one small datagram (sendto)
	}{
		{name: "ipv4 plain", addr: "127.0.0.1:0"},
		{name: "ipv4 one", addr: "127.0.0.1:0", one: true},
		{name: "ipv4 gso and gro", addr: "127.0.0.1:0", gso: true, gro: true},
		{name: "ipv6 plain", addr: "[::1]:0"},
		{name: "ipv6 gso and gro", addr: "[::1]:0", gso: true, gro: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, tt.addr, Options{DisableGSO: !tt.gso, DisableGRO: true})
			rx := listen(t, tt.addr, Options{DisableGSO: true, DisableGRO: !tt.gro})
			requireOffloads(t, tx, tt.gso, false)
			requireOffloads(t, rx, false, tt.gro)
			out := outgoing(repeat(16, 1024), rx.LocalAddr(), 1)
			if tt.one {
				out = outgoing([]int{12 + 16 + 8 + 4}, rx.LocalAddr(), 1)
			}
			in := make([]Message, 16)
			for i := range in {
				in[i].Buf = make([]byte, 1<<16)
			}
			timer := time.AfterFunc(watchdog, func() { rx.Close() })
			defer timer.Stop()
			var failure error
			allocs := testing.AllocsPerRun(200, func() {
				if _, err := tx.WriteBatch(out); err != nil {
					failure = err
					return
				}
				for got := 0; got < len(out); {
					n, err := rx.ReadBatch(in)
					if err != nil {
						failure = err
						return
					}
					for _, m := range in[:n] {
						for range Segments(&m) {
							got++
						}
					}
				}
			})
			if failure != nil {
				t.Fatal(failure)
			}
			if allocs != 0 {
				t.Fatalf("a WriteBatch and its ReadBatches allocate %v times", allocs)
			}
		})
	}
}

// WaitBatchTurn waits only when no other goroutine waits for the socket,
// and Interrupt ends its wait, and every later one given a Rearm from
// before it, whatever other goroutines rearmed since; it ends a
// ReadBatchTurn too, which returns 0. A datagram ends the wait with the
// turn held, as ReadBatchTurn's does.
func TestWaitBatchTurn(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	msgs := messages(4, 2048)
	var turn sync.Mutex
	type result struct {
		n      int
		waited bool
		err    error
	}
	wait := func(armed uint64) <-chan result {
		done := make(chan result, 1)
		go func() {
			n, waited, err := b.WaitBatchTurn(msgs, &turn, armed)
			done <- result{n, waited, err}
		}()
		return done
	}
	expect := func(what string, done <-chan result, want result) {
		t.Helper()
		select {
		case r := <-done:
			if r != want {
				t.Fatalf("%s: %+v, want %+v", what, r, want)
			}
		case <-time.After(watchdog):
			t.Fatalf("%s: still waiting", what)
		}
	}

	reading := make(chan result, 1)
	go func() {
		n, err := b.ReadBatchTurn(msgs[:1], &turn)
		reading <- result{n, true, err}
	}()
	armed := b.Rearm()
	waitForIOWait(t, "udp.(*Conn).readBatchTurn")
	expect("WaitBatchTurn beside a waiting ReadBatchTurn", wait(armed), result{})
	b.Interrupt()
	expect("ReadBatchTurn interrupted", reading, result{0, true, nil})

	expect("WaitBatchTurn after an Interrupt", wait(armed), result{0, true, nil})
	done := wait(b.Rearm())
	waitForIOWait(t, "udp.(*Conn).waitBatchTurn")
	b.Interrupt()
	expect("WaitBatchTurn interrupted", done, result{0, true, nil})

	// An Interrupt meant for one waiter survives another's Rearm (two CQ
	// waiters of one device: the second rearming undid the first's
	// Interrupt, which then slept until a datagram came).
	armed = b.Rearm()
	b.Interrupt()
	b.Rearm()
	expect("WaitBatchTurn interrupted before another's Rearm", wait(armed), result{0, true, nil})

	done = wait(b.Rearm())
	waitForIOWait(t, "udp.(*Conn).waitBatchTurn")
	if _, err := a.WriteBatch([]Message{{Buf: []byte("one"), Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	expect("WaitBatchTurn with a datagram", done, result{1, true, nil})
	if turn.TryLock() {
		t.Error("WaitBatchTurn returned a datagram without the turn")
	}
	turn.Unlock()
}

// TestCloseDuringFirstWait: a Close that races the first wait of the
// socket, which registers it in the netpoller (an epoll descriptor of its
// own), closes that registration too, whichever comes first: no epoll
// descriptor outlives the socket.
func TestCloseDuringFirstWait(t *testing.T) {
	before := epollDescriptors(t)
	var closed []*Conn // kept, so that no finalizer closes a leaked descriptor
	for i := range 2000 {
		c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.ReadBatchTurn(messages(1, 2048), noTurn{}) // ends with Close
		}()
		for start := time.Now(); time.Since(start) < time.Duration(i%100)*time.Microsecond; { // Close at a different point of the wait's start each time
		}
		c.Close()
		<-done
		closed = append(closed, c)
	}
	if after := epollDescriptors(t); after > before {
		t.Errorf("%d epoll descriptors open after %d sockets closed during their first wait, %d before", after, len(closed), before)
	}
	runtime.KeepAlive(closed)
}

// epollDescriptors counts the process's open epoll descriptors.
func epollDescriptors(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:[eventpoll]" {
			n++
		}
	}
	return n
}

// TestReadsPointAtTheBuffersGiven: the reader keeps its iovecs and headers
// from one read to the next and points them again only where a read gives
// other buffers (or the same ones cut shorter), and resets what the kernel
// wrote: each read lands in the buffers it was given, whole, with its own
// sender, whatever the reads before it received or found empty.
func TestReadsPointAtTheBuffersGiven(t *testing.T) {
	rx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	senders := []*Conn{listen(t, "127.0.0.1:0", Options{DisableGSO: true}), listen(t, "127.0.0.1:0", Options{DisableGSO: true})}
	timer := time.AfterFunc(watchdog, func() { rx.Close() })
	defer timer.Stop()
	kept, fresh := messages(MaxBatch, 2048), messages(MaxBatch, 2048)
	short := make([]Message, MaxBatch) // kept's buffers, cut to 1000 bytes
	for i := range short {
		short[i].Buf = kept[i].Buf[:1000:1000]
	}
	tests := []struct {
		name      string
		sender    int
		sizes     []int // nil: nothing is sent, and the read finds nothing
		msgs      []Message
		want      []int // the sizes read, in order
		truncated uint64
	}{
		{name: "three", sender: 0, sizes: []int{100, 1500, 7}, msgs: kept, want: []int{100, 1500, 7}},
		{name: "nothing", msgs: kept},
		{name: "one from another sender", sender: 1, sizes: []int{1200}, msgs: kept, want: []int{1200}},
		{name: "other buffers", sender: 0, sizes: []int{2000, 30}, msgs: fresh, want: []int{2000, 30}},
		{name: "the first buffers cut shorter", sender: 1, sizes: []int{1500, 900}, msgs: short, want: []int{900}, truncated: 1},
		{name: "the first buffers whole again", sender: 0, sizes: []int{1500}, msgs: kept, want: []int{1500}},
		{name: "a batch of one", sender: 1, sizes: []int{64, 65}, msgs: fresh[:1], want: []int{64}},
		{name: "what it left", msgs: fresh, want: []int{65}},
	}
	for step, tt := range tests {
		before := rx.Stats().Truncated
		if tt.sizes != nil {
			if _, err := senders[tt.sender].WriteBatch(outgoing(tt.sizes, rx.LocalAddr(), step)); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
		}
		var n int
		var err error
		if tt.want == nil {
			n, err = rx.TryReadBatch(tt.msgs)
		} else {
			n, err = rx.ReadBatch(tt.msgs)
		}
		if err != nil || n != len(tt.want) {
			t.Fatalf("%s: read %d datagrams, %v; want %d", tt.name, n, err, len(tt.want))
		}
		src := step // the step that sent what is read
		if tt.sizes == nil {
			src = step - 1
		}
		from := senders[tests[src].sender].LocalAddr()
		for i, size := range tt.want {
			m := &tt.msgs[i]
			want := make([]byte, size)
			payload(want, src, slices.Index(tests[src].sizes, size))
			if !bytes.Equal(m.Buf[:m.N], want) || m.Addr != from || m.Local != rx.LocalAddr().Addr() {
				t.Fatalf("%s: datagram %d: %d bytes %x… from %v to %v; want %d bytes %x… from %v to %v",
					tt.name, i, m.N, head(m.Buf[:m.N]), m.Addr, m.Local, size, head(want), from, rx.LocalAddr().Addr())
			}
		}
		if got := rx.Stats().Truncated - before; got != tt.truncated {
			t.Fatalf("%s: %d datagrams truncated, want %d", tt.name, got, tt.truncated)
		}
	}
}

// TestReadResetsControlSpace: a read whose datagram carried one control
// message (its destination) leaves the kernel's shorter control length in
// the header; the next read into the same buffers offers the whole space
// again, so that a coalesced run, which carries its segment size too, is
// not dropped as truncated (MSG_CTRUNC).
func TestReadResetsControlSpace(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", Options{})
	rx := listen(t, "127.0.0.1:0", Options{})
	requireOffloads(t, tx, true, false)
	requireOffloads(t, rx, false, true)
	timer := time.AfterFunc(watchdog, func() { rx.Close() })
	defer timer.Stop()
	msgs := messages(MaxBatch, 64<<10)
	for _, sizes := range [][]int{{300}, {500, 500, 500}} {
		if _, err := tx.WriteBatch(outgoing(sizes, rx.LocalAddr(), 1)); err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, size := range sizes {
			total += size
		}
		n, err := rx.ReadBatch(msgs)
		if err != nil || n != 1 || msgs[0].N != total {
			t.Fatalf("%d datagrams sent: read %d messages (the first of %d bytes), %v; want one of %d", len(sizes), n, msgs[0].N, err, total)
		}
		if s := rx.Stats(); s.Truncated != 0 {
			t.Fatalf("%d datagrams sent: %d dropped as truncated", len(sizes), s.Truncated)
		}
	}
}
