package fabric_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/fabric"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// epSide is one side of an endpoint test: a device, a PD, a registered
// 1 MiB buffer and an endpoint.
type epSide struct {
	dev *nic.Device
	pd  *nic.PD
	mr  *nic.MR
	ep  *fabric.Endpoint
}

func openEndpoint(t testing.TB, devCfg nic.Config, cfg fabric.EndpointConfig) *epSide {
	t.Helper()
	dev := nictest.OpenDevice(t, devCfg)
	s := &epSide{dev: dev}
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(make([]byte, 1<<20), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead); err != nil {
		t.Fatal(err)
	}
	if s.ep, err = fabric.NewEndpoint(s.pd, cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// endpointPair returns two connected endpoints on loopback devices.
func endpointPair(t testing.TB, devCfg nic.Config, ca, cb fabric.EndpointConfig) (*epSide, *epSide) {
	t.Helper()
	nictest.CheckLeaks(t)
	a, b := openEndpoint(t, devCfg, ca), openEndpoint(t, devCfg, cb)
	if err := a.ep.QP().Connect(b.dev.Addr(), b.ep.QP().Num(), nic.ConnectOptions{LocalPSN: 7, RemotePSN: 900}); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.QP().Connect(a.dev.Addr(), a.ep.QP().Num(), nic.ConnectOptions{LocalPSN: 900, RemotePSN: 7}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// key and addr name remote memory of s for the calls.
func (s *epSide) key() uint64           { return uint64(s.mr.RKey()) }
func (s *epSide) addr(off int) uint64   { return s.mr.Addr() + uint64(off) }
func (s *epSide) buf(sp span) []byte    { return s.mr.Bytes()[sp.off : sp.off+sp.n] }
func (s *epSide) syncMemory()           { s.ep.QP().Status() }
func (s *epSide) sent(t testing.TB) int { return int(counter(t, s.dev, "sent_pkts")) }

func counter(t testing.TB, d *nic.Device, name string) uint64 {
	t.Helper()
	v, ok := d.Counter(name)
	if !ok {
		t.Fatalf("no counter %s", name)
	}
	return v
}

type span struct{ off, n int }

// fill writes a pattern that differs with seed into b.
func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
}

// waitEP returns the next completion of ep, failing the test after 10 s.
func waitEP(t testing.TB, ep *fabric.Endpoint) fabric.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c [1]fabric.Completion
	if _, err := ep.Wait(ctx, c[:]); err != nil {
		t.Fatalf("waiting for a completion: %v", err)
	}
	return c[0]
}

// expectIdle fails the test if ep has a completion waiting.
func expectIdle(t testing.TB, ep *fabric.Endpoint) {
	t.Helper()
	var c [4]fabric.Completion
	n, err := ep.Poll(c[:])
	if err != nil || n != 0 {
		t.Fatalf("unexpected completions %+v (err %v)", c[:n], err)
	}
}

// checkCompletion compares a completion's context, flags, length and error.
func checkCompletion(t testing.TB, c fabric.Completion, ctx any, flags fabric.Flags, n int, wantErr error) {
	t.Helper()
	if c.Context != ctx || c.Flags != flags || c.Len != n || !errors.Is(c.Err, wantErr) {
		t.Fatalf("completion {ctx %v flags %v len %d err %v}, want {ctx %v flags %v len %d err %v}",
			c.Context, c.Flags, c.Len, c.Err, ctx, flags, n, wantErr)
	}
}

func concat(s *epSide, spans []span) []byte {
	var out []byte
	for _, sp := range spans {
		out = append(out, s.buf(sp)...)
	}
	return out
}

func TestEndpointRMA(t *testing.T) {
	a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
	cases := []struct {
		name   string
		call   string // which Endpoint method posts it
		local  []span // in a's region
		remote []span // in b's region
	}{
		{"write", "write", []span{{0, 64}}, []span{{128, 64}}},
		{"write of two packets", "write", []span{{1000, 5000}}, []span{{8192, 5000}}},
		{"write of 64 KiB", "write", []span{{0, 65536}}, []span{{100000, 65536}}},
		{"write of zero bytes", "write", []span{{0, 0}}, []span{{0, 0}}},
		{"write with the region looked up", "write-nodesc", []span{{70000, 300}}, []span{{200, 300}}},
		{"writev of three buffers", "writev", []span{{0, 100}, {5000, 3000}, {20000, 1}}, []span{{40000, 3101}}},
		{"writemsg splitting buffers across segments", "writemsg",
			[]span{{0, 1000}, {3000, 5000}}, []span{{60000, 700}, {70000, 4000}, {80000, 1300}}},
		{"writemsg injected", "writemsg-inject", []span{{10, 50}, {90, 100}}, []span{{500, 120}, {700, 30}}},
		{"read", "read", []span{{100000, 64}}, []span{{0, 64}}},
		{"read of three packets", "read", []span{{100000, 9000}}, []span{{0, 9000}}},
		{"read with the region looked up", "read-nodesc", []span{{300000, 5000}}, []span{{0, 5000}}},
		{"readv of three buffers", "readv", []span{{200000, 10}, {210000, 8000}, {230000, 2000}}, []span{{300000, 10010}}},
		{"readmsg of two segments", "readmsg", []span{{400000, 4000}, {420000, 100}}, []span{{500000, 2000}, {600000, 2100}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			read := tc.call == "read" || tc.call == "read-nodesc" || tc.call == "readv" || tc.call == "readmsg"
			src, dst, srcSpans, dstSpans := a, b, tc.local, tc.remote
			if read {
				src, dst, srcSpans, dstSpans = b, a, tc.remote, tc.local
			}
			b.syncMemory()
			for j, sp := range srcSpans {
				fill(src.buf(sp), i*10+j+1)
			}
			for _, sp := range dstSpans {
				clear(dst.buf(sp))
			}
			b.syncMemory()

			iov := make([][]byte, len(tc.local))
			desc := make([]*nic.MR, len(tc.local))
			for j, sp := range tc.local {
				iov[j], desc[j] = a.buf(sp), a.mr
			}
			rma := make([]fabric.RMAIOV, len(tc.remote))
			for j, sp := range tc.remote {
				rma[j] = fabric.RMAIOV{Addr: b.addr(sp.off), Len: uint64(sp.n), Key: b.key()}
			}
			msg := &fabric.RMAMsg{IOV: iov, Desc: desc, RMAIOV: rma, Context: tc.name}
			r := rma[0]
			var err error
			switch tc.call {
			case "write":
				err = a.ep.Write(iov[0], a.mr, r.Addr, r.Key, tc.name)
			case "write-nodesc":
				err = a.ep.Write(iov[0], nil, r.Addr, r.Key, tc.name)
			case "writev":
				err = a.ep.Writev(iov, desc, r.Addr, r.Key, tc.name)
			case "writemsg":
				err = a.ep.WriteMsg(msg, 0)
			case "writemsg-inject":
				msg.Desc = nil
				err = a.ep.WriteMsg(msg, fabric.FIInject)
			case "read":
				err = a.ep.Read(iov[0], a.mr, r.Addr, r.Key, tc.name)
			case "read-nodesc":
				err = a.ep.Read(iov[0], nil, r.Addr, r.Key, tc.name)
			case "readv":
				err = a.ep.Readv(iov, desc, r.Addr, r.Key, tc.name)
			case "readmsg":
				err = a.ep.ReadMsg(msg, 0)
			default:
				t.Fatalf("unknown call %q", tc.call)
			}
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, sp := range tc.local {
				total += sp.n
			}
			flags := fabric.FIRMA | fabric.FIWrite
			if read {
				flags = fabric.FIRMA | fabric.FIRead
			}
			checkCompletion(t, waitEP(t, a.ep), tc.name, flags, total, nil)
			expectIdle(t, a.ep)
			b.syncMemory()
			if got, want := concat(dst, dstSpans), concat(src, srcSpans); !bytes.Equal(got, want) {
				t.Fatalf("destination differs from the source (%d bytes)", total)
			}
		})
	}
}

func TestEndpointCompletionFlag(t *testing.T) {
	// Each case posts an 8-byte operation with context "op", then a marker
	// READ that always completes: completions come in order, so the first
	// one shows whether the operation produced its own.
	write := func(flags fabric.Flags) func(a, b *epSide) error {
		return func(a, b *epSide) error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 8})}, Desc: []*nic.MR{a.mr},
				RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 8, Key: b.key()}}, Context: "op"}, flags)
		}
	}
	read := func(flags fabric.Flags) func(a, b *epSide) error {
		return func(a, b *epSide) error {
			return a.ep.ReadMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 8})}, Desc: []*nic.MR{a.mr},
				RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 8, Key: b.key()}}, Context: "op"}, flags)
		}
	}
	cases := []struct {
		name      string
		selective bool
		read      bool
		post      func(a, b *epSide) error
		want      bool
	}{
		{"write completes by default", false, false, func(a, b *epSide) error {
			return a.ep.Write(a.buf(span{0, 8}), a.mr, b.addr(0), b.key(), "op")
		}, true},
		{"read completes by default", false, true, func(a, b *epSide) error {
			return a.ep.Read(a.buf(span{0, 8}), a.mr, b.addr(0), b.key(), "op")
		}, true},
		{"writemsg without COMPLETION completes by default", false, false, write(0), true},
		{"writemsg INJECT completes by default", false, false, write(fabric.FIInject), true},
		{"inject_write never completes", false, false, func(a, b *epSide) error {
			return a.ep.InjectWrite(a.buf(span{0, 8}), b.addr(0), b.key())
		}, false},
		{"selective: write does not complete", true, false, func(a, b *epSide) error {
			return a.ep.Write(a.buf(span{0, 8}), a.mr, b.addr(0), b.key(), "op")
		}, false},
		{"selective: writemsg without COMPLETION", true, false, write(0), false},
		{"selective: writemsg with COMPLETION", true, false, write(fabric.FICompletion), true},
		{"selective: readmsg without COMPLETION", true, true, read(0), false},
		{"selective: readmsg with COMPLETION", true, true, read(fabric.FICompletion), true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{SelectiveCompletion: tc.selective}, fabric.EndpointConfig{})
			fill(a.buf(span{0, 8}), 2*i+1)
			fill(b.buf(span{0, 8}), 2*i+2)
			b.syncMemory()
			if err := tc.post(a, b); err != nil {
				t.Fatal(err)
			}
			marker := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{100, 8})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(100), Len: 8, Key: b.key()}}, Context: "marker"}
			if err := a.ep.ReadMsg(marker, fabric.FICompletion); err != nil {
				t.Fatal(err)
			}
			flags := fabric.FIRMA | fabric.FIWrite
			if tc.read {
				flags = fabric.FIRMA | fabric.FIRead
			}
			if tc.want {
				checkCompletion(t, waitEP(t, a.ep), "op", flags, 8, nil)
			}
			checkCompletion(t, waitEP(t, a.ep), "marker", fabric.FIRMA|fabric.FIRead, 8, nil)
			expectIdle(t, a.ep)
			b.syncMemory()
			if !bytes.Equal(a.buf(span{0, 8}), b.buf(span{0, 8})) {
				t.Error("the operation did not move its data")
			}
		})
	}
}

