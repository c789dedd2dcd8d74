package nic_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// cmPacket is one CM MAD as it crossed the wire: the UD headers, the MAD
// and the datagram's addresses.
type cmPacket struct {
	env wire.Envelope
	ud  wire.Fields
	mad mad.MADFields
}

func decodeCMPacket(t *testing.T, env wire.Envelope, b []byte) (cmPacket, bool) {
	t.Helper()
	var p wire.Packet
	if err := p.Decode(b); err != nil {
		t.Fatalf("undecodable packet: %v", err)
	}
	if p.BTH.DestQP() != wire.GSIQPN {
		return cmPacket{}, false
	}
	var m mad.MAD
	if err := m.Decode(p.Payload); err != nil {
		t.Fatalf("undecodable MAD: %v", err)
	}
	c := cmPacket{env: env}
	p.Fields(&c.ud)
	m.Fields(&c.mad)
	return c, true
}

// firstHandshake returns the first REQ, REP and RTU of packets.
func firstHandshake(t *testing.T, packets []cmPacket) []cmPacket {
	t.Helper()
	var out []cmPacket
	for _, attr := range []mad.AttrID{mad.AttrConnectRequest, mad.AttrConnectReply, mad.AttrReadyToUse} {
		i := slices.IndexFunc(packets, func(c cmPacket) bool { return c.mad.Header.AttrID == attr })
		if i < 0 {
			t.Fatalf("no %v", attr)
		}
		out = append(out, packets[i])
	}
	return out
}

// readGoldenHandshake returns the first handshake of rping.pcap of
// ../shared/golden: rping between two Linux rdma_rxe guests over rdma_cm
// (see the README there).
func readGoldenHandshake(t *testing.T) []cmPacket {
	var packets []cmPacket
	for _, fr := range golden.Frames(t, golden.Path(t, "rping.pcap")) {
		if c, ok := decodeCMPacket(t, fr.Env, fr.Payload); ok {
			packets = append(packets, c)
		}
	}
	return firstHandshake(t, packets)
}

// softnicHandshake connects two devices with the default options and
// returns the CM MADs they sent.
func softnicHandshake(t *testing.T) []cmPacket {
	var mu sync.Mutex
	var packets []cmPacket
	trace := func(p *nic.TracePacket) {
		if p.Dir != nic.Sent {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if c, ok := decodeCMPacket(t, p.Env, slices.Clone(p.Data)); ok {
			packets = append(packets, c)
		}
	}
	a, b := openCMEnd(t, nic.Config{Trace: trace}), openCMEnd(t, nic.Config{Trace: trace})
	opts := a.dialOptions()
	opts.CMTimeout, opts.CMRetries = 0, 0 // rdma_cm's defaults
	connectCM(t, a, b, b.listen(t, 0), opts, nic.AcceptOptions{})
	mu.Lock()
	defer mu.Unlock()
	return firstHandshake(t, packets)
}

// TestCMLayoutLikeLinux compares softnic's REQ, REP and RTU with the
// ones Linux's rdma_cm sent in rping.pcap, field by field. The values
// that belong to one connection (communication IDs, QPNs, PSNs, GUIDs,
// addresses, ports and the application's choices: private data, responder
// resources and initiator depth, path MTU, ACK timeout) are first checked
// for how they are made (the transaction ID and flow label formulas,
// IPv4-mapped GIDs, rdma_cm's header) and then cleared; everything left
// (header, timeouts, retry counts, LIDs, hop limit, P_Key, transport
// type, reserved bits, the UD headers) must be identical.
func TestCMLayoutLikeLinux(t *testing.T) {
	golden := readGoldenHandshake(t)
	ours := softnicHandshake(t)
	for i, name := range []string{"ConnectRequest", "ConnectReply", "ReadyToUse"} {
		t.Run(name, func(t *testing.T) {
			g, o := golden[i], ours[i]
			normalizeCM(t, "Linux", &g, golden)
			normalizeCM(t, "softnic", &o, ours)
			for _, d := range append(fieldDiffs("UD", reflect.ValueOf(g.ud), reflect.ValueOf(o.ud)),
				fieldDiffs("MAD", reflect.ValueOf(g.mad), reflect.ValueOf(o.mad))...) {
				t.Error(d)
			}
		})
	}
}

// fieldDiffs lists the fields in which a and b, values of one struct
// type, differ, by path: "MAD.REQ.PrimaryPath.HopLimit: Linux 64, softnic 63".
func fieldDiffs(path string, a, b reflect.Value) []string {
	if a.Kind() == reflect.Struct {
		var out []string
		for i := range a.NumField() {
			out = append(out, fieldDiffs(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))...)
		}
		return out
	}
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return nil
	}
	return []string{fmt.Sprintf("%s: Linux %v, softnic %v", path, a.Interface(), b.Interface())}
}

