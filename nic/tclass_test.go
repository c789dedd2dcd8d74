package nic_test

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/nic/udp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// classes records the traffic classes of the packets a device sends and
// receives, by direction and BTH opcode (QP1's MADs are UD SEND_ONLYs).
type classes struct {
	mu   sync.Mutex
	seen map[dirOp][]uint8
}

// dirOp is a direction and a BTH opcode.
type dirOp struct {
	dir nic.Direction
	op  wire.OpCode
}

func (k dirOp) String() string { return fmt.Sprintf("%v %v", k.dir, k.op) }

func (s *classes) config() nic.Config {
	s.seen = map[dirOp][]uint8{}
	return nic.Config{Trace: func(p *nic.TracePacket) {
		if len(p.Data) < wire.BTHSize {
			return
		}
		k := dirOp{p.Dir, wire.BTH(p.Data).OpCode()}
		s.mu.Lock()
		if !slices.Contains(s.seen[k], p.Env.TrafficClass) {
			s.seen[k] = append(s.seen[k], p.Env.TrafficClass)
		}
		s.mu.Unlock()
	}}
}

// expect fails unless the device sent and received packets of exactly
// the directions and opcodes of want (key), each with the class want
// gives, or 0 where the platform carries no class (the portable socket
// path: every datagram leaves with 0, and is traced so).
func (s *classes) expect(t *testing.T, who string, want map[dirOp]uint8) {
	t.Helper()
	// A completion may come before the trace of the packet that made it
	// (a UD SEND's before it arrives, an ACK's before its trace returns).
	for deadline := time.Now().Add(10 * time.Second); !s.saw(want) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, class := range want {
		if !carriesClass(t) {
			class = 0
		}
		if cs := s.seen[k]; len(cs) != 1 || cs[0] != class {
			t.Errorf("%s: %s with traffic classes %#x, want %#x", who, k, cs, class)
		}
	}
	for k := range s.seen {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s, which the test did not expect", who, k)
		}
	}
}

// carriesClass reports whether the platform sends each datagram's traffic
// class and reads the one it came with (udp.Features.TrafficClass).
func carriesClass(t *testing.T) bool {
	c, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Features().TrafficClass
}

// saw reports whether every key of want was seen.
func (s *classes) saw(want map[dirOp]uint8) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range want {
		if _, ok := s.seen[k]; !ok {
			return false
		}
	}
	return true
}