func TestEndpointInjectBufferReuse(t *testing.T) {
	cases := []struct {
		name string
		n    int // bytes; the endpoint's inject_size is 64
		post func(ep *fabric.Endpoint, buf []byte, b *epSide) error
	}{
		{"inject_write", 40, func(ep *fabric.Endpoint, buf []byte, b *epSide) error {
			return ep.InjectWrite(buf, b.addr(0), b.key())
		}},
		{"inject_write of inject_size bytes", 64, func(ep *fabric.Endpoint, buf []byte, b *epSide) error {
			return ep.InjectWrite(buf, b.addr(0), b.key())
		}},
		{"writemsg INJECT of two segments", 50, func(ep *fabric.Endpoint, buf []byte, b *epSide) error {
			return ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{buf[:20], buf[20:]},
				RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 30, Key: b.key()}, {Addr: b.addr(30), Len: 20, Key: b.key()}}},
				fabric.FIInject)
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{InjectSize: 64, SelectiveCompletion: true}, fabric.EndpointConfig{})
			// An ordinary heap buffer: injected data needs no registration.
			buf := make([]byte, tc.n)
			fill(buf, i+1)
			want := slices.Clone(buf)
			if err := tc.post(a.ep, buf, b); err != nil {
				t.Fatal(err)
			}
			fill(buf, i+100) // reused at once
			// The QP executes in order: once a later READ completes, the
			// write has landed.
			if err := a.ep.ReadMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 8})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 8, Key: b.key()}}, Context: "marker"}, fabric.FICompletion); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), "marker", fabric.FIRMA|fabric.FIRead, 8, nil)
			b.syncMemory()
			if got := b.buf(span{0, tc.n}); !bytes.Equal(got, want) {
				t.Fatalf("target holds % x, want the data at the time of the call % x", got[:8], want[:8])
			}
		})
	}
}

