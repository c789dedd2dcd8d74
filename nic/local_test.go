package nic_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestLocalQPIsolation repeats the attack of issue 14 on one device: a
// program that knows a victim QP's number, expected PSN, rkey and address
// points a QP of its own on the same device at it (or sends a forged
// packet from a plain UDP socket on the host) and writes into the victim's
// region. The write must not land, the victim's PSN must not move, the drop
// must be counted as wrong_source, and the victim's real peer must go on
// writing.
func TestLocalQPIsolation(t *testing.T) {
	devices := []struct {
		name string
		// open returns the device and a function that makes an end on
		// it: in the test's process, or in a process attached to it.
		open func(t *testing.T) (*nic.Device, func() *end)
	}{
		{"embedded", func(t *testing.T) (*nic.Device, func() *end) {
			dev := nictest.OpenDevice(t, nic.Config{})
			return dev, func() *end { return endOn(t, dev) }
		}},
		{"attached", func(t *testing.T) (*nic.Device, func() *end) {
			d := startDaemon(t, nic.Config{})
			return d.dev, func() *end { return attachedEnd(t, d) }
		}},
	}
	attacks := []struct {
		name string
		// local: the victim is connected to another QP of the device,
		// not to a QP of another device.
		local bool
		// forge: the attacker sends from a UDP socket of its own rather
		// than through a QP of the device.
		forge bool
	}{
		{"a QP of the device at a QP connected to another device", false, false},
		{"a QP of the device at a QP connected to one of the device", true, false},
		{"a UDP socket of the host at a QP connected to one of the device", true, true},
	}
	for _, dv := range devices {
		for _, tc := range attacks {
			t.Run(dv.name+"/"+tc.name, func(t *testing.T) {
				nictest.CheckLeaks(t)
				dev, newEnd := dv.open(t)
				victim := newEnd()
				peer := newEnd()
				if !tc.local {
					peer = openEnd(t, nic.Config{})
				}
				connectEnds(t, victim, peer)
				before := counter(t, dev, "wrong_source")
				want := bytes.Repeat([]byte{0x11}, 8)
				copy(victim.mr.Bytes(), want)
				epsn := victim.qp.Status().ExpectedPSN

				if tc.forge {
					forgeWrite(t, dev.Addr(), victim, epsn)
				} else {
					attacker := newEnd()
					opts := nic.ConnectOptions{LocalPSN: epsn, RemotePSN: 1, Timeout: 6, RetryCnt: 1}
					if err := attacker.qp.Connect(dev.Addr(), victim.qp.Num(), opts); err != nil {
						t.Fatal(err)
					}
					copy(attacker.mr.Bytes(), "attacker")
					post(t, attacker, verbs.WRWrite, attacker.mr.SGE(0, 8), victim.mr)
					if wc := nictest.Wait(t, attacker.cq); wc.Status != verbs.RetryExcErr {
						t.Errorf("the attacker's WRITE completed with %s, want RETRY_EXC_ERR (never delivered)", wc.Status)
					}
				}
				waitCounter(t, dev, "wrong_source", before+1)
				syncMemory(victim)
				if got := victim.mr.Bytes()[:8]; !bytes.Equal(got, want) {
					t.Fatalf("the victim's region holds %q: the forged WRITE landed", got)
				}
				if got := victim.qp.Status().ExpectedPSN; got != epsn {
					t.Errorf("the victim's expected PSN moved from %v to %v", epsn, got)
				}

				// The victim's real peer still writes, at the PSN it expects.
				copy(peer.mr.Bytes(), "the peer")
				post(t, peer, verbs.WRWrite, peer.mr.SGE(0, 8), victim.mr)
				if wc := nictest.Wait(t, peer.cq); wc.Status != verbs.Success {
					t.Fatalf("the peer's WRITE completed with %s", wc.Status)
				}
				syncMemory(victim)
				if got := victim.mr.Bytes()[:8]; string(got) != "the peer" {
					t.Errorf("the victim's region holds %q after its peer's WRITE", got)
				}
			})
		}
	}
}

// post posts a signaled RDMA op from e of the bytes sge into the start of
// region to.
func post(t testing.TB, e *end, op verbs.WROpcode, sge verbs.SGE, to *nic.MR) {
	t.Helper()
	wr := &verbs.SendWR{ID: 1, Opcode: op, Flags: verbs.Signaled, SGL: []verbs.SGE{sge}, RemoteAddr: to.Addr(), RKey: to.RKey()}
	if err := e.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

// forgeWrite sends, from a UDP socket of its own on the device's IP, a
// sealed RDMA WRITE ONLY for the victim's QP at PSN psn.
func forgeWrite(t testing.TB, dev netip.AddrPort, victim *end, psn wire.PSN) {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dev.Addr(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := wire.Fields{
		BTH:  wire.BTHFields{OpCode: wire.OpRCWriteOnly, PKey: 0xFFFF, DestQP: victim.qp.Num(), PSN: psn, AckReq: true},
		RETH: wire.RETHFields{VA: victim.mr.Addr(), RKey: victim.mr.RKey(), DMALen: 8},
	}
	buf := make([]byte, 128)
	n, err := f.Encode(buf, []byte("attacker"))
	if err != nil {
		t.Fatal(err)
	}
	env := wire.Envelope{Src: c.LocalAddr().(*net.UDPAddr).AddrPort(), Dst: dev}
	env.Seal(buf[:n])
	if _, err := c.WriteToUDPAddrPort(buf[:n], dev); err != nil {
		t.Fatal(err)
	}
}

// waitCounter waits (up to 5 s) for a counter of dev to reach at least n.
func waitCounter(t testing.TB, dev *nic.Device, name string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for counter(t, dev, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %d, want at least %d", name, counter(t, dev, name), n)
		}
		time.Sleep(time.Millisecond)
	}
}