// TestTrafficClass: a QP's packets carry its address vector's traffic
// class (verbs.Attr.TrafficClass, ConnectOptions.TrafficClass), requests
// and responses alike, and a UD datagram its WR's; a connection dialed
// with DialOptions.TrafficClass carries it both ways, the accepting side
// taking it from the REQ's path. The receiving device's trace shows each
// packet with the class it came with. Embedded and attached alike.
func TestTrafficClass(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		write := func(t *testing.T, q *nic.QP, from *nic.MR, cq *nic.CQ, to *nic.MR) {
			t.Helper()
			wr := &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{from.SGE(0, 64)},
				RemoteAddr: to.Addr(), RKey: to.RKey()}
			if err := q.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, cq); wc.Status != verbs.Success {
				t.Fatalf("WRITE: %v", &wc)
			}
		}
		t.Run("connect", func(t *testing.T) {
			var ca, cb classes
			a, b := p.end(t, ca.config()), p.end(t, cb.config())
			if err := a.qp.Connect(b.dev.Addr(), b.qp.Num(), nic.ConnectOptions{TrafficClass: 0xb8}); err != nil {
				t.Fatal(err)
			}
			if err := b.qp.Connect(a.dev.Addr(), a.qp.Num(), nic.ConnectOptions{TrafficClass: 0x22}); err != nil {
				t.Fatal(err)
			}
			for _, e := range []struct {
				q    *nic.QP
				want uint8
			}{{a.qp, 0xb8}, {b.qp, 0x22}} {
				if got := e.q.Attr().TrafficClass; got != e.want {
					t.Errorf("QP %#x: Attr().TrafficClass %#x, want %#x", e.q.Num(), got, e.want)
				}
			}
			write(t, a.qp, a.mr, a.cq, b.mr)
			ca.expect(t, "the writer", map[dirOp]uint8{dirOp{nic.Sent, wire.OpRCWriteOnly}: 0xb8, dirOp{nic.Received, wire.OpRCAck}: 0x22})
			cb.expect(t, "the target", map[dirOp]uint8{dirOp{nic.Received, wire.OpRCWriteOnly}: 0xb8, dirOp{nic.Sent, wire.OpRCAck}: 0x22})
		})
		t.Run("UD", func(t *testing.T) {
			var c classes
			a := p.end(t, c.config())
			q, err := a.pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: a.cq})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{}); err != nil {
				t.Fatal(err)
			}
			wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
				Dest: a.dev.Addr(), DestQPN: unknownQPN, QKey: 1, TrafficClass: 0x48}
			if err := q.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
				t.Fatalf("UD SEND: %v", &wc)
			}
			c.expect(t, "the UD QP's device", map[dirOp]uint8{dirOp{nic.Sent, wire.OpUDSendOnly}: 0x48, dirOp{nic.Received, wire.OpUDSendOnly}: 0x48})
		})
		t.Run("UD receive", func(t *testing.T) {
			// Neither device traces: the receiver's socket reports the
			// class once it has a UD QP, for the GRH.
			a, b := p.end(t, nic.Config{}), p.end(t, nic.Config{})
			var ud [2]*nic.QP
			for i, e := range []*end{a, b} {
				q, err := e.pd.CreateQP(nic.QPConfig{Type: verbs.UD, SendCQ: e.cq})
				if err != nil {
					t.Fatal(err)
				}
				if err := q.Connect(netip.AddrPort{}, 0, nic.ConnectOptions{QKey: 7}); err != nil {
					t.Fatal(err)
				}
				ud[i] = q
			}
			if err := ud[1].PostRecv(&verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(0, wire.GRHSize+8)}}); err != nil {
				t.Fatal(err)
			}
			wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)},
				Dest: b.dev.Addr(), DestQPN: ud[1].Num(), QKey: 7, TrafficClass: 0x48}
			if err := ud[0].PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
				t.Fatalf("UD SEND: %v", &wc)
			}
			if wc := nictest.Wait(t, b.cq); wc.Status != verbs.Success || wc.Flags&verbs.WCGRH == 0 {
				t.Fatalf("UD receive: %v", &wc)
			}
			want := uint8(0x48)
			if !carriesClass(t) {
				want = 0
			}
			// Over IPv4 the GRH is 20 zero bytes and the IPv4 header,
			// whose second byte is the TOS.
			if got := b.mr.Bytes()[20+1]; got != want {
				t.Errorf("the receive's GRH holds traffic class %#x, want %#x", got, want)
			}
		})
		t.Run("dial", func(t *testing.T) {
			var cs, cd classes
			srv, peer := p.cmEnd(t, cs.config()), p.cmEnd(t, cd.config())
			l := srv.listen(t, 1)
			accepted := make(chan *nic.Conn, 1)
			go func() {
				c, err := l.Accept(cmContext(t))
				if err != nil {
					t.Error(err)
				}
				accepted <- c
			}()
			o := peer.dialOptions()
			o.TrafficClass = 0x60
			c, err := peer.dev.Dial(cmContext(t), srv.dev.Addr(), l.Port(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sc := <-accepted
			if sc == nil {
				t.FailNow()
			}
			defer sc.Close()
			for _, e := range []struct {
				name string
				c    *nic.Conn
			}{{"dialer", c}, {"acceptor", sc}} {
				if got := e.c.QP().Attr().TrafficClass; got != 0x60 {
					t.Errorf("the %s's QP: Attr().TrafficClass %#x, want 0x60", e.name, got)
				}
			}
			write(t, c.QP(), peer.mr, peer.cq, srv.mr)
			// The CM's MADs, UD SEND_ONLYs to QP1 both ways, go with the
			// path's class too.
			madOut, madIn := dirOp{nic.Sent, wire.OpUDSendOnly}, dirOp{nic.Received, wire.OpUDSendOnly}
			cd.expect(t, "the dialer", map[dirOp]uint8{dirOp{nic.Sent, wire.OpRCWriteOnly}: 0x60, dirOp{nic.Received, wire.OpRCAck}: 0x60,
				madOut: 0x60, madIn: 0x60})
			cs.expect(t, "the acceptor", map[dirOp]uint8{dirOp{nic.Received, wire.OpRCWriteOnly}: 0x60, dirOp{nic.Sent, wire.OpRCAck}: 0x60,
				madOut: 0x60, madIn: 0x60})
		})
	})
}