func TestEndpointMoreDefersDoorbell(t *testing.T) {
	cases := []struct {
		name string
		last func(a, b *epSide) error // the call without MORE
		pkts int                      // packets it adds
		ok   bool
	}{
		{"writemsg without MORE", func(a, b *epSide) error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{4000, 16})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(4000), Len: 16, Key: b.key()}}, Context: "last"}, 0)
		}, 1, true},
		{"read without MORE", func(a, b *epSide) error {
			return a.ep.Read(a.buf(span{5000, 16}), a.mr, b.addr(5000), b.key(), "last")
		}, 1, true},
		{"a failing call without MORE", func(a, b *epSide) error {
			return a.ep.Write(a.buf(span{4000, 16}), a.mr, b.addr(4000), 1<<40, "last")
		}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
			fill(a.buf(span{0, 3000}), 1)
			fill(b.buf(span{10000, 100}), 2)
			b.syncMemory()
			deferred := 0
			for i := range 3 {
				msg := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{i * 1000, 1000})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(i * 1000), Len: 1000, Key: b.key()}}, Context: i}
				if err := a.ep.WriteMsg(msg, fabric.FIMore); err != nil {
					t.Fatal(err)
				}
				deferred++
				if n := a.sent(t); n != 0 {
					t.Fatalf("after %d writes with MORE, %d packets were sent", deferred, n)
				}
			}
			msg := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{20000, 100})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(10000), Len: 100, Key: b.key()}}, Context: 3}
			if err := a.ep.ReadMsg(msg, fabric.FIMore); err != nil {
				t.Fatal(err)
			}
			deferred++
			if n := a.sent(t); n != 0 {
				t.Fatalf("after a read with MORE, %d packets were sent", n)
			}
			err := tc.last(a, b)
			if tc.ok != (err == nil) {
				t.Fatalf("last call: %v", err)
			}
			// The sends are synchronous: the doorbell's packets are counted
			// by the time the call returns.
			if n := a.sent(t); n < deferred+tc.pkts {
				t.Fatalf("after the call without MORE, %d packets sent, want at least %d", n, deferred+tc.pkts)
			}
			for i := range 3 {
				checkCompletion(t, waitEP(t, a.ep), i, fabric.FIRMA|fabric.FIWrite, 1000, nil)
			}
			checkCompletion(t, waitEP(t, a.ep), 3, fabric.FIRMA|fabric.FIRead, 100, nil)
			if tc.ok {
				if c := waitEP(t, a.ep); c.Context != "last" || c.Err != nil {
					t.Fatalf("last call's completion %+v", c)
				}
			}
			b.syncMemory()
			if !bytes.Equal(b.buf(span{0, 3000}), a.buf(span{0, 3000})) || !bytes.Equal(a.buf(span{20000, 100}), b.buf(span{10000, 100})) {
				t.Error("deferred operations did not move their data")
			}
		})
	}
}

