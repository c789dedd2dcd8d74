package nictest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// write posts a signalled WRITE of n bytes of A's region to B's, waits for
// its completion and checks B's memory.
func write(t *testing.T, p *nictest.Pair, n int) {
	t.Helper()
	src := p.A.MR.Bytes()[:n]
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	if err := p.A.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{p.A.MR.SGE(0, n)},
		RemoteAddr: p.B.MR.Addr(), RKey: p.B.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := p.A.Wait(t); wc.Status != verbs.Success {
		t.Fatalf("the WRITE completed with %v", wc.Status)
	}
	p.B.QP.Status() // orders the responder's writes before the reads below
	if !bytes.Equal(p.B.MR.Bytes()[:n], src) {
		t.Fatal("B's memory differs from what A wrote")
	}
}

// TestPair: a pair, embedded or attached, connected directly or through
// the connection manager, carries a WRITE, and the recorder has its
// packets from A to B's QP.
func TestPair(t *testing.T) {
	for _, o := range []nictest.Options{{}, {CM: true}, {Attached: true}, {Attached: true, CM: true}} {
		t.Run(fmt.Sprintf("attached=%v,cm=%v", o.Attached, o.CM), func(t *testing.T) {
			p := nictest.NewPair(t, &o)
			write(t, p, 100)
			sent := p.Recorder.Find(func(pk *nictest.Packet) bool {
				return nictest.Sent(pk) && pk.Device == "A" && pk.OpCode == wire.OpRCWriteOnly && pk.DestQP == p.B.QP.Num()
			})
			if len(sent) != 1 {
				t.Errorf("A sent %d WRITE Only packets to B's QP, want 1:\n%s", len(sent), p.Recorder)
			}
		})
	}
}

// TestFaultDropsMiddle: dropping the Middle of a three-packet WRITE makes
// B NAK the Last (PSN sequence error) and A send the Middle again; once
// the rule is off, the same WRITE goes through with no retransmission.
// The ACK timer (Timeout 24, about 69 s, past the minute a completion is
// waited for) never fires: the WRITE recovers by the NAK alone, and a busy
// machine's scheduling, which delayed a WRITE's ACK past the default 67 ms
// and had A resend the whole WRITE, makes no retransmission.
func TestFaultDropsMiddle(t *testing.T) {
	for _, attached := range []bool{false, true} {
		t.Run(fmt.Sprintf("attached=%v", attached), func(t *testing.T) {
			p := nictest.NewPair(t, &nictest.Options{Attached: attached, Config: nic.Config{MTU: 1024},
				Connect: nic.ConnectOptions{Timeout: 24}})
			middle := p.A.QP.Attr().SQPSN.Add(1)
			f := p.A.Faults.Add(netem.Rule{Action: netem.ActionDrop, OpCodes: []wire.OpCode{wire.OpRCWriteMiddle}, QP: p.B.QP.Num()})
			write(t, p, 3000)
			if f.Hits() != 1 {
				t.Errorf("the rule hit %d packets, want 1", f.Hits())
			}
			p.Recorder.ExpectNAK(t, wire.NakPSNSequenceError)
			p.Recorder.ExpectRetransmitted(t, middle)
			if n := len(p.Recorder.Find(func(pk *nictest.Packet) bool { return pk.Note == nic.NoteFaultDropped })); n != 1 {
				t.Errorf("%d packets dropped, want 1", n)
			}
			f.Off()
			p.Recorder.Reset()
			write(t, p, 3000)
			if re := p.Recorder.Retransmitted(); len(re) != 0 {
				t.Errorf("with the rule off, %d packets were retransmitted:\n%s", len(re), p.Recorder)
			}
			p.Recorder.ExpectNone(t, "NAK", func(pk *nictest.Packet) bool { return pk.IsNAK(-1) })
		})
	}
}

