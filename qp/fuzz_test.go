package qp_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// FuzzReceive: whatever packets reach two connected QPs (RC, UC or UD,
// as typ chooses) with work in flight, in any order, duplicated, forged or
// mangled, neither QP panics, nor sends forever, nor completes a work
// request it was not given, or one twice. The work is what the transport
// carries: a WRITE, a READ, a FETCH_ADD and a SEND one way (RC), a WRITE
// and a SEND (UC), a SEND (UD), and two receives the other way.
//
// data is a list of packets, each a byte choosing the QP that receives it
// (its low bit), a big-endian 16-bit length and the packet from its BTH to
// its ICRC, which is not checked: a forged packet gets past it on the
// wire. Between packets and after the last one the two QPs run as on a
// link, with their timers, for a bounded simulated time. The seeds are the
// packets of the same exchange left alone.
func FuzzReceive(f *testing.F) {
	for typ := range fuzzTypes {
		for _, seed := range receiveSeeds(f, uint8(typ)) {
			f.Add(uint8(typ), seed)
		}
	}
	f.Fuzz(func(t *testing.T, typ uint8, data []byte) {
		typ %= uint8(len(fuzzTypes))
		s, a, b := pairOf(t, fuzzTypes[typ], defaultAttr())
		s.tracing = false
		sends := postReceiveWork(t, typ, a, b)
		for len(data) >= 3 {
			to := a
			if data[0]&1 == 1 {
				to = b
			}
			n := min(int(binary.BigEndian.Uint16(data[1:3])), len(data)-3)
			raw := data[3 : 3+n]
			data = data[3+n:]
			var p wire.Packet
			if p.Decode(raw) != nil {
				continue
			}
			env := wire.Envelope{Src: s.peer(to).addr, Dst: to.addr}
			to.qp.Receive(&p, &env, s.now)
			runFor(t, s, 100*time.Microsecond)
		}
		runFor(t, s, time.Second)
		checkCompletions(t, a, sends)
		checkCompletions(t, b, []uint64{101, 102})
	})
}

// fuzzTypes are the transports FuzzReceive's typ chooses from.
var fuzzTypes = []verbs.Type{verbs.RC, verbs.UC, verbs.UD}

// postReceiveWork gives a and b the work FuzzReceive runs with on
// transport fuzzTypes[typ], and returns the IDs of a's work requests.
func postReceiveWork(t testing.TB, typ uint8, a, b *host) []uint64 {
	rkey := b.region.RKey()
	var ids []uint64
	postSend := func(wr *verbs.SendWR) {
		post(t, a, wr)
		ids = append(ids, wr.ID)
	}
	switch fuzzTypes[typ] {
	case verbs.RC:
		postSend(&verbs.SendWR{ID: 2, Opcode: verbs.WRRead, Flags: verbs.Signaled, SGL: sgl(a.sge(4096, 1500)), RemoteAddr: b.va(4096), RKey: rkey})
		postSend(&verbs.SendWR{ID: 3, Opcode: verbs.WRFetchAdd, Flags: verbs.Signaled, SGL: sgl(a.sge(8192, 8)), RemoteAddr: b.va(8192), RKey: rkey, CompareAdd: 1})
		fallthrough
	case verbs.UC:
		postSend(&verbs.SendWR{ID: 1, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 1500)), RemoteAddr: b.va(0), RKey: rkey})
		postSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(12288, 100))})
	case verbs.UD:
		postSend(&verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(12288, 100)),
			Dest: b.addr, DestQPN: b.qp.Num(), QKey: udQKey})
	}
	postRecv(t, b, &verbs.RecvWR{ID: 101, SGL: sgl(b.sge(16384, 200))})
	postRecv(t, b, &verbs.RecvWR{ID: 102, SGL: sgl(b.sge(20480, 200))})
	return ids
}

// runFor runs the link for d of simulated time or until it is idle,
// whichever comes first; unlike sim.run it does not fail when work is
// left: a forged packet may well leave some. It fails if the QPs keep
// sending without time passing: a NIC running them would never stop.
func runFor(t *testing.T, s *sim, d time.Duration) {
	end := s.now.Add(d)
	busy := 0
	for steps := 0; ; steps++ {
		if s.transmitAll() || s.deliverDue() {
			if busy++; busy > 10000 {
				t.Fatalf("the QPs keep sending at %v\na: %+v\nb: %+v", s.now, s.a.qp.Status(), s.b.qp.Status())
			}
			continue
		}
		busy = 0
		next, ok := s.next()
		if !ok || next > end {
			return
		}
		if steps > 100000 {
			t.Fatalf("%d steps and still busy at %v, next at %v\na: %+v\nb: %+v", steps, s.now, next, s.a.qp.Status(), s.b.qp.Status())
		}
		s.now = max(s.now, next)
		s.a.qp.Tick(s.now)
		s.b.qp.Tick(s.now)
	}
}

// checkCompletions fails unless every completion h has is for one of the
// work requests ids, each at most once.
func checkCompletions(t *testing.T, h *host, ids []uint64) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, wc := range h.poll() {
		known := false
		for _, id := range ids {
			known = known || wc.ID == id
		}
		if !known || seen[wc.ID] {
			t.Errorf("%s: completion %v: not one of its work requests %v, or a second one", h.name, wc.String(), ids)
		}
		seen[wc.ID] = true
	}
}

// receiveSeeds records the packets of FuzzReceive's exchange on transport
// fuzzTypes[typ] run without interference: all of them as one input, and
// each alone.
func receiveSeeds(tb testing.TB, typ uint8) [][]byte {
	s, a, b := pairOf(tb, fuzzTypes[typ], defaultAttr())
	s.tracing = false
	postReceiveWork(tb, typ, a, b)
	var all []byte
	var seeds [][]byte
	s.drop = func(from *host, p *wire.Packet) bool {
		rec := []byte{0, 0, 0}
		if from == a { // the packet is for b
			rec[0] = 1
		}
		binary.BigEndian.PutUint16(rec[1:], uint16(len(p.Raw)))
		rec = append(rec, p.Raw...)
		all = append(all, rec...)
		seeds = append(seeds, rec)
		return false
	}
	s.settle(time.Second)
	return append(seeds, all)
}