// opTrace records the opcodes of the packets devices send, in order.
type opTrace struct {
	mu  sync.Mutex
	ops []wire.OpCode
}

func (r *opTrace) record(p *nic.TracePacket) {
	if p.Dir != nic.Sent {
		return
	}
	r.mu.Lock()
	r.ops = append(r.ops, wire.BTH(p.Data).OpCode())
	r.mu.Unlock()
}

// first returns the index of the first recorded opcode that satisfies is.
func (r *opTrace) first(is func(wire.OpCode) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.IndexFunc(r.ops, is)
}

func TestEndpointFence(t *testing.T) {
	// A READ brings remote data into a local buffer, then a WRITE sends
	// that buffer on. Both are posted before any packet leaves (MORE), so
	// only a FENCE keeps the WRITE from taking the buffer before the READ
	// has filled it.
	cases := []struct {
		name  string
		fence bool
	}{
		{"fenced write waits for the read", true},
		{"unfenced write goes at once", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr opTrace
			a, b := endpointPair(t, nic.Config{Trace: tr.record}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
			fill(b.buf(span{0, 512}), 1)  // X: what the READ fetches
			fill(a.buf(span{0, 512}), 50) // L: the local buffer before it
			b.syncMemory()
			rd := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 512})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 512, Key: b.key()}}, Context: "read"}
			if err := a.ep.ReadMsg(rd, fabric.FIMore); err != nil {
				t.Fatal(err)
			}
			flags := fabric.Flags(0)
			if tc.fence {
				flags = fabric.FIFence
			}
			old := slices.Clone(a.buf(span{0, 512}))
			wr := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 512})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(4096), Len: 512, Key: b.key()}}, Context: "write"}
			if err := a.ep.WriteMsg(wr, flags); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), "read", fabric.FIRMA|fabric.FIRead, 512, nil)
			checkCompletion(t, waitEP(t, a.ep), "write", fabric.FIRMA|fabric.FIWrite, 512, nil)

			req := tr.first(wire.OpCode.IsReadRequest)
			resp := tr.first(wire.OpCode.IsReadResponse)
			write := tr.first(wire.OpCode.IsWrite)
			if req < 0 || resp < 0 || write < 0 {
				t.Fatalf("trace lacks a packet: read request %d, response %d, write %d", req, resp, write)
			}
			if tc.fence != (resp < write) {
				t.Fatalf("fence %v: read request at %d, response at %d, write at %d", tc.fence, req, resp, write)
			}
			b.syncMemory()
			if tc.fence && !bytes.Equal(b.buf(span{4096, 512}), b.buf(span{0, 512})) {
				t.Error("the fenced write did not carry the data the read brought")
			}
			if !tc.fence && !bytes.Equal(b.buf(span{4096, 512}), old) {
				t.Error("the unfenced write did not carry the buffer as it was before the read")
			}
		})
	}
}

