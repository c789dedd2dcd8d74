package nic_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

// end is one side of a test connection: a device with a PD, a CQ, a
// registered 1 MiB buffer and one RC QP.
type end struct {
	dev *nic.Device
	pd  *nic.PD
	cq  *nic.CQ
	mr  *nic.MR
	qp  *nic.QP
}

func openEnd(t testing.TB, cfg nic.Config) *end {
	t.Helper()
	return endOn(t, nictest.OpenDevice(t, cfg))
}

// endOn returns an end on an open device.
func endOn(t testing.TB, dev *nic.Device) *end {
	t.Helper()
	e := &end{dev: dev}
	var err error
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, 1<<20), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(nic.QPConfig{SendCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	return e
}

// connected returns two embedded ends with connected RC QPs.
func connected(t testing.TB, cfg nic.Config, opts nic.ConnectOptions) (*end, *end) {
	t.Helper()
	return providers[0].connected(t, cfg, opts)
}

// syncMemory orders the test's accesses to e's registered memory with the
// device's: the device touches memory only while it holds a QP's lock, and
// Status takes that lock. (RDMA gives the target's CPU no completion for a
// one-sided operation; the race detector, rightly, wants one.)
func syncMemory(e *end) { e.qp.Status() }

func TestLoopbackOperations(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := p.connected(t, nic.Config{}, nic.ConnectOptions{})
		exerciseOperations(t, a, b)
		if n, _ := a.dev.Counter("sent_pkts"); n == 0 {
			t.Error("sent_pkts not counted")
		}
		// The WRITE took a's 100,000 bytes to b, the READ brought them back;
		// each side SENT once.
		for _, c := range []struct {
			e    *end
			name string
			min  uint64
		}{{a, "sent_bytes", 100000}, {b, "rcvd_bytes", 100000}, {b, "sent_bytes", 100000}, {a, "rcvd_bytes", 100000},
			{a, "rdma_sends", 1}, {b, "rdma_sends", 1}, {a, "rdma_recvs", 1}, {b, "rdma_recvs", 1}} {
			if n, _ := c.e.dev.Counter(c.name); n < c.min {
				t.Errorf("%s = %d, want at least %d", c.name, n, c.min)
			}
		}
		switch tr, err := a.qp.Traffic(); {
		case p.attached:
			// Counted in the daemon, which shows them (softnic serve --metrics).
			if !errors.Is(err, nic.ErrNotSupported) {
				t.Errorf("Traffic of an attached QP: %v, want ErrNotSupported", err)
			}
		case err != nil:
			t.Fatal(err)
		case tr.SentMsgs != 5 || tr.RcvdMsgs != 1 || tr.SentBytes < 100000 || tr.RcvdBytes < 100000:
			t.Errorf("a's QP counted %+v: want 5 messages sent (WRITE, READ, two atomics, SEND), 1 received (b's SEND) and 100,000 bytes each way", tr)
		}
		for _, c := range []string{"bad_icrc", "malformed", "unknown_qp"} {
			if n, _ := b.dev.Counter(c); n != 0 {
				t.Errorf("%s = %d on a clean loopback", c, n)
			}
		}
	})
}

