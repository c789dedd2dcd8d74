package qp_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// udReady brings a UD QP of h to RTS with Q_Key qkey.
func udReady(t *testing.T, h *host, qkey uint32) {
	t.Helper()
	for _, st := range []struct {
		a verbs.Attr
		m verbs.AttrMask
	}{
		{verbs.Attr{State: verbs.Init, QKey: qkey}, verbs.AttrState | verbs.AttrQKey},
		{verbs.Attr{State: verbs.RTR}, verbs.AttrState},
		{verbs.Attr{State: verbs.RTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := h.qp.Modify(&st.a, st.m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUDMulticast: what a QP does for multicast, the groups being the
// device's (it hands a packet for the multicast QPN to each QP attached to
// the group). A send whose destination is a group and whose DestQPN is
// the multicast QPN leaves for the group's address with that QPN in its
// BTH; each QP the packet is handed to takes a receive WR of its own, its
// GRH naming the group as the destination, but for a QP of another Q_Key,
// which counts it.
func TestUDMulticast(t *testing.T) {
	a := newHost(t, "a", "10.0.0.1", verbs.UD, 0x11, qp.Config{})
	udReady(t, a, udQKey)
	b := newHost(t, "b", "10.0.0.2", verbs.UD, 0x22, qp.Config{})
	udReady(t, b, udQKey)
	b2 := b.sibling(t, "b2", verbs.UD, 0x23, qp.Config{})
	udReady(t, b2, udQKey)
	other := b.sibling(t, "other", verbs.UD, 0x24, qp.Config{})
	udReady(t, other, 0x22222222)

	group := netip.MustParseAddrPort("239.1.1.1:4791")
	const n = 100
	fill(a.buf[:n], 7)
	for i, h := range []*host{b, b2, other} {
		postRecv(t, h, &verbs.RecvWR{ID: uint64(i), SGL: sgl(h.sge(uint64(4096*(i+1)), wire.GRHSize+n))})
	}
	post(t, a, &verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, n)),
		Dest: group, DestQPN: wire.MulticastQPN, QKey: udQKey})
	buf := make([]byte, qp.MaxPacketSize)
	size, route := a.qp.Transmit(buf, 0)
	dst := route.Dst
	if size == 0 || dst != group {
		t.Fatalf("sent %d bytes to %v, want a packet to %v", size, dst, group)
	}
	data := buf[:size]
	env := wire.Envelope{Src: a.addr, Dst: dst}
	env.Seal(data)
	var pkt wire.Packet
	if err := pkt.Decode(data); err != nil {
		t.Fatal(err)
	}
	if q, src, key := pkt.BTH.DestQP(), pkt.DETH.SrcQP(), pkt.DETH.QKey(); q != wire.MulticastQPN || src != a.qp.Num() || key != udQKey {
		t.Fatalf("BTH DestQP %#x, DETH SrcQP %#x, Q_Key %#x; want %#x, %#x, %#x", q, src, key, wire.MulticastQPN, a.qp.Num(), udQKey)
	}
	if wcs := a.poll(); len(wcs) != 1 || wcs[0].Status != verbs.Success {
		t.Fatalf("send completions %v, want one SUCCESS", wcs)
	}
	for _, h := range []*host{b, b2, other} {
		h.qp.Receive(&pkt, &env, 0)
	}
	wcs := b.poll() // b, b2 and other share a CQ
	slices.SortFunc(wcs, func(x, y verbs.WC) int { return int(x.QPN) - int(y.QPN) })
	if len(wcs) != 2 {
		t.Fatalf("%d receive completions, want 2 (b and b2): %v", len(wcs), wcs)
	}
	for i, h := range []*host{b, b2} {
		expectWC(t, wcs[i], verbs.WC{ID: uint64(i), Status: verbs.Success, Opcode: verbs.WCRecv, Flags: verbs.WCGRH,
			ByteLen: wire.GRHSize + n, QPN: h.qp.Num(), SrcQPN: a.qp.Num(), Src: a.addr})
		off := 4096 * (i + 1)
		checkGRH(t, h.buf[off:off+wire.GRHSize], a.addr.Addr(), group.Addr(), size)
		if !slices.Equal(h.buf[off+wire.GRHSize:off+wire.GRHSize+n], a.buf[:n]) {
			t.Errorf("%s: the data differs from what was sent", h.name)
		}
	}
	if got := other.counter(verbs.BadQKey); got != 1 {
		t.Errorf("the QP of another Q_Key counted %d bad Q_Keys, want 1", got)
	}
}
