//go:build linux && !softnic_portable

package udp

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// With Options.IPIDs (and CAP_NET_RAW), IPIDOf tells each received datagram
// the identification a capture of the loopback device shows it with: a
// sender without DF gets non-zero ones from Linux, as rxe's datagrams have.
// A datagram with identification 0 (softnic's) is not recorded.
func TestIPIDOf(t *testing.T) {
	cpt := openCapture(t)
	c, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{IPIDs: true, DisableGRO: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Features().IPIDs {
		t.Skip("no raw socket for the identifications (CAP_NET_RAW needed)")
	}
	cpt.only(t, c.LocalAddr().Port())
	s, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc, _ := s.SyscallConn()
	rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var sent []byte
	for i := range n {
		p := fmt.Appendf(nil, "datagram %02d with a tail", i)
		sent = append(sent, p...)
		if _, err := s.WriteToUDPAddrPort(p, c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	pkts := cpt.udpTo(t, c.LocalAddr().Port(), len(sent))
	want := map[string]uint16{}
	for _, p := range pkts {
		want[string(p.payload)] = p.id
	}
	msgs := make([]Message, MaxBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 2048)
	}
	got := 0
	for got < n {
		k, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs[:k] {
			d := m.Buf[:m.N]
			id, known, ok := c.IPIDOf(m.Addr, d, func(uint16) bool { return true })
			if !known || !ok || id == 0 || id != want[string(d)] {
				t.Errorf("%q: IPIDOf = %d, %v, %v; the capture shows %d", d, id, known, ok, want[string(d)])
			}
			got++
		}
	}

	// Identification 0: a Conn's own send (DF, unconnected).
	o, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	p := []byte("from a softnic peer")
	if _, err := o.WriteBatch([]Message{{Buf: p, Addr: c.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	k, err := c.ReadBatch(msgs)
	if err != nil || k != 1 || !bytes.Equal(msgs[0].Buf[:msgs[0].N], p) {
		t.Fatalf("read %d, %v", k, err)
	}
	if _, known, _ := c.IPIDOf(msgs[0].Addr, p, func(uint16) bool { return true }); known {
		t.Error("a datagram with identification 0 was recorded")
	}
}
