package live

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

var (
	hostA = netip.MustParseAddrPort("10.0.0.1:4791")
	hostB = netip.MustParseAddrPort("10.0.0.2:4791")
)

// writeOnly is an RC RDMA WRITE Only packet of n payload bytes to QP 0x11,
// PSN psn, sealed for a → b.
func writeOnly(t *testing.T, psn uint32, n int) []byte {
	t.Helper()
	f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCWriteOnly, DestQP: 0x11, PSN: wire.PSN(psn), PKey: 0xFFFF},
		RETH: wire.RETHFields{VA: 0x1000, RKey: 0x22, DMALen: uint32(n)}}
	b := make([]byte, 4096+64)
	l, err := f.Encode(b, make([]byte, n))
	if err != nil {
		t.Fatal(err)
	}
	env := wire.Envelope{Src: hostA, Dst: hostB}
	env.Seal(b[:l])
	return b[:l]
}

func TestFeed(t *testing.T) {
	f := NewFeed()
	big := writeOnly(t, 1, 2000)
	f.Trace(&nic.TracePacket{Time: time.Unix(1, 0), Dir: nic.Sent, Env: wire.Envelope{Src: hostA, Dst: hostB}, Data: big})
	f.Trace(&nic.TracePacket{Time: time.Unix(2, 0), Dir: nic.Sent, Env: wire.Envelope{Src: hostA, Dst: hostB}, Data: writeOnly(t, 2, 8),
		Note: nic.NoteFaultDropped})
	f.Trace(&nic.TracePacket{Time: time.Unix(2, 0), Dir: nic.Sent, Env: wire.Envelope{Src: hostA, Dst: hostB}, Data: writeOnly(t, 2, 8),
		Note: nic.NoteFaultDelayed})
	// A packet a device sent to itself, traced again as received: once.
	f.Trace(&nic.TracePacket{Time: time.Unix(3, 0), Dir: nic.Received, Env: wire.Envelope{Src: hostA, Dst: hostA}, Data: writeOnly(t, 3, 8)})
	f.Trace(&nic.TracePacket{Time: time.Unix(4, 0), Dir: nic.Received, Env: wire.Envelope{Src: hostB, Dst: hostA}, Data: writeOnly(t, 4, 8),
		Note: "dropped: bad ICRC"})
	var got []ladder.Packet
	gaps := uint64(0)
	f.Take(func(n uint64) { gaps += n }, func(p *ladder.Packet) {
		c := *p
		c.Data = append([]byte(nil), p.Data...)
		got = append(got, c)
	})
	if gaps != 0 || len(got) != 3 {
		t.Fatalf("took %d packets after gaps of %d, want 3 and none", len(got), gaps)
	}
	// The long packet keeps its headers and length; its payload past
	// feedBytes reads as zeros.
	var p wire.Packet
	if err := p.Decode(got[0].Data); err != nil || len(got[0].Data) != len(big) || p.BTH.PSN() != 1 || p.RETH.DMALen() != 2000 {
		t.Errorf("the long packet came back as %d bytes (%v), PSN %v", len(got[0].Data), err, p.BTH.PSN())
	}
	if !got[1].Lost || got[1].ICRC != wire.ICRCOK || got[2].Lost || got[2].ICRC != wire.ICRCBad || got[2].Note != "dropped: bad ICRC" {
		t.Errorf("lost and bad ICRC: %+v, %+v", got[1], got[2])
	}

	// More than FeedSize before a Take: the oldest are overwritten, and
	// the Take says so before the rest.
	for i := range FeedSize + 10 {
		f.Trace(&nic.TracePacket{Time: time.Unix(int64(i), 0), Dir: nic.Sent, Env: wire.Envelope{Src: hostA, Dst: hostB}, Data: writeOnly(t, uint32(i), 8)})
	}
	var first wire.PSN
	n := 0
	f.Take(func(over uint64) {
		if over != 10 || n != 0 {
			t.Errorf("gap of %d after %d packets, want 10 before any", over, n)
		}
	}, func(lp *ladder.Packet) {
		if n == 0 {
			p.Decode(lp.Data)
			first = p.BTH.PSN()
		}
		n++
	})
	if n != FeedSize || first != 10 {
		t.Errorf("took %d packets from PSN %v, want %d from 10", n, first, FeedSize)
	}
	f.Take(func(uint64) { t.Error("a gap in an empty feed") }, func(*ladder.Packet) { t.Error("a packet from an empty feed") })
}

func TestShown(t *testing.T) {
	convs := []ladder.Conversation{{ID: 1, Transport: "CM"}, {ID: 2, Transport: "RC"}, {ID: 3, Transport: "CM"}, {ID: 4, Transport: "RC"}, {ID: 5, Transport: "UD"}}
	tests := []struct {
		name  string
		convs []int // each arrow's conversation
		want  []int // the conversations shown
	}{
		{"one", []int{1, 1, 2, 2}, []int{1, 2}},
		{"data first", []int{1, 2, 3, 4, 3, 1}, []int{2, 4}},
		{"the most recent", []int{2, 4, 5, 2}, []int{2, 5}},
		{"only MADs", []int{1, 3, 1}, []int{1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var arrows []ladder.Arrow
			for i, c := range tt.convs {
				arrows = append(arrows, ladder.Arrow{Seq: i + 1, Conv: c})
			}
			as, cs := shown(arrows, convs)
			var got []int
			for _, c := range cs {
				got = append(got, c.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("conversations %v, want %v", got, tt.want)
			}
			for _, a := range as {
				if !slices.Contains(tt.want, a.Conv) {
					t.Errorf("arrow %d of conversation %d shown", a.Seq, a.Conv)
				}
			}
		})
	}
	var many []ladder.Arrow
	for i := range 100 {
		many = append(many, ladder.Arrow{Seq: i + 1, Conv: 2})
	}
	if as, _ := shown(many, convs); len(as) != ShowArrows || as[len(as)-1].Seq != 100 {
		t.Errorf("of 100 arrows, %d shown ending with %d; want the last %d", len(as), as[len(as)-1].Seq, ShowArrows)
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "LOCALHOST": true, "app.localhost:1": true, "127.0.0.1:8080": true, "127.9.9.9": true,
		"[::1]:8080": true, "::1": true, "example.com": false, "127.0.0.1.example.com:80": false, "10.0.0.1:8080": false, "": false, "[::]:80": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// source is a daemon with nothing to show.
func source() Source {
	empty := func() any { return struct{}{} }
	return Source{Info: empty, QPs: empty, Regions: empty, Counters: empty}
}

// TestSlowViewer: a viewer that reads nothing does not hold up the
// snapshots the others get, nor more than MaxViewers streams at once.
func TestSlowViewer(t *testing.T) {
	s := NewServer(source(), NewFeed(), true)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	defer s.Close() // before the server: the streams end
	go s.Run()

	stuck, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if _, err := stuck.Write([]byte("GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// The stuck viewer never reads: its stream fills the socket's buffers
	// and blocks on its own. Many snapshots are published meanwhile.
	for range 2000 {
		s.publish()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	req.Host = "localhost"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: state\n" {
		t.Errorf("a second viewer read %q, %v", line, err)
	}

	// MaxViewers at once: the next is refused.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range MaxViewers + 2 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.Write([]byte("GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		status, _ := bufio.NewReader(c).ReadString('\n')
		if strings.Contains(status, "503") {
			return
		}
	}
	t.Errorf("%d viewers at once, none refused; want at most %d", MaxViewers+2, MaxViewers)
}