// normalizeCM checks the connection-specific values of c (one of the
// handshake hs) and clears them.
func normalizeCM(t *testing.T, who string, c *cmPacket, hs []cmPacket) {
	t.Helper()
	req, rep := &hs[0].mad.REQ, &hs[1].mad.REP
	h := &c.mad.Header
	// The transaction ID: an agent number above, the requester's
	// communication ID as it lies in a little-endian machine's memory below.
	if hi, lo := uint32(h.TransactionID>>32), uint32(h.TransactionID); hi == 0 || hi > 0xFF || lo != bits.ReverseBytes32(req.LocalCommID) {
		t.Errorf("%s: transaction ID %#x is not made from REQ communication ID %#x", who, h.TransactionID, req.LocalCommID)
	}
	h.TransactionID = 0
	c.ud.BTH.PSN = 0
	switch {
	case c.mad.Header.AttrID == mad.AttrConnectRequest:
		r := &c.mad.REQ
		cma, err := mad.DecodeCMAHeader(r.PrivateData[:])
		if err != nil {
			t.Fatalf("%s: rdma_cm header: %v", who, err)
		}
		ps, port, ok := r.ServiceID.RDMACM()
		src, dst := c.env.Src.Addr(), c.env.Dst.Addr()
		p := &r.PrimaryPath
		switch {
		case !ok || ps != mad.PortSpaceTCP:
			t.Errorf("%s: service ID %v is not rdma_cm's TCP port space", who, r.ServiceID)
		case cma.IPVersion() != 4 || cma.Src().Addr() != src || cma.Dst() != dst:
			t.Errorf("%s: rdma_cm header %+v for %v → %v", who, cma.Fields(), src, dst)
		case p.LocalGID != wire.GIDFromAddr(src) || p.RemoteGID != wire.GIDFromAddr(dst) || !netip.Addr(netip.AddrFrom16(p.LocalGID)).Is4In6():
			t.Errorf("%s: GIDs %v, %v are not the IPv4-mapped %v, %v", who, p.LocalGID, p.RemoteGID, src, dst)
		case p.FlowLabel != (uint32(cma.SrcPort())*31+uint32(port))&(1<<20-1):
			t.Errorf("%s: flow label %#x is not rdma_cm's for ports %d and %d", who, p.FlowLabel, cma.SrcPort(), port)
		case r.LocalCommID == 0 || r.LocalCAGUID == 0 || r.LocalQPN == 0:
			t.Errorf("%s: REQ without communication ID, GUID or QPN", who)
		}
		r.LocalCommID, r.LocalCAGUID, r.LocalQPN, r.StartingPSN, r.ServiceID = 0, 0, 0, 0, 0
		r.ResponderResources, r.InitiatorDepth, r.PathMTU = 0, 0, 0
		p.LocalGID, p.RemoteGID, p.FlowLabel, p.LocalACKTimeout = wire.GID{}, wire.GID{}, 0, 0
		r.PrivateData = [mad.REQPrivateDataSize]byte{}
	case c.mad.Header.AttrID == mad.AttrConnectReply:
		r := &c.mad.REP
		if r.RemoteCommID != req.LocalCommID || r.LocalCommID == 0 || r.LocalCAGUID == 0 || r.LocalQPN == 0 {
			t.Errorf("%s: REP %+v does not answer REQ %#x", who, r, req.LocalCommID)
		}
		r.LocalCommID, r.RemoteCommID, r.LocalQPN, r.StartingPSN, r.LocalCAGUID = 0, 0, 0, 0, 0
		r.ResponderResources, r.InitiatorDepth = 0, 0
		r.PrivateData = [mad.REPPrivateDataSize]byte{}
	default:
		r := &c.mad.RTU
		if r.LocalCommID != req.LocalCommID || r.RemoteCommID != rep.LocalCommID {
			t.Errorf("%s: RTU %#x→%#x, want %#x→%#x", who, r.LocalCommID, r.RemoteCommID, req.LocalCommID, rep.LocalCommID)
		}
		r.LocalCommID, r.RemoteCommID = 0, 0
	}
}