func TestEndpointRemoteCQData(t *testing.T) {
	cases := []struct {
		name    string
		post    func(a, b *epSide) error
		remote  []span // what the write fills in b
		data    uint64
		wantLen int // the target completion's length: the bytes of the WRITE that carried the data
	}{
		{"writedata", func(a, b *epSide) error {
			return a.ep.WriteData(a.buf(span{0, 100}), a.mr, 0xfeedbeef, b.addr(0), b.key(), "w")
		}, []span{{0, 100}}, 0xfeedbeef, 100},
		{"writedata of zero bytes", func(a, b *epSide) error {
			return a.ep.WriteData(nil, nil, 7, b.addr(0), b.key(), "w")
		}, nil, 7, 0},
		{"writemsg REMOTE_CQ_DATA over two segments", func(a, b *epSide) error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 8000})}, Desc: []*nic.MR{a.mr},
				RMAIOV:  []fabric.RMAIOV{{Addr: b.addr(0), Len: 3000, Key: b.key()}, {Addr: b.addr(10000), Len: 5000, Key: b.key()}},
				Context: "w", Data: math.MaxUint32}, fabric.FIRemoteCQData)
		}, []span{{0, 3000}, {10000, 5000}}, math.MaxUint32, 5000},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
			fill(a.buf(span{0, 8000}), i+1)
			for _, ctx := range []string{"slot 1", "slot 2"} {
				if err := b.ep.Recv(nil, nil, ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.post(a, b); err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, sp := range tc.remote {
				total += sp.n
			}
			checkCompletion(t, waitEP(t, a.ep), "w", fabric.FIRMA|fabric.FIWrite, total, nil)
			c := waitEP(t, b.ep)
			checkCompletion(t, c, "slot 1", fabric.FIRMA|fabric.FIRemoteWrite|fabric.FIRemoteCQData, tc.wantLen, nil)
			if c.Data != tc.data {
				t.Errorf("remote CQ data %#x, want %#x", c.Data, tc.data)
			}
			if got := concat(b, tc.remote); !bytes.Equal(got, a.buf(span{0, total})) {
				t.Error("target memory differs from the written data")
			}
			// The message consumed exactly one receive: the next write's
			// data arrives in the second.
			if err := a.ep.WriteData(nil, nil, 99, b.addr(0), b.key(), "w2"); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), "w2", fabric.FIRMA|fabric.FIWrite, 0, nil)
			if c := waitEP(t, b.ep); c.Context != "slot 2" || c.Data != 99 {
				t.Fatalf("second target completion %+v, want slot 2 with data 99", c)
			}
			expectIdle(t, b.ep)
		})
	}
}

func TestEndpointRemoteCQDataWaitsForRecv(t *testing.T) {
	cases := []struct {
		name string
		n    int
	}{
		{"zero bytes", 0},
		// The responder resolves the rkey of a WRITE ONLY with immediate
		// before it finds no receive WR; the RNR NAK must give that back.
		{"32 bytes", 32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
			fill(a.buf(span{0, tc.n}), 4)
			if err := a.ep.WriteData(a.buf(span{0, tc.n}), a.mr, 5, b.addr(0), b.key(), "w"); err != nil {
				t.Fatal(err)
			}
			// No receive is posted: the target answers RNR NAK and the
			// writer retries (rnr_retry 7: forever) until one is.
			deadline := time.Now().Add(10 * time.Second)
			for counter(t, a.dev, "rcvd_rnr_err") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no RNR NAK for a write with immediate without a receive")
				}
				time.Sleep(100 * time.Microsecond)
			}
			expectIdle(t, a.ep)
			if err := b.ep.Recv(nil, nil, "late slot"); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), "w", fabric.FIRMA|fabric.FIWrite, tc.n, nil)
			c := waitEP(t, b.ep)
			checkCompletion(t, c, "late slot", fabric.FIRMA|fabric.FIRemoteWrite|fabric.FIRemoteCQData, tc.n, nil)
			if c.Data != 5 || !bytes.Equal(b.buf(span{0, tc.n}), a.buf(span{0, tc.n})) {
				t.Errorf("remote CQ data %d (want 5) or target memory differs", c.Data)
			}
		})
	}
}

