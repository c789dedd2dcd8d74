//go:build linux && !softnic_portable

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// capture is a raw AF_PACKET socket on the loopback interface that sees every
// IPv4 packet as the kernel puts it on the device, IP header first.
type capture struct {
	fd  int
	buf []byte
}

// openCapture opens the capture, or skips the test where it cannot (not
// root, no CAP_NET_RAW, no AF_PACKET).
func openCapture(t *testing.T) *capture {
	t.Helper()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	proto := int(htons(unix.ETH_P_IP))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Skipf("cannot open an AF_PACKET socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo.Index}); err != nil {
		t.Skipf("cannot bind the capture to lo: %v", err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &capture{fd: fd, buf: make([]byte, 1<<17)}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ipv4Packet is what the test reads of one captured IPv4 header.
type ipv4Packet struct {
	id       uint16
	df, mf   bool
	fragOff  uint16
	payload  []byte // the UDP payload
	outgoing bool   // captured on transmit rather than on receive
}

// only makes the kernel keep just the IPv4 UDP datagrams to port (a
// classic BPF filter; other tests of the same run crowd loopback and would
// overflow the capture's buffer) and drops what was queued before.
func (c *capture) only(t *testing.T, port uint16) {
	t.Helper()
	// The packet starts at the IPv4 header (SOCK_DGRAM on ETH_P_IP).
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 9},                               // protocol
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 4, K: unix.IPPROTO_UDP}, // not UDP: drop
		{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 0},                              // X = header length
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 2},                               // destination port
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(port)},
		{Code: unix.BPF_RET | unix.BPF_K, K: 1 << 18}, // keep
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},       // drop
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.SetsockoptSockFprog(c.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		t.Fatalf("attaching the capture filter: %v", err)
	}
	for {
		if _, _, err := unix.Recvfrom(c.fd, c.buf, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// udpTo returns the IPv4 UDP packets to port the capture sees until their
// payloads add up to want bytes in one direction, or fails after watchdog.
func (c *capture) udpTo(t *testing.T, port uint16, want int) []ipv4Packet {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	var pkts []ipv4Packet
	bytesIn := map[bool]int{}
	for bytesIn[true] < want && bytesIn[false] < want {
		if time.Now().After(deadline) {
			t.Fatalf("captured %d packets (%v payload bytes out/in) to port %d, want %d bytes", len(pkts), bytesIn, port, want)
		}
		n, from, err := unix.Recvfrom(c.fd, c.buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b := c.buf[:n]
		if len(b) < 20 || b[0]>>4 != 4 || b[9] != unix.IPPROTO_UDP {
			continue
		}
		ihl := int(b[0]&0x0f) * 4
		if len(b) < ihl+8 || binary.BigEndian.Uint16(b[ihl+2:]) != port {
			continue
		}
		flags := binary.BigEndian.Uint16(b[6:])
		ll, _ := from.(*unix.SockaddrLinklayer)
		p := ipv4Packet{
			id:       binary.BigEndian.Uint16(b[4:]),
			df:       flags&0x4000 != 0,
			mf:       flags&0x2000 != 0,
			fragOff:  flags & 0x1fff,
			payload:  bytes.Clone(b[ihl+8:]),
			outgoing: ll != nil && ll.Pkttype == unix.PACKET_OUTGOING,
		}
		pkts = append(pkts, p)
		bytesIn[p.outgoing] += len(p.payload)
	}
	return pkts
}

// TestWireIPv4IDZeroAndDF captures what a Conn puts on the loopback device:
// every IPv4 datagram must carry ID 0 and DF, the IP header the ICRC of a
// RoCEv2 packet is computed over. A GSO send shows on lo as one packet (the
// device takes it unsegmented); it must carry the same header.
func TestWireIPv4IDZeroAndDF(t *testing.T) {
	cpt := openCapture(t)
	tests := []struct {
		name  string
		gso   bool
		sizes []int
	}{
		{name: "single datagram", sizes: []int{100}},
		{name: "batch without gso", sizes: repeat(4, 1000)},
		{name: "gso run", gso: true, sizes: repeat(8, 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", Options{DisableGSO: !tt.gso})
			rx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
			requireOffloads(t, tx, tt.gso, false)
			cpt.only(t, rx.LocalAddr().Port())
			msgs := outgoing(tt.sizes, rx.LocalAddr(), 3)
			var want []byte
			for _, m := range msgs {
				want = append(want, m.Buf...)
			}
			if _, err := tx.WriteBatch(msgs); err != nil {
				t.Fatal(err)
			}
			pkts := cpt.udpTo(t, rx.LocalAddr().Port(), len(want))
			dir := map[bool][]byte{}
			for i, p := range pkts {
				if p.id != 0 || !p.df || p.mf || p.fragOff != 0 {
					t.Errorf("packet %d: IP ID %d, DF %v, MF %v, offset %d; want ID 0, DF, not fragmented", i, p.id, p.df, p.mf, p.fragOff)
				}
				dir[p.outgoing] = append(dir[p.outgoing], p.payload...)
			}
			if !bytes.Equal(dir[true], want) && !bytes.Equal(dir[false], want) {
				t.Errorf("captured payloads (%d bytes out, %d in) differ from the %d bytes sent", len(dir[true]), len(dir[false]), len(want))
			}
			t.Logf("%d packets captured for %d datagrams", len(pkts), len(msgs))
		})
	}
}

// TestWireGSOSegmentIPIDs records what a GSO run looks like on a device that
// does not segment UDP itself (a veth, a tap, most virtual NICs): the kernel
// segments it in software and gives the i-th datagram IPv4 ID i, counting up
// from the ID 0 of the run (inet_gso_segment). So a datagram sent in a run
// has ID 0 on the wire only if it is the first of its run, and the ICRC of
// the others must be computed with their index. The test runs in a private
// network namespace whose loopback takes at most 2 segments per GSO packet,
// which makes the kernel segment longer runs before the device; it skips
// without root or iproute2's ip.
func TestWireGSOSegmentIPIDs(t *testing.T) {
	privateLoopback(t, "gso_max_segs", "2")
	cpt := openCapture(t)
	tx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	rx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	requireOffloads(t, tx, true, false)
	cpt.only(t, rx.LocalAddr().Port())
	const perRun = 8
	// The second run is longer, so it cannot join the first as its short tail.
	msgs := outgoing(append(repeat(perRun, 1000), repeat(perRun, 1100)...), rx.LocalAddr(), 4)
	if _, err := tx.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	pkts := cpt.udpTo(t, rx.LocalAddr().Port(), perRun*(1000+1100))
	if len(pkts) != len(msgs) {
		t.Fatalf("captured %d packets for %d datagrams: the runs were not segmented before the device", len(pkts), len(msgs))
	}
	for i, p := range pkts {
		if want := uint16(i % perRun); p.id != want || !p.df {
			t.Errorf("datagram %d (index %d of its run): IP ID %d, DF %v; want ID %d, DF", i, i%perRun, p.id, p.df, want)
		}
		if !bytes.Equal(p.payload, msgs[i].Buf) {
			t.Errorf("datagram %d: payload differs", i)
		}
	}
}

// TestGSORefusedByKernel makes the kernel refuse a GSO send for real: in a
// private namespace whose loopback MTU is 1500, 2000-byte segments exceed the
// path MTU. The Conn tries each datagram alone, which DF makes fail with
// EMSGSIZE too, and returns that error: the datagrams are too large for the
// route, which says nothing against segmentation, so GSO stays on, and a
// run that fits still goes out coalesced.
func TestGSORefusedByKernel(t *testing.T) {
	privateLoopback(t, "mtu", "1500")
	tx := listen(t, "127.0.0.1:0", Options{DisableGRO: true})
	rx := listen(t, "127.0.0.1:0", Options{DisableGSO: true, DisableGRO: true})
	requireOffloads(t, tx, true, false)

	fits := outgoing(repeat(4, 1400), rx.LocalAddr(), 1)
	if n, err := tx.WriteBatch(fits); n != len(fits) || err != nil {
		t.Fatalf("WriteBatch of 1400-byte datagrams = %d, %v, want %d, nil", n, err, len(fits))
	}
	if s := tx.Stats(); s.GSOFallbacks != 0 || !tx.Features().GSO {
		t.Fatalf("after datagrams within the MTU: %+v, %v; want GSO still on", s, tx.Features())
	}
	tooBig := outgoing(repeat(4, 2000), rx.LocalAddr(), 2)
	n, err := tx.WriteBatch(tooBig)
	if n != 0 || !errors.Is(err, unix.EMSGSIZE) {
		t.Fatalf("WriteBatch of 2000-byte datagrams = %d, %v, want 0, EMSGSIZE", n, err)
	}
	if s := tx.Stats(); s.GSOFallbacks != 0 || !tx.Features().GSO {
		t.Fatalf("after the refusal: %+v, %v; want GSO still on, no fallback", s, tx.Features())
	}
	again := outgoing(repeat(4, 1400), rx.LocalAddr(), 3)
	if n, err := tx.WriteBatch(again); n != len(again) || err != nil {
		t.Fatalf("WriteBatch of 1400-byte datagrams after the refusal = %d, %v, want %d, nil", n, err, len(again))
	}
	if s := tx.Stats(); s.GSOFallbacks != 0 || !tx.Features().GSO {
		t.Fatalf("after a run that fits: %+v, %v; want GSO on", s, tx.Features())
	}
	got := readDatagrams(t, rx, len(fits)+len(again), 2048)
	for i, r := range got {
		if want := append(fits, again...)[i].Buf; !bytes.Equal(r.data, want) {
			t.Fatalf("datagram %d differs", i)
		}
	}
}

// privateLoopback moves the calling test into a network namespace of its own
// whose loopback is up and configured with `ip link set dev lo` and args. It
// skips without root or iproute2's ip. The namespace belongs to the test's
// thread, and so do the sockets and the ip child created from it; the thread
// is never unlocked, so it exits with the test's goroutine and takes the
// namespace along.
func privateLoopback(t *testing.T, args ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("needs iproute2's ip")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	args = append([]string{"link", "set", "dev", "lo", "up"}, args...)
	if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
		t.Skipf("ip %v: %v: %s", args, err, out)
	}
}