// TestCMGoldenREQReachesListener replays rping.pcap's REQ: a Linux
// rdma_cm request reaches a softnic listener on rping's port, and the
// answer goes back in the REQ's transaction to where the requester
// receives: port 4791 for Linux (whose QP1 sends from port 55410), the
// source port for a requester whose CA GUID says it is a softnic device.
func TestCMGoldenREQReachesListener(t *testing.T) {
	golden := readGoldenHandshake(t)
	for _, tc := range []struct {
		name   string
		guid   uint64 // replaces the REQ's CA GUID if not 0
		at4791 bool   // the answer goes to port 4791
	}{
		{name: "Linux GUID", at4791: true},
		{name: "softnic GUID", guid: 0x02736e0000000001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nictest.CheckLeaks(t)
			b := openCMEnd(t, nic.Config{})
			l, err := b.dev.Listen(7174, nic.ListenOptions{PD: b.pd, QP: nic.QPConfig{SendCQ: b.cq}})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			sock := openRawPeer(t, "127.0.0.1:0")
			answers := sock
			if tc.at4791 {
				answers = openRawPeer(t, "127.0.0.1:4791")
			}
			req := golden[0]
			if tc.guid != 0 {
				req.mad.REQ.LocalCAGUID = tc.guid
			}
			sock.sendMAD(t, b.dev.Addr(), &req.ud, &req.mad)
			ctx, cancel := context.WithTimeout(context.Background(), cmTestTimeout)
			defer cancel()
			r, err := l.AcceptRequest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.RemoteAddr() != answers.addr || len(r.PrivateData()) != mad.CMAPrivateDataSize {
				t.Errorf("request from %v with %d bytes of private data, want from %v", r.RemoteAddr(), len(r.PrivateData()), answers.addr)
			}
			if err := r.Reject(nil); err != nil {
				t.Fatal(err)
			}
			rej := answers.receiveMAD(t)
			if rej.Header.AttrID != mad.AttrConnectReject || rej.REJ.RemoteCommID != req.mad.REQ.LocalCommID ||
				rej.REJ.Reason != mad.RejectConsumer || rej.Header.TransactionID != req.mad.Header.TransactionID {
				t.Errorf("answer %+v", rej)
			}
		})
	}
}

const cmTestTimeout = 10 * time.Second

// rawPeer is a UDP socket that speaks to a device's QP1 by hand, standing
// in for another host's CM.
type rawPeer struct {
	conn *net.UDPConn
	addr netip.AddrPort
}

// openRawPeer opens the socket on addr; the test is skipped if the port is
// taken (4791 may be, by a softnic daemon).
func openRawPeer(t *testing.T, addr string) *rawPeer {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skipf("%s is taken: %v", addr, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawPeer{conn: c, addr: c.LocalAddr().(*net.UDPAddr).AddrPort()}
}

// sendMAD sends m in a UD packet with headers ud to the QP1 at dst.
func (p *rawPeer) sendMAD(t *testing.T, dst netip.AddrPort, ud *wire.Fields, m *mad.MADFields) {
	t.Helper()
	buf := make([]byte, ud.Len(mad.MADSize))
	off, err := ud.EncodeHeaders(buf, mad.MADSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Encode(buf[off:]); err != nil {
		t.Fatal(err)
	}
	env := wire.Envelope{Src: p.addr, Dst: dst}
	env.Seal(buf)
	if _, err := p.conn.WriteToUDPAddrPort(buf, dst); err != nil {
		t.Fatal(err)
	}
}

// receiveMAD returns the next MAD sent to the socket, after checking its
// ICRC and UD headers.
func (p *rawPeer) receiveMAD(t *testing.T) mad.MADFields {
	t.Helper()
	buf := make([]byte, 2048)
	p.conn.SetReadDeadline(time.Now().Add(cmTestTimeout))
	n, from, err := p.conn.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	env := wire.Envelope{Src: from, Dst: p.addr}
	if err := env.Check(buf[:n]); err != nil {
		t.Fatalf("ICRC: %v", err)
	}
	c, ok := decodeCMPacket(t, env, buf[:n])
	if !ok || c.ud.BTH.OpCode != wire.OpUDSendOnly || c.ud.DETH.SrcQP != wire.GSIQPN || c.ud.DETH.QKey != wire.GSIQKey {
		t.Fatalf("not a MAD from QP1: %+v", c.ud)
	}
	return c.mad
}