func TestEndpointRecvMessage(t *testing.T) {
	// A verbs QP sends to an endpoint: the receive completes as a message.
	nictest.CheckLeaks(t)
	a := openEnd(t, nic.Config{})
	b := openEndpoint(t, nic.Config{}, fabric.EndpointConfig{})
	if err := a.qp.Connect(b.dev.Addr(), b.ep.QP().Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.QP().Connect(a.dev.Addr(), a.qp.Num(), nic.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.Recv(b.buf(span{0, 4096}), b.mr, "rx"); err != nil {
		t.Fatal(err)
	}
	fill(a.mr.Bytes()[:3000], 3)
	if err := a.qp.PostSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRSendImm, Imm: 0xabc, SGL: []verbs.SGE{a.mr.SGE(0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	c := waitEP(t, b.ep)
	checkCompletion(t, c, "rx", fabric.FIMsg|fabric.FIRecv|fabric.FIRemoteCQData, 3000, nil)
	if c.Data != 0xabc || !bytes.Equal(b.buf(span{0, 3000}), a.mr.Bytes()[:3000]) {
		t.Fatalf("received data %#x or bytes differ", c.Data)
	}
	// Receives still posted are flushed when the endpoint closes.
	if err := b.ep.Recv(nil, nil, "flushed"); err != nil {
		t.Fatal(err)
	}
	if err := b.ep.Close(); err != nil {
		t.Fatal(err)
	}
	checkCompletion(t, waitEP(t, b.ep), "flushed", fabric.FIMsg|fabric.FIRecv, 0, fabric.StatusError(verbs.WRFlushErr))
}

func TestEndpointAgain(t *testing.T) {
	t.Run("send queue full until completions are reaped", func(t *testing.T) {
		a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{TxSize: 4}, fabric.EndpointConfig{})
		msg := func(i int) *fabric.RMAMsg {
			return &fabric.RMAMsg{IOV: [][]byte{a.buf(span{i * 8, 8})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(i * 8), Len: 8, Key: b.key()}}, Context: i}
		}
		for i := range 4 {
			if err := a.ep.WriteMsg(msg(i), fabric.FIMore); err != nil {
				t.Fatal(err)
			}
		}
		err := a.ep.WriteMsg(msg(4), fabric.FIMore)
		if !errors.Is(err, fabric.ErrAgain) {
			t.Fatalf("fifth write on a tx size of 4: %v, want ErrAgain", err)
		}
		// The refused call rang the doorbell, so the queued writes
		// complete and make room.
		for i := range 4 {
			checkCompletion(t, waitEP(t, a.ep), i, fabric.FIRMA|fabric.FIWrite, 8, nil)
		}
		if err := a.ep.WriteMsg(msg(4), 0); err != nil {
			t.Fatalf("retry after reaping: %v", err)
		}
		checkCompletion(t, waitEP(t, a.ep), 4, fabric.FIRMA|fabric.FIWrite, 8, nil)
	})
	t.Run("unsignaled writes free their slots without completions", func(t *testing.T) {
		a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{TxSize: 4, SelectiveCompletion: true}, fabric.EndpointConfig{})
		var word [8]byte
		for i := range 64 {
			word[0] = byte(i)
			retryAgain(t, func() error { return a.ep.InjectWrite(word[:], b.addr(0), b.key()) })
		}
		marker := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 8})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(0), Len: 8, Key: b.key()}}, Context: "marker"}
		retryAgain(t, func() error { return a.ep.ReadMsg(marker, fabric.FICompletion) })
		checkCompletion(t, waitEP(t, a.ep), "marker", fabric.FIRMA|fabric.FIRead, 8, nil)
		expectIdle(t, a.ep)
		if got := a.buf(span{0, 1})[0]; got != 63 {
			t.Fatalf("target word %d after 64 writes, want 63", got)
		}
	})
	t.Run("receive queue full", func(t *testing.T) {
		a, _ := endpointPair(t, nic.Config{}, fabric.EndpointConfig{RxSize: 2}, fabric.EndpointConfig{})
		for i := range 2 {
			if err := a.ep.Recv(nil, nil, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.ep.Recv(nil, nil, 2); !errors.Is(err, fabric.ErrAgain) {
			t.Fatalf("third receive on an rx size of 2: %v, want ErrAgain", err)
		}
	})
}

// retryAgain calls post until it stops failing with ErrAgain, as a
// program without completions to reap does: the operations in flight
// finish on the device's goroutines and free their slots.
func retryAgain(t testing.TB, post func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := post()
		if err == nil {
			return
		}
		if !errors.Is(err, fabric.ErrAgain) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
}

func TestEndpointContextsComeBackInOrder(t *testing.T) {
	a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{TxSize: 8}, fabric.EndpointConfig{})
	type token struct{ n int }
	// More operations than the table has slots: each completion frees one.
	var want []any
	for i := range 40 {
		var ctx any
		switch i % 4 {
		case 0:
			ctx = &token{i}
		case 1:
			ctx = "op " + string(rune('a'+i%26))
		case 2:
			ctx = i
		case 3:
			ctx = nil
		}
		want = append(want, ctx)
		for {
			err := a.ep.Write(a.buf(span{i * 16, 16}), a.mr, b.addr(i*16), b.key(), ctx)
			if err == nil {
				break
			}
			if !errors.Is(err, fabric.ErrAgain) {
				t.Fatal(err)
			}
			c := waitEP(t, a.ep)
			if c.Context != want[0] || c.Err != nil {
				t.Fatalf("completion context %v (err %v), want %v", c.Context, c.Err, want[0])
			}
			want = want[1:]
		}
	}
	for len(want) > 0 {
		c := waitEP(t, a.ep)
		if c.Context != want[0] || c.Err != nil {
			t.Fatalf("completion context %v (err %v), want %v", c.Context, c.Err, want[0])
		}
		want = want[1:]
	}
	expectIdle(t, a.ep)
}

