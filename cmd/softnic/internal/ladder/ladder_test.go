package ladder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/wire"
)

// step is one packet of a scenario, from A to B unless back is set.
type step struct {
	back    bool
	op      wire.OpCode
	psn     wire.PSN
	syn     wire.Syndrome
	msn     uint32
	size    int           // payload
	dmalen  uint32        // a READ's length
	orig    uint64        // an ATOMIC ACKNOWLEDGE's original value
	lost    bool          // never reached its receiver
	delayed time.Duration // held back on the way this long
	bad     bool          // bad ICRC
	after   time.Duration
	want    []Anomaly // what the ladder names on this arrow (Seq is filled in)
	text    string    // a phrase the first anomaly's text must contain
}

// conn is two QPs on two hosts: A (10.0.0.1, QP 0x11) and B (10.0.0.2, QP
// 0x22), both on RoCEv2's port.
type conn struct {
	t   *testing.T
	l   *Ladder
	now time.Time
}

var (
	envAB = wire.Envelope{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")}
	envBA = wire.Envelope{Src: envAB.Dst, Dst: envAB.Src}
)

const qpA, qpB = 0x11, 0x22

// encode builds a sealed packet between two envelopes' ends.
func encode(t *testing.T, env wire.Envelope, f *wire.Fields, size int) []byte {
	t.Helper()
	b := make([]byte, f.Len(size))
	if _, err := f.Encode(b, bytes.Repeat([]byte{0x5a}, size)); err != nil {
		t.Fatalf("encode %v: %v", f.BTH.OpCode, err)
	}
	env.Seal(b)
	return b
}

func (c *conn) add(s step) *Arrow {
	c.now = c.now.Add(s.after + 10*time.Microsecond)
	env, dqp := envAB, uint32(qpB)
	if s.back {
		env, dqp = envBA, qpA
	}
	f := wire.Fields{
		BTH:          wire.BTHFields{OpCode: s.op, PKey: 0xffff, DestQP: dqp, PSN: s.psn, AckReq: s.op.IsRequest()},
		RETH:         wire.RETHFields{VA: 0x1000, RKey: 0x42, DMALen: s.dmalen},
		AETH:         wire.AETHFields{Syndrome: s.syn, MSN: s.msn},
		AtomicETH:    wire.AtomicETHFields{VA: 0x2000, RKey: 0x42, SwapAdd: 2},
		AtomicAckETH: wire.AtomicAckETHFields{OrigData: s.orig},
	}
	if s.op.HasRETH() && s.dmalen == 0 && !s.op.IsReadRequest() {
		f.RETH.DMALen = uint32(s.size)
	}
	icrc := wire.ICRCOK
	if s.bad {
		icrc = wire.ICRCBad
	}
	return c.l.Add(&Packet{Time: c.now, Env: env, Data: encode(c.t, env, &f, s.size), ICRC: icrc, Lost: s.lost, Delayed: s.delayed})
}

// run plays a scenario and checks that each arrow names exactly the
// anomalies its step wants.
func run(t *testing.T, o Options, steps []step) *Ladder {
	t.Helper()
	c := &conn{t: t, l: New(o), now: time.Unix(1700000000, 0)}
	for i, s := range steps {
		a := c.add(s)
		var got []string
		for _, an := range a.Anomalies {
			got = append(got, fmt.Sprintf("%v/%v/%v", an.Kind, an.Cause, an.PSN))
		}
		var want []string
		for _, an := range s.want {
			want = append(want, fmt.Sprintf("%v/%v/%v", an.Kind, an.Cause, an.PSN))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("arrow %d (%s): anomalies %v, want %v", i+1, a.Label, got, want)
			for _, an := range a.Anomalies {
				t.Logf("  %s", an.Text)
			}
		}
		if s.text != "" && (len(a.Anomalies) == 0 || !strings.Contains(a.Anomalies[0].Text, s.text)) {
			t.Errorf("arrow %d: the first anomaly does not say %q: %+v", i+1, s.text, a.Anomalies)
		}
	}
	return c.l
}

func an(k Kind, c Cause, psn wire.PSN) Anomaly { return Anomaly{Kind: k, Cause: c, PSN: psn} }

// TestAnomalies plays the scenarios of a teacher's board, one per kind of
// anomaly, as the packets would show them.
func TestAnomalies(t *testing.T) {
	const p = 0x100
	ack := wire.ACKSyndrome(wire.CreditInvalid)
	tests := []struct {
		name  string
		opts  Options
		steps []step
	}{
		{"a lost WRITE packet, the NAK and go-back-N", Options{}, []step{
			{op: wire.OpRCWriteFirst, psn: p, size: 1024},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, lost: true, want: []Anomaly{an(Lost, 0, p+1)}},
			{op: wire.OpRCWriteMiddle, psn: p + 2, size: 1024, want: []Anomaly{an(OutOfSequence, 0, p+1)}, text: "PSN 0x000101 did not arrive"},
			{op: wire.OpRCWriteLast, psn: p + 3, size: 100, want: []Anomaly{an(OutOfSequence, 0, p+1)}, text: "still waits for PSN 0x000101"},
			{back: true, op: wire.OpRCAck, psn: p + 1, syn: wire.NakSyndrome(wire.NakPSNSequenceError), want: []Anomaly{an(NAK, 0, p+1)}, text: "PSN sequence error"},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, want: []Anomaly{an(Retransmission, CauseNAK, p+1)}, text: "arrow 5 asked for PSN 0x000101"},
			{op: wire.OpRCWriteMiddle, psn: p + 2, size: 1024, want: []Anomaly{an(Retransmission, CauseNAK, p+2)}, text: "go-back-N"},
			{op: wire.OpRCWriteLast, psn: p + 3, size: 100, want: []Anomaly{an(Retransmission, CauseNAK, p+3)}},
			{back: true, op: wire.OpRCAck, psn: p + 3, syn: ack, msn: 1},
		}},
		{"a lost ACK and the retransmission timer", Options{ACKTimeout: ACKTimeout(10)}, []step{
			{op: wire.OpRCWriteOnly, psn: p, size: 8},
			{back: true, op: wire.OpRCAck, psn: p, syn: ack, msn: 1, lost: true, want: []Anomaly{an(Lost, 0, p)}},
			{op: wire.OpRCWriteOnly, psn: p, size: 8, after: ACKTimeout(10),
				want: []Anomaly{an(Retransmission, CauseTimeout, p), an(Duplicate, 0, p)}, text: "the ACK timeout is 4.19 ms"},
			{back: true, op: wire.OpRCAck, psn: p, syn: ack, msn: 1, want: []Anomaly{an(Duplicate, 0, p)}, text: "which did not reach the requester"},
		}},
		{"an ACK with a bad ICRC and the timer", Options{}, []step{
			{op: wire.OpRCSendOnly, psn: p, size: 8},
			{back: true, op: wire.OpRCAck, psn: p, syn: ack, msn: 1, bad: true, want: []Anomaly{an(BadICRC, 0, p)}},
			{op: wire.OpRCSendOnly, psn: p, size: 8, after: 67 * time.Millisecond,
				want: []Anomaly{an(Retransmission, CauseTimeout, p), an(Duplicate, 0, p)}, text: "the 1 response meanwhile could not reach"},
		}},
		{"a SEND before a receive is posted: RNR NAK and the wait", Options{}, []step{
			{op: wire.OpRCSendOnly, psn: p, size: 64},
			{back: true, op: wire.OpRCAck, psn: p, syn: wire.RNRNakSyndrome(12), want: []Anomaly{an(RNRWait, 0, p)}, text: "waits at least 640 µs"},
			{op: wire.OpRCSendOnly, psn: p, size: 64, after: 700 * time.Microsecond, want: []Anomaly{an(Retransmission, CauseRNR, p)}, text: "after the RNR NAK of arrow 2"},
			{back: true, op: wire.OpRCAck, psn: p, syn: ack, msn: 1},
		}},
		{"a lost READ response and the implied NAK", Options{}, []step{
			{op: wire.OpRCReadRequest, psn: p, dmalen: 64},
			{op: wire.OpRCWriteOnly, psn: p + 1, size: 8},
			{back: true, op: wire.OpRCReadResponseOnly, psn: p, syn: ack, msn: 1, size: 64, lost: true, want: []Anomaly{an(Lost, 0, p)}},
			{back: true, op: wire.OpRCAck, psn: p + 1, syn: ack, msn: 2, want: []Anomaly{an(ImpliedNAK, 0, p)}, text: "passes the READ of PSN 0x000100"},
			{op: wire.OpRCReadRequest, psn: p, dmalen: 64, want: []Anomaly{an(Retransmission, CauseImpliedNAK, p), an(Duplicate, 0, p)}},
			{back: true, op: wire.OpRCReadResponseOnly, psn: p, syn: ack, msn: 2, size: 64, want: []Anomaly{an(Duplicate, 0, p)}},
		}},
		{"one ACK for three WRITEs", Options{}, []step{
			{op: wire.OpRCWriteOnly, psn: p, size: 8},
			{back: true, op: wire.OpRCAck, psn: p, syn: ack, msn: 1},
			{op: wire.OpRCWriteOnly, psn: p + 1, size: 8},
			{op: wire.OpRCWriteOnly, psn: p + 2, size: 8},
			{op: wire.OpRCWriteOnly, psn: p + 3, size: 8},
			{back: true, op: wire.OpRCAck, psn: p + 3, syn: ack, msn: 4, want: []Anomaly{an(Coalesced, 0, p+3)}, text: "one ACK for 3 requests (MSN 2 to 4)"},
		}},
		{"the first ACK covers two SENDs", Options{}, []step{
			{op: wire.OpRCSendOnly, psn: p, size: 8},
			{op: wire.OpRCSendOnly, psn: p + 1, size: 8},
			{back: true, op: wire.OpRCAck, psn: p + 1, syn: ack, msn: 2, want: []Anomaly{an(Coalesced, 0, p+1)}},
		}},
		{"a FETCH_ADD copied on the way, answered from the saved result", Options{}, []step{
			{op: wire.OpRCFetchAdd, psn: p},
			{op: wire.OpRCFetchAdd, psn: p, want: []Anomaly{an(Duplicate, 0, p)}, text: "copied on the way; the responder has PSN 0x000100 already; it sends back the original value it saved"},
			{back: true, op: wire.OpRCAtomicAck, psn: p, syn: ack, msn: 1, orig: 40},
			{back: true, op: wire.OpRCAtomicAck, psn: p, syn: ack, msn: 1, orig: 40, want: []Anomaly{an(Duplicate, 0, p)}, text: "executed once"},
		}},
		{"an atomic executed twice", Options{}, []step{
			{op: wire.OpRCFetchAdd, psn: p},
			{op: wire.OpRCFetchAdd, psn: p, want: []Anomaly{an(Duplicate, 0, p)}},
			{back: true, op: wire.OpRCAtomicAck, psn: p, syn: ack, msn: 1, orig: 40},
			{back: true, op: wire.OpRCAtomicAck, psn: p, syn: ack, msn: 2, orig: 42, want: []Anomaly{an(Duplicate, 0, p)}, text: "executed twice"},
		}},
		{"a bad rkey", Options{}, []step{
			{op: wire.OpRCWriteOnly, psn: p, size: 8},
			{back: true, op: wire.OpRCAck, psn: p, syn: wire.NakSyndrome(wire.NakRemoteAccessError), want: []Anomaly{an(NAK, 0, p)}, text: "REM_ACCESS_ERR"},
		}},
		{"PSNs the capture missed", Options{}, []step{
			{op: wire.OpRCWriteOnly, psn: p, size: 8},
			{op: wire.OpRCWriteOnly, psn: p + 3, size: 8, want: []Anomaly{an(Missing, 0, p+1), an(OutOfSequence, 0, p+1)}, text: "PSNs 0x000101–0x000102 not seen before PSN 0x000103"},
		}},
		{"a packet held back: the NAK, go-back-N, and the late original", Options{}, []step{
			{op: wire.OpRCWriteFirst, psn: p, size: 1024},
			{op: wire.OpRCWriteLast, psn: p + 2, size: 100, want: []Anomaly{an(Missing, 0, p+1), an(OutOfSequence, 0, p+1)}},
			{back: true, op: wire.OpRCAck, psn: p + 1, syn: wire.NakSyndrome(wire.NakPSNSequenceError), want: []Anomaly{an(NAK, 0, p+1)}},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, want: []Anomaly{an(Retransmission, CauseNAK, p+1)}},
			{op: wire.OpRCWriteLast, psn: p + 2, size: 100, want: []Anomaly{an(Retransmission, CauseNAK, p+2)}},
			{back: true, op: wire.OpRCAck, psn: p + 2, syn: ack, msn: 1},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, delayed: 20 * time.Millisecond, want: []Anomaly{an(Duplicate, 0, p+1)}, text: "held back 20 ms on the way"},
			{back: true, op: wire.OpRCAck, psn: p + 2, syn: ack, msn: 1, want: []Anomaly{an(Duplicate, 0, p+2)}},
		}},
		{"a packet held back less than its retransmission", Options{}, []step{
			{op: wire.OpRCWriteFirst, psn: p, size: 1024},
			{op: wire.OpRCWriteLast, psn: p + 2, size: 100, want: []Anomaly{an(Missing, 0, p+1), an(OutOfSequence, 0, p+1)}},
			{back: true, op: wire.OpRCAck, psn: p + 1, syn: wire.NakSyndrome(wire.NakPSNSequenceError), want: []Anomaly{an(NAK, 0, p+1)}},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, delayed: time.Millisecond},
			{op: wire.OpRCWriteMiddle, psn: p + 1, size: 1024, want: []Anomaly{an(Retransmission, CauseNAK, p+1), an(Duplicate, 0, p+1)}},
		}},
		{"PSNs wrap", Options{}, []step{
			{op: wire.OpRCWriteOnly, psn: wire.PSNMask, size: 8},
			{op: wire.OpRCWriteOnly, psn: 0, size: 8},
			{back: true, op: wire.OpRCAck, psn: 0, syn: ack, msn: 2, want: []Anomaly{an(Coalesced, 0, 0)}},
			{op: wire.OpRCWriteOnly, psn: 1, size: 8},
			{back: true, op: wire.OpRCAck, psn: 1, syn: ack, msn: 3},
		}},
		{"a READ of several packets, the MTU learned on the way", Options{}, []step{
			{op: wire.OpRCReadRequest, psn: p, dmalen: 2500},
			{op: wire.OpRCReadRequest, psn: p + 3, dmalen: 2500},
			{back: true, op: wire.OpRCReadResponseFirst, psn: p, syn: ack, msn: 1, size: 1024},
			{back: true, op: wire.OpRCReadResponseMiddle, psn: p + 1, size: 1024},
			{back: true, op: wire.OpRCReadResponseLast, psn: p + 2, syn: ack, msn: 1, size: 452},
			{op: wire.OpRCReadRequest, psn: p + 6, dmalen: 2500},
			{back: true, op: wire.OpRCReadResponseFirst, psn: p + 3, syn: ack, msn: 2, size: 1024},
			{back: true, op: wire.OpRCReadResponseMiddle, psn: p + 4, size: 1024},
			{back: true, op: wire.OpRCReadResponseLast, psn: p + 5, syn: ack, msn: 2, size: 452},
			{op: wire.OpRCWriteOnly, psn: p + 9, size: 8},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.opts, tt.steps) })
	}
}