// exerciseOperations runs every kind of operation over the connected QPs
// of a and b and checks the memory each one changed: a WRITE of 100,000
// bytes, a READ of them back elsewhere, FETCH_ADD and COMPARE_SWAP, and a
// SEND with immediate each way.
func exerciseOperations(t *testing.T, a, b *end) {
	t.Helper()
	src := a.mr.Bytes()
	for i := range 100000 {
		src[i] = byte(i * 13)
	}
	post := func(wr *verbs.SendWR) verbs.WC {
		t.Helper()
		wr.Flags |= verbs.Signaled
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		wc := nictest.Wait(t, a.cq)
		if wc.Status != verbs.Success || wc.ID != wr.ID {
			t.Fatalf("%s: completion %v", wr.Opcode, &wc)
		}
		return wc
	}
	post(&verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, SGL: []verbs.SGE{a.mr.SGE(0, 100000)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	syncMemory(b)
	if !bytes.Equal(b.mr.Bytes()[4096:4096+100000], src[:100000]) {
		t.Fatal("WRITE: remote memory differs")
	}
	post(&verbs.SendWR{ID: 2, Opcode: verbs.WRRead, SGL: []verbs.SGE{a.mr.SGE(200000, 100000)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	if !bytes.Equal(src[200000:300000], src[:100000]) {
		t.Fatal("READ: data differs")
	}
	binary.NativeEndian.PutUint64(b.mr.Bytes()[8:], 5)
	syncMemory(b)
	post(&verbs.SendWR{ID: 3, Opcode: verbs.WRFetchAdd, SGL: []verbs.SGE{a.mr.SGE(512, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 10})
	post(&verbs.SendWR{ID: 4, Opcode: verbs.WRCompareSwap, SGL: []verbs.SGE{a.mr.SGE(520, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 15, Swap: 99})
	syncMemory(b)
	if got, orig := binary.NativeEndian.Uint64(b.mr.Bytes()[8:]), binary.NativeEndian.Uint64(src[512:]); got != 99 || orig != 5 {
		t.Fatalf("atomics: target %d (want 99), fetch-add returned %d (want 5)", got, orig)
	}
	// SEND with immediate, a to b, then b to a.
	if err := b.qp.PostRecv(&verbs.RecvWR{ID: 77, SGL: []verbs.SGE{b.mr.SGE(500000, 1000)}}); err != nil {
		t.Fatal(err)
	}
	post(&verbs.SendWR{ID: 5, Opcode: verbs.WRSendImm, Imm: 7, SGL: []verbs.SGE{a.mr.SGE(0, 1000)}})
	wc := nictest.Wait(t, b.cq)
	if wc.Status != verbs.Success || wc.ID != 77 || wc.ByteLen != 1000 || wc.Imm != 7 || !bytes.Equal(b.mr.Bytes()[500000:501000], src[:1000]) {
		t.Fatalf("receive at b: %v", &wc)
	}
	if err := a.qp.PostRecv(&verbs.RecvWR{ID: 78, SGL: []verbs.SGE{a.mr.SGE(600000, 1000)}}); err != nil {
		t.Fatal(err)
	}
	copy(b.mr.Bytes()[700000:], "hello from b")
	if err := b.qp.PostSend(&verbs.SendWR{ID: 9, Opcode: verbs.WRSendImm, Imm: 8, Flags: verbs.Signaled, SGL: []verbs.SGE{b.mr.SGE(700000, 12)}}); err != nil {
		t.Fatal(err)
	}
	if wc := nictest.Wait(t, a.cq); wc.ID != 78 || wc.Status != verbs.Success || wc.ByteLen != 12 || wc.Imm != 8 || string(src[600000:600012]) != "hello from b" {
		t.Fatalf("receive at a: %v, buffer %q", &wc, src[600000:600012])
	}
	if wc := nictest.Wait(t, b.cq); wc.ID != 9 || wc.Status != verbs.Success {
		t.Fatalf("send at b: %v", &wc)
	}
}

func TestBadRKeyCompletesWithRemAccessErr(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := p.connected(t, nic.Config{}, nic.ConnectOptions{})
		wr := &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 0x100}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if wc := nictest.Wait(t, a.cq); wc.Status != verbs.RemAccessErr {
			t.Fatalf("completion %v, want REM_ACCESS_ERR", &wc)
		}
		if st := a.qp.Status().State; st != verbs.Err {
			t.Errorf("QP state %s, want ERR", st)
		}
	})
}

func TestUnknownQPIsCountedAndTraced(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		var mu sync.Mutex
		var notes []string
		cfg := nic.Config{Trace: func(p *nic.TracePacket) {
			if p.Note != "" {
				mu.Lock()
				notes = append(notes, p.Note)
				mu.Unlock()
			}
		}}
		a, b := p.connected(t, cfg, nic.ConnectOptions{})
		if err := b.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		wr := &verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := b.dev.Counter("unknown_qp"); n > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if n, _ := b.dev.Counter("unknown_qp"); n == 0 {
			t.Fatal("a packet for a destroyed QP was not counted as unknown_qp")
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(notes, "dropped: no such QP") {
			t.Errorf("trace notes %q lack the unknown QP drop", notes)
		}
	})
}

// TestCloseFlushesOutstandingWork: closing a device, embedded or attached,
// completes the work requests its QPs still hold with WR_FLUSH_ERR, and
// those completions can be polled after Close, as the ones before it.
// The attached device's receive has not left its ring yet when the device
// closes: no packet came for it.
func TestCloseFlushesOutstandingWork(t *testing.T) {
	forEachProvider(t, func(t *testing.T, mode provider) {
		nictest.CheckLeaks(t)
		a := mode.end(t, nic.Config{})
		// Connected to a port where nobody listens: the WRITE can never complete.
		if err := a.qp.Connect(netip.MustParseAddrPort("127.0.0.1:9"), 0x33, nic.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&verbs.SendWR{ID: 5, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{a.mr.SGE(0, 8)}, RKey: 1}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostRecv(&verbs.RecvWR{ID: 6, SGL: []verbs.SGE{a.mr.SGE(8, 8)}}); err != nil {
			t.Fatal(err)
		}
		a.dev.Close()
		want := map[uint64]bool{5: true, 6: true}
		var wc [4]verbs.WC
		n, err := a.cq.Poll(wc[:])
		if err != nil || n != len(want) {
			t.Fatalf("Poll after Close: %d completions, %v; want %d", n, err, len(want))
		}
		for _, c := range wc[:n] {
			if !want[c.ID] || c.Status != verbs.WRFlushErr {
				t.Errorf("completion %v, want WR_FLUSH_ERR for WRs 5 (the WRITE) and 6 (the receive)", c.String())
			}
			delete(want, c.ID)
		}
		if n, _ := a.cq.Poll(wc[:]); n != 0 {
			t.Errorf("a second Poll found %d more completions", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := a.cq.Wait(ctx, wc[:]); !errors.Is(err, nic.ErrClosed) {
			t.Errorf("Wait on the emptied CQ of a closed device: %v, want ErrClosed", err)
		}
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRWrite}); err == nil {
			t.Error("posting on a closed device succeeded")
		}
	})
}

// TestRecoverIPID: a packet sealed under a non-zero IPv4 identification, as
// rxe sends them, is dropped as a bad ICRC unless the device recovers the
// identification.
func TestRecoverIPID(t *testing.T) {
	for _, recover := range []bool{false, true} {
		t.Run(fmt.Sprint("recover=", recover), func(t *testing.T) {
			nictest.CheckLeaks(t)
			e := openEnd(t, nic.Config{RecoverIPID: recover})
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			f := wire.Fields{BTH: wire.BTHFields{OpCode: wire.OpRCAck, PKey: 0xFFFF, DestQP: e.qp.Num(), PSN: 5},
				AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(31)}}
			pkt := make([]byte, f.Len(0))
			if _, err := f.Encode(pkt, nil); err != nil {
				t.Fatal(err)
			}
			env := wire.Envelope{Src: conn.LocalAddr().(*net.UDPAddr).AddrPort(), Dst: e.dev.Addr(), IPID: 0x4d2}
			env.Seal(pkt)
			if _, err := conn.WriteToUDPAddrPort(pkt, e.dev.Addr()); err != nil {
				t.Fatal(err)
			}
			want := "bad_icrc"
			if recover {
				want = "icrc_ipid_recovered"
			}
			deadline := time.Now().Add(5 * time.Second)
			for n, _ := e.dev.Counter(want); n == 0; n, _ = e.dev.Counter(want) {
				if time.Now().After(deadline) {
					t.Fatalf("%s not counted", want)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