func TestEndpointErrorsComplete(t *testing.T) {
	// Each case's operation fails at the QP; a marker READ posted after it
	// is flushed. Exactly those two completions must come.
	cases := []struct {
		name      string
		selective bool
		post      func(a, b *epSide) error
		ctx       any
		flags     fabric.Flags
		status    verbs.WCStatus
	}{
		{"write with a bad rkey", false, func(a, b *epSide) error {
			return a.ep.Write(a.buf(span{0, 8}), a.mr, b.addr(0), b.key()+0x100, "bad")
		}, "bad", fabric.FIRMA | fabric.FIWrite, verbs.RemAccessErr},
		{"read beyond the remote region", false, func(a, b *epSide) error {
			return a.ep.Read(a.buf(span{0, 64}), a.mr, b.addr(1<<20-32), b.key(), "beyond")
		}, "beyond", fabric.FIRMA | fabric.FIRead, verbs.RemAccessErr},
		{"read into a region without local write", false, func(a, b *epSide) error {
			ro, err := a.pd.RegMR(make([]byte, 64), 0)
			if err != nil {
				return err
			}
			return a.ep.Read(ro.Bytes(), ro, b.addr(0), b.key(), "ro")
		}, "ro", fabric.FIRMA | fabric.FIRead, verbs.LocProtErr},
		{"inject_write fails with a nil context", false, func(a, b *epSide) error {
			return a.ep.InjectWrite(make([]byte, 8), b.addr(0), b.key()+0x100)
		}, nil, fabric.FIRMA | fabric.FIWrite, verbs.RemAccessErr},
		{"selective: a failure completes without COMPLETION", true, func(a, b *epSide) error {
			return a.ep.Write(a.buf(span{0, 8}), a.mr, b.addr(0), b.key()+0x100, "quiet")
		}, "quiet", fabric.FIRMA | fabric.FIWrite, verbs.RemAccessErr},
		{"writemsg whose second segment fails completes once", false, func(a, b *epSide) error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{a.buf(span{0, 300})}, Desc: []*nic.MR{a.mr}, RMAIOV: []fabric.RMAIOV{
				{Addr: b.addr(0), Len: 100, Key: b.key()},
				{Addr: b.addr(100), Len: 100, Key: b.key() + 0x100},
				{Addr: b.addr(200), Len: 100, Key: b.key()},
			}, Context: "msg"}, 0)
		}, "msg", fabric.FIRMA | fabric.FIWrite, verbs.RemAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{SelectiveCompletion: tc.selective}, fabric.EndpointConfig{})
			if err := tc.post(a, b); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), tc.ctx, tc.flags, 0, fabric.StatusError(tc.status))
			marker := &fabric.RMAMsg{IOV: [][]byte{a.buf(span{100, 8})}, RMAIOV: []fabric.RMAIOV{{Addr: b.addr(100), Len: 8, Key: b.key()}}, Context: "marker"}
			if err := a.ep.ReadMsg(marker, fabric.FICompletion); err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, waitEP(t, a.ep), "marker", fabric.FIRMA|fabric.FIRead, 0, fabric.StatusError(verbs.WRFlushErr))
			expectIdle(t, a.ep)
		})
	}
}

