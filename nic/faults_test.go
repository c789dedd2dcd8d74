package nic_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestFaultRuleHoldsBack: a fault rule holds back the WRITE Middle of one
// PSN: the trace shows it held, then released, and the capture has it
// once, where the wire had it: after the Last it was sent before. The
// responder NAKs the gap, the requester resends, and the WRITE completes.
func TestFaultRuleHoldsBack(t *testing.T) {
	var (
		mu       sync.Mutex
		notes    []string // of the WRITE Middle of PSN 101, in order
		file     bytes.Buffer
		released = make(chan struct{})
	)
	w, err := wire.NewPcapWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	capture := nic.PcapTrace(w, false, func(err error) { t.Error(err) })
	cfg := nic.Config{
		MTU: 1024,
		Faults: &netem.Faults{Rules: []netem.Rule{{Action: netem.ActionDelay, OpCodes: []wire.OpCode{wire.OpRCWriteMiddle},
			PSN: 101, MatchPSN: true, Hold: 20 * time.Millisecond}}},
		Trace: func(tp *nic.TracePacket) {
			capture(tp)
			var p wire.Packet
			if tp.Dir == nic.Sent && p.Decode(tp.Data) == nil && p.OpCode() == wire.OpRCWriteMiddle && p.BTH.PSN() == 101 {
				mu.Lock()
				notes = append(notes, tp.Note)
				mu.Unlock()
				if tp.Note == nic.NoteFaultReleased {
					close(released)
				}
			}
		},
	}
	// An ACK timeout of 1 s: a slow run (-race) must not add a timeout.
	a, b := connected(t, cfg, nic.ConnectOptions{Timeout: 18})
	copy(a.mr.Bytes(), bytes.Repeat([]byte("held back "), 300))
	if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 3000)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := nictest.Wait(t, a.cq); wc.Status != verbs.Success {
		t.Fatalf("the WRITE completed with %v", wc.Status)
	}
	syncMemory(b)
	if !bytes.Equal(b.mr.Bytes()[:3000], a.mr.Bytes()[:3000]) {
		t.Error("the responder's memory differs")
	}
	if n, _ := a.dev.Counter("fault_delayed"); n != 1 {
		t.Errorf("fault_delayed %d, want 1", n)
	}
	if n, _ := a.dev.Counter("rcvd_seq_err"); n != 1 {
		t.Errorf("rcvd_seq_err %d, want 1: the Last overtook the held-back Middle", n)
	}
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the held-back packet was not released")
	}
	a.dev.Close() // and so no more tracing into the capture
	b.dev.Close()
	mu.Lock()
	defer mu.Unlock()
	// Held, then resent after the NAK and released, in either order (the
	// NAK races the hold): the rule hits the first sending only.
	if len(notes) != 3 || notes[0] != nic.NoteFaultDelayed || !slices.Contains(notes, "") || !slices.Contains(notes, nic.NoteFaultReleased) {
		t.Errorf("the Middle of PSN 101 was traced with notes %q, want held, then resent and released", notes)
	}
	r, err := wire.NewPcapReader(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var psns []wire.PSN
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var p wire.Packet
		if err != nil || p.Decode(fr.Payload) != nil {
			t.Fatalf("capture: %v", err)
		}
		if p.OpCode().IsRequest() {
			psns = append(psns, p.BTH.PSN())
		}
	}
	// First 100 and Last 102 (Middle 101 held), then, in the order the
	// race gave, 101 and 102 resent and the held-back 101.
	if rest := slices.Sorted(slices.Values(psns[min(2, len(psns)):])); !slices.Equal(psns[:min(2, len(psns))], []wire.PSN{100, 102}) ||
		!slices.Equal(rest, []wire.PSN{101, 101, 102}) {
		t.Errorf("the capture holds the requests %v, want 100, 102, then 101, 101 and 102", psns)
	}
}