func TestUndecodable(t *testing.T) {
	l := New(Options{})
	a := l.Add(&Packet{Time: time.Unix(1, 0), Env: envAB, Data: []byte{1, 2, 3}})
	if a.Err == "" || len(a.Anomalies) != 1 || a.Anomalies[0].Kind != Undecodable || !strings.Contains(a.Label, "3-byte") {
		t.Errorf("arrow %+v", a)
	}
}

// TestConversations: devices that share an address and QP numbers (softnic
// devices on one host, on different ports) are told apart, and each
// conversation's endpoints learn their QPs from the packets to them.
func TestConversations(t *testing.T) {
	l := New(Options{})
	dev := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port) }
	add := func(src, dst netip.AddrPort, op wire.OpCode, dqp uint32, psn wire.PSN) *Arrow {
		env := wire.Envelope{Src: src, Dst: dst}
		f := wire.Fields{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: dqp, PSN: psn}, AETH: wire.AETHFields{MSN: 1}}
		return l.Add(&Packet{Time: time.Unix(1, 0), Env: env, Data: encode(t, env, &f, 0), ICRC: wire.ICRCOK})
	}
	// Devices on ports 40001 and 40002 both have a QP 0x11; a third,
	// 40003, talks to 40001's QP 0x12.
	a1 := add(dev(40001), dev(40002), wire.OpRCSendOnly, 0x11, 5)
	a2 := add(dev(40003), dev(40001), wire.OpRCSendOnly, 0x12, 9)
	a3 := add(dev(40002), dev(40001), wire.OpRCAck, 0x11, 5)
	a4 := add(dev(40001), dev(40003), wire.OpRCAck, 0x33, 9)
	if a1.Conv != a3.Conv || a2.Conv != a4.Conv || a1.Conv == a2.Conv {
		t.Errorf("conversations %d %d %d %d, want the 1st and 3rd arrows in one, the 2nd and 4th in another", a1.Conv, a2.Conv, a3.Conv, a4.Conv)
	}
	if !a1.FromA || a3.FromA || !a2.FromA || a4.FromA {
		t.Errorf("directions %v %v %v %v", a1.FromA, a2.FromA, a3.FromA, a4.FromA)
	}
	cs := l.Conversations()
	if len(cs) != 2 {
		t.Fatalf("%d conversations", len(cs))
	}
	if got := cs[0].A.String() + " ⇄ " + cs[0].B.String(); got != "127.0.0.1:40001 QP 0x000011 ⇄ 127.0.0.1:40002 QP 0x000011" {
		t.Errorf("first conversation %s", got)
	}
	if got := cs[1].A.String() + " ⇄ " + cs[1].B.String(); got != "127.0.0.1:40003 QP 0x000033 ⇄ 127.0.0.1:40001 QP 0x000012" {
		t.Errorf("second conversation %s", got)
	}
}