func TestEndpointInvalidArguments(t *testing.T) {
	a, b := endpointPair(t, nic.Config{}, fabric.EndpointConfig{IOVLimit: 2, RMAIOVLimit: 2, InjectSize: 32}, fabric.EndpointConfig{})
	other, err := a.pd.RegMR(make([]byte, 4096), mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	pd2, err := a.dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pd2.RegMR(make([]byte, 4096), mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	buf := a.buf(span{0, 64})
	seg := func(n int) fabric.RMAIOV { return fabric.RMAIOV{Addr: b.addr(0), Len: uint64(n), Key: b.key()} }
	cases := []struct {
		name string
		call func() error
	}{
		{"readmsg without a message", func() error { return a.ep.ReadMsg(nil, 0) }},
		{"writemsg without a message", func() error { return a.ep.WriteMsg(nil, 0) }},
		{"more buffers than iov_limit", func() error {
			return a.ep.Writev([][]byte{buf[:1], buf[1:2], buf[2:3]}, nil, b.addr(0), b.key(), nil)
		}},
		{"more segments than rma_iov_limit", func() error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{buf[:3]}, RMAIOV: []fabric.RMAIOV{seg(1), seg(1), seg(1)}}, 0)
		}},
		{"no remote segment", func() error { return a.ep.ReadMsg(&fabric.RMAMsg{IOV: [][]byte{buf}}, 0) }},
		{"lengths differ", func() error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{buf}, RMAIOV: []fabric.RMAIOV{seg(63)}}, 0)
		}},
		{"descriptor count differs", func() error {
			return a.ep.Readv([][]byte{buf[:8], buf[8:16]}, []*nic.MR{a.mr}, b.addr(0), b.key(), nil)
		}},
		{"descriptor of another buffer", func() error { return a.ep.Write(buf, other, b.addr(0), b.key(), nil) }},
		{"descriptor of another PD", func() error { return a.ep.Write(foreign.Bytes(), foreign, b.addr(0), b.key(), nil) }},
		{"unregistered buffer", func() error { return a.ep.Read(make([]byte, 64), nil, b.addr(0), b.key(), nil) }},
		{"key wider than 32 bits", func() error { return a.ep.Write(buf, a.mr, b.addr(0), 1<<32, nil) }},
		{"remote CQ data wider than 32 bits", func() error { return a.ep.WriteData(buf, a.mr, 1<<32, b.addr(0), b.key(), nil) }},
		{"inject beyond inject_size", func() error { return a.ep.InjectWrite(make([]byte, 33), b.addr(0), b.key()) }},
		{"readmsg with INJECT", func() error {
			return a.ep.ReadMsg(&fabric.RMAMsg{IOV: [][]byte{buf}, RMAIOV: []fabric.RMAIOV{seg(64)}}, fabric.FIInject)
		}},
		{"readmsg with REMOTE_CQ_DATA", func() error {
			return a.ep.ReadMsg(&fabric.RMAMsg{IOV: [][]byte{buf}, RMAIOV: []fabric.RMAIOV{seg(64)}}, fabric.FIRemoteCQData)
		}},
		{"unknown flag", func() error {
			return a.ep.WriteMsg(&fabric.RMAMsg{IOV: [][]byte{buf}, RMAIOV: []fabric.RMAIOV{seg(64)}}, 1<<62)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, fabric.ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
	if n := a.sent(t); n != 0 {
		t.Errorf("rejected calls sent %d packets", n)
	}
	expectIdle(t, a.ep)
}

func TestNewEndpointConfig(t *testing.T) {
	nictest.CheckLeaks(t)
	dev, err := nic.Open(nic.Config{Addr: loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  fabric.EndpointConfig
		want fabric.EndpointConfig // zero when the config is invalid
	}{
		{"defaults", fabric.EndpointConfig{}, fabric.EndpointConfig{TxSize: 256, RxSize: 256, IOVLimit: 4, RMAIOVLimit: 4, InjectSize: 256}},
		{"given sizes", fabric.EndpointConfig{TxSize: 8, RxSize: 2, IOVLimit: 32, RMAIOVLimit: 8, InjectSize: 4096, SelectiveCompletion: true},
			fabric.EndpointConfig{TxSize: 8, RxSize: 2, IOVLimit: 32, RMAIOVLimit: 8, InjectSize: 4096, SelectiveCompletion: true}},
		{"negative tx size", fabric.EndpointConfig{TxSize: -1}, fabric.EndpointConfig{}},
		{"rma_iov_limit beyond tx size", fabric.EndpointConfig{TxSize: 2, RMAIOVLimit: 3}, fabric.EndpointConfig{}},
		{"iov_limit beyond max_send_sge", fabric.EndpointConfig{IOVLimit: 33}, fabric.EndpointConfig{}},
		{"inject_size beyond max_inline_data", fabric.EndpointConfig{InjectSize: 4097}, fabric.EndpointConfig{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep, err := fabric.NewEndpoint(pd, tc.cfg)
			if tc.want == (fabric.EndpointConfig{}) {
				if !errors.Is(err, fabric.ErrInvalid) {
					t.Fatalf("got %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close()
			if got := ep.Config(); got != tc.want {
				t.Fatalf("config %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFIFlagsString(t *testing.T) {
	cases := []struct {
		f    fabric.Flags
		want string
	}{
		{0, "0"},
		{fabric.FIRMA | fabric.FIWrite, "RMA|WRITE"},
		{fabric.FIRMA | fabric.FIRemoteWrite | fabric.FIRemoteCQData, "RMA|REMOTE_WRITE|REMOTE_CQ_DATA"},
		{fabric.FICompletion | fabric.FIMore | fabric.FIFence | fabric.FIInject, "MORE|FENCE|COMPLETION|INJECT"},
		{fabric.FIMsg | 1<<62, "MSG|0x4000000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.f.String(); got != tc.want {
				t.Fatalf("%#x: %q, want %q", uint64(tc.f), got, tc.want)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	var err error = fabric.StatusError(verbs.RemAccessErr)
	if !errors.Is(err, fabric.StatusError(verbs.RemAccessErr)) || errors.Is(err, fabric.StatusError(verbs.WRFlushErr)) {
		t.Fatal("errors.Is does not tell statuses apart")
	}
	var se fabric.StatusError
	if !errors.As(err, &se) || se.Status() != verbs.RemAccessErr {
		t.Fatalf("errors.As gives %v", se)
	}
	if want := "operation failed: REM_ACCESS_ERR (remote access error)"; err.Error() != want {
		t.Fatalf("%q, want %q", err.Error(), want)
	}
}

func BenchmarkEndpointWrite8(b *testing.B) {
	x, y := endpointPair(b, nic.Config{}, fabric.EndpointConfig{}, fabric.EndpointConfig{})
	ctx := context.Background()
	var c [1]fabric.Completion
	buf := x.buf(span{0, 8})
	b.ReportAllocs()
	for b.Loop() {
		if err := x.ep.Write(buf, x.mr, y.addr(0), y.key(), nil); err != nil {
			b.Fatal(err)
		}
		if _, err := x.ep.Wait(ctx, c[:]); err != nil || c[0].Err != nil {
			b.Fatal(err, c[0].Err)
		}
	}
}