// TestFaultSwitchedOff: a rule that drops every WRITE to B's QP holds the
// WRITE up until it is switched off; A's retransmission then goes
// through. The test learns of the drops from the recorder, not by
// sleeping.
func TestFaultSwitchedOff(t *testing.T) {
	p := nictest.NewPair(t, &nictest.Options{Connect: nic.ConnectOptions{Timeout: 10}}) // ≈ 4 ms
	f := p.A.Faults.Add(netem.Rule{Action: netem.ActionDrop, OpCodes: []wire.OpCode{wire.OpRCWriteOnly}, QP: p.B.QP.Num(), Count: math.MaxInt})
	if err := p.A.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{p.A.MR.SGE(0, 8)},
		RemoteAddr: p.B.MR.Addr(), RKey: p.B.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dropped := 0
	if _, err := p.Recorder.Wait(ctx, func(pk *nictest.Packet) bool {
		if pk.Note == nic.NoteFaultDropped {
			dropped++
		}
		return dropped == 2 // the first sending and one retransmission
	}); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.A.CQ.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Fatal("the WRITE completed while every sending of it was dropped")
	}
	f.Off()
	if wc := p.A.Wait(t); wc.Status != verbs.Success {
		t.Fatalf("the WRITE completed with %v", wc.Status)
	}
	if f.Hits() < 2 {
		t.Errorf("the rule hit %d packets, want 2 or more", f.Hits())
	}
}

// TestSeed: pairs made with one seed start at the same PSNs and their
// random faults hit the same packets; another seed differs.
func TestSeed(t *testing.T) {
	run := func(seed uint64) (wire.PSN, string) {
		p := nictest.NewPair(t, &nictest.Options{Seed: seed, Config: nic.Config{MTU: 256}, Connect: nic.ConnectOptions{Timeout: 10}})
		p.A.Faults.SetRandom(netem.Faults{Drop: 0.3, OpCodes: []wire.OpCode{wire.OpRCWriteFirst, wire.OpRCWriteMiddle, wire.OpRCWriteLast}})
		write(t, p, 4000) // 16 packets
		var fates strings.Builder
		for _, pk := range p.Recorder.Find(func(pk *nictest.Packet) bool { return nictest.Sent(pk) && pk.Device == "A" && pk.OpCode.IsWrite() }) {
			fmt.Fprintf(&fates, "%v:%v ", pk.PSN, pk.Note == nic.NoteFaultDropped)
		}
		return p.A.QP.Attr().SQPSN, fates.String()
	}
	psn1, fates1 := run(42)
	psn2, fates2 := run(42)
	psn3, _ := run(43)
	if psn1 != psn2 || psn1 == psn3 {
		t.Errorf("A's first PSN: %v and %v with seed 42, %v with 43", psn1, psn2, psn3)
	}
	if !strings.Contains(fates1, "true") {
		t.Errorf("drop=0.3 dropped none of the first sendings: %s", fates1)
	}
	first := func(s string) string { // the first sending of each PSN, before timeouts interleave
		f := strings.Fields(s)
		return strings.Join(f[:min(16, len(f))], " ")
	}
	if first(fates1) != first(fates2) {
		t.Errorf("seed 42 dropped\n%s\nthen\n%s", first(fates1), first(fates2))
	}
}