// TestKeep: a live ladder keeps its last arrows and forgets the
// conversations of the others, but counts every anomaly it named.
func TestKeep(t *testing.T) {
	l := New(Options{Keep: 10})
	now := time.Unix(1, 0)
	for i := range 100 {
		// Every 20 packets a new conversation (another destination QP),
		// whose 11th packet resends the 10th a second later: a timeout.
		env := envAB
		psn := wire.PSN(i % 20)
		if psn >= 10 {
			psn--
		}
		f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCWriteOnly, PKey: 0xffff, DestQP: uint32(0x100 + i/20), PSN: psn},
			RETH: wire.RETHFields{DMALen: 8}}
		now = now.Add(time.Second)
		l.Add(&Packet{Time: now, Env: env, Data: encode(t, env, &f, 8), ICRC: wire.ICRCOK})
	}
	as := l.Arrows()
	if len(as) != 10 || as[0].Seq != 91 || as[9].Seq != 100 {
		t.Fatalf("kept arrows %d..%d (%d), want 91..100", as[0].Seq, as[len(as)-1].Seq, len(as))
	}
	if cs := l.Conversations(); len(cs) != 1 || cs[0].ID != 5 {
		t.Errorf("conversations %+v, want only the fifth", cs)
	}
	if since := l.Since(97); len(since) != 3 || since[0].Seq != 98 {
		t.Errorf("Since(97) gives %d arrows from %d", len(since), since[0].Seq)
	}
	if n, d, m := l.Total(Retransmission), l.Total(Duplicate), l.Total(Missing); n != 5 || d != 5 || m != 0 {
		t.Errorf("%d retransmissions, %d duplicates, %d missing counted; want 5, 5 and 0", n, d, m)
	}
	if l.Packets() != 100 || len(l.flows) != 1 {
		t.Errorf("%d packets, %d flows remembered; want 100 and 1", l.Packets(), len(l.flows))
	}
}