// TestDaemon: a daemon's client connects two of its QPs through the
// daemon; the daemon's recorder and faults see their packets.
func TestDaemon(t *testing.T) {
	d := nictest.NewDaemon(t, nil)
	if err := d.Client.SetFaults(nil); !errors.Is(err, nic.ErrNotSupported) {
		t.Errorf("an attached device's SetFaults: %v, want ErrNotSupported", err)
	}
	pd, err := d.Client.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.Client.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pd.AllocMR(4096, nictest.Access)
	if err != nil {
		t.Fatal(err)
	}
	var q [2]*nic.QP
	for i := range q {
		if q[i], err = pd.CreateQP(nic.QPConfig{SendCQ: cq}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range q {
		if err := q[i].Connect(d.Client.Addr(), q[1-i].Num(), nic.ConnectOptions{LocalPSN: 5, RemotePSN: 5}); err != nil {
			t.Fatal(err)
		}
	}
	f := d.Faults.Add(netem.Rule{Action: netem.ActionDuplicate, OpCodes: []wire.OpCode{wire.OpRCWriteOnly}})
	if err := q[0].PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{m.SGE(0, 8)},
		RemoteAddr: m.Addr() + 8, RKey: m.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.Wait(ctx, wc[:]); err != nil || wc[0].Status != verbs.Success {
		t.Fatalf("the WRITE: %v, %v", err, wc[0].Status)
	}
	if f.Hits() != 1 {
		t.Errorf("the duplicating rule hit %d packets, want 1", f.Hits())
	}
	if _, err := d.Recorder.Wait(ctx, func(pk *nictest.Packet) bool {
		return pk.Dir == nic.Received && pk.OpCode == wire.OpRCWriteOnly && pk.DestQP == q[1].Num()
	}); err != nil {
		t.Error(err)
	}
}

// TestRecorder: the recorder keeps the last packets within its limit,
// Wait gives up when its context ends, and a packet wire cannot decode is
// kept undecoded.
func TestRecorder(t *testing.T) {
	r := nictest.NewRecorder(4)
	trace := r.Trace("X", nil)
	for i := range 6 {
		trace(&nic.TracePacket{Dir: nic.Sent, Data: []byte{byte(i)}})
	}
	pkts := r.Packets()
	if len(pkts) != 4 || r.Forgotten() != 2 || pkts[0].Bytes[0] != 2 || pkts[3].Bytes[0] != 5 || pkts[0].Decoded {
		t.Errorf("kept %d packets, forgot %d; the first %v", len(pkts), r.Forgotten(), pkts[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.Wait(ctx, func(*nictest.Packet) bool { return false }); err == nil {
		t.Error("Wait found a packet nothing matches")
	}
}

// fakeT records what a leak check reports.
type fakeT struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(format, a...)) }
func (f *fakeT) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// TestCheckLeaks: the leak check reports a goroutine and a device left
// running, and nothing once they are gone.
func TestCheckLeaks(t *testing.T) {
	defer func(d time.Duration) { nictest.LeakTimeout = d }(nictest.LeakTimeout)
	nictest.LeakTimeout = 50 * time.Millisecond
	ft := &fakeT{TB: t}
	nictest.CheckLeaks(ft)
	stop := make(chan struct{})
	go func() { <-stop }()
	d, err := nic.Open(nic.Config{Embed: true, Addr: netip.MustParseAddrPort("127.0.0.1:0")})
	if err != nil {
		t.Fatal(err)
	}
	ft.end()
	var goroutine, fd bool
	for _, e := range ft.errs {
		goroutine = goroutine || strings.Contains(e, "goroutine leaked")
		fd = fd || strings.Contains(e, "descriptor leaked")
	}
	if !goroutine || !fd && runtime.GOOS == "linux" {
		t.Errorf("the leak check reported %q", ft.errs)
	}
	close(stop)
	d.Close()
	ft = &fakeT{TB: t}
	nictest.CheckLeaks(ft)
	ft.end()
	if len(ft.errs) != 0 {
		t.Errorf("the leak check reported %q with nothing left", ft.errs)
	}
}

// TestStartPairFails: a pair whose second device cannot be made (both
// ends asked for one UDP port) is an error, and what was made for it is
// closed: nothing leaks, nothing panics.
func TestStartPairFails(t *testing.T) {
	nictest.CheckLeaks(t)
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	p, err := nictest.StartPair(&nictest.Options{Config: nic.Config{Addr: addr}})
	if err == nil {
		p.Close()
		t.Fatalf("a pair with both ends on %v: no error", addr)
	}
	if p != nil {
		t.Errorf("StartPair returned a pair with its error %v", err)
	}
}