// TestArrowJSON: a live page can take arrows as JSON.
func TestArrowJSON(t *testing.T) {
	l := run(t, Options{}, []step{
		{op: wire.OpRCWriteOnly, psn: 7, size: 8},
		{back: true, op: wire.OpRCAck, psn: 7, syn: wire.NakSyndrome(wire.NakRemoteAccessError), want: []Anomaly{an(NAK, 0, 7)}},
	})
	b, err := json.Marshal(l.Arrows())
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[1]["label"] != "NAK(remote access error) psn=0x000007 msn=0" || back[1]["src"] != "10.0.0.2:4791" {
		t.Errorf("JSON %s", b)
	}
	if ans := back[1]["anomalies"].([]any); len(ans) != 1 || ans[0].(map[string]any)["kind"] != "NAK" {
		t.Errorf("anomalies %v", back[1]["anomalies"])
	}
}

// TestSuggestedExponent: a resend's wait suggests the largest ACK timeout
// it is at least (timers fire late, not early), with a tenth of slack.
func TestSuggestedExponent(t *testing.T) {
	tests := []struct {
		wait time.Duration
		exp  uint8
	}{
		{67080 * time.Microsecond, 14}, // host_dropack.pcap: rxe, a little under 4.096 µs × 2^14
		{95700 * time.Microsecond, 14}, // a busy machine's timer, late
		{134218 * time.Microsecond, 15},
		{8200 * time.Nanosecond, 1},
		{5 * time.Microsecond, 0},
	}
	for _, tt := range tests {
		if got := suggestedExponent(tt.wait); got != tt.exp {
			t.Errorf("suggestedExponent(%v) = %d, want %d", tt.wait, got, tt.exp)
		}
	}
}
