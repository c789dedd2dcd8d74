//go:build linux

package attachd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/internal/attachproto"
	"github.com/softnic/softnic/nic/quota"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
)

// FuzzAttachSessions drives a live daemon as hostile processes would,
// three sessions at once: requests of the attach protocol with arguments,
// handles and descriptors from the input; work requests, raw bytes and
// indexes written into the rings the daemon shares with them; doorbell
// marks and signals; garbage lines; detaching and attaching again. A
// victim, a session made with the library, holds a region of secret bytes
// that remote reads and writes may reach and two QPs connected to each
// other; its handles, keys, addresses, QP numbers and doorbell slots are
// among the values the attackers aim at.
//
// After each input the daemon is alive; the victim's region holds its
// secret, its QPs carry a WRITE and its CQ holds its own completions
// alone; no attacker's memory holds the secret; and once the attackers
// detached, the daemon holds what it held before: goroutines, descriptors,
// shared mappings, QPs, PDs, regions, windows, arenas and the ledger's
// charges. Requests to dial are left out: their addresses could leave
// loopback.
func FuzzAttachSessions(f *testing.F) {
	for _, seed := range fuzzSessionSeeds {
		f.Add(seed)
	}
	fz := newSessionFuzz(f)
	f.Fuzz(func(t *testing.T, prog []byte) { fz.run(t, prog) })
}

// The instructions of a program: an opcode byte, its low 3 bits the
// action, its next 2 the session (3: fzControl), then the action's
// operands. Reading past the end gives zeros.
const (
	fzRequest   = iota // op index, then the op's operands
	fzConnect          // QP, destination QPN: INIT, RTR, RTS towards the daemon
	fzWriteRing        // ring, offset (2 bytes), n, n bytes
	fzPostSend         // ring, ID, opcode, flags, address, key, length, remote address, rkey, QPN
	fzPostRecv         // ring, ID, address, key, length
	fzSetIndex         // ring, which (even: producer, odd: consumer), delta (signed)
	fzRing             // slot, signals
	fzGarbage          // n, n bytes sent as a line
	// fzControl, and a byte b: detach session b/2%3 and attach it again
	// (b even), or wait up to 50 ms for a completion in one of its CQs (b
	// odd).
	fzControl = 3 << 3
)

// fzWait is the control instruction that waits for a completion of
// session i.
func fzWait(i byte) []byte { return []byte{fzControl, 2*i + 1} }

// fzReattach is the control instruction that reattaches session i.
func fzReattach(i byte) []byte { return []byte{fzControl, 2 * i} }

// Pieces of the seed programs, for session 0 (the session is in the
// opcode: fzSession(1, ...) moves a piece to session 1). Handles are
// picked by a byte b: b%3 == 0 takes the session's own handle number
// b/3 (in the order made), b%3 == 1 the victim's, 2 an edge value; so do
// QPNs, keys and addresses.
var (
	fzPD = []byte{fzRequest, fzOp(attachproto.OpAllocPD)}     // handle 1
	fzCQ = []byte{fzRequest, fzOp(attachproto.OpCreateCQ), 3} // handle 2: 16 entries; ring 0
	// fzRegion is 4 KiB of a sealed memfd in the PD, all access: handle 3.
	fzRegion = []byte{fzRequest, fzOp(attachproto.OpAllocMR), 0, 3, fzAll, 0}
	// fzQP is an RC QP in the PD on the CQ, 4 WRs of one SGE each way:
	// the next handle; its send and receive rings follow the CQ's.
	fzQP = []byte{fzRequest, fzOp(attachproto.OpCreateQP), 1, 3, 3, 0, 2, 2, 1, 1, 0, 0}
)

// fzOp is the index of op in fuzzOps.
func fzOp(op string) byte {
	return byte(slices.IndexFunc(fuzzOps, func(o fuzzOp) bool { return o.op == op }))
}

// fzAll is every access a region may have but ZERO_BASED and ON_DEMAND.
const fzAll = byte(mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic | mr.MWBind)

// fzPostWrite is a signalled send request of opcode op on the session's
// first send ring, from the memory addr and lkey pick to the memory raddr
// and rkey pick, of 64 bytes, and a doorbell for the session's first QP.
func fzPostWrite(op verbs.WROpcode, addr, lkey, raddr, rkey byte) []byte {
	return []byte{fzPostSend, 0, 7, byte(op), byte(verbs.Signaled), addr, lkey, 4, raddr, rkey, 4, fzRing, 0, 1}
}

// fzMcast is a request of op (attach_mcast or detach_mcast) for the QP
// handle pick h and the group fuzzGroups[g].
func fzMcast(op string, h, g byte) []byte { return []byte{fzRequest, fzOp(op), h, g} }

// fzProg joins program pieces.
func fzProg(pieces ...[]byte) []byte { return bytes.Join(pieces, nil) }

// fzSession is the one instruction ins, for session i.
func fzSession(i byte, ins ...byte) []byte {
	out := bytes.Clone(ins)
	out[0] |= i << 3
	return out
}

// fuzzSessionSeeds are programs a fuzzer would take long to find.
var fuzzSessionSeeds = [][]byte{
	// Garbage over a QP's send ring, header included, then a doorbell.
	fzProg(fzPD, fzCQ, fzQP, []byte{fzWriteRing, 1, 0, 0, 16}, bytes.Repeat([]byte{0xff}, 16),
		[]byte{fzSetIndex, 1, 0, 1, fzRing, 0, 3}),
	// A QP connected to the victim's QP; WRITE, READ and FETCH_ADD with the
	// victim's rkey and address, from the attacker's own region; a SEND.
	fzProg(fzPD, fzCQ, fzRegion, fzQP, []byte{fzConnect, 9, 1},
		fzPostWrite(verbs.WRWrite, 0, 0, 1, 4), fzWait(0), fzPostWrite(verbs.WRRead, 0, 0, 1, 4), fzWait(0),
		fzPostWrite(verbs.WRFetchAdd, 0, 0, 1, 4), fzWait(0), fzPostWrite(verbs.WRSend, 0, 0, 0, 0), fzWait(0)),
	// Local access with the victim's lkey and address, towards the
	// attacker's own QP; a receive into the victim's region.
	fzProg(fzPD, fzCQ, fzRegion, fzQP, []byte{fzConnect, 9, 0},
		fzPostWrite(verbs.WRWrite, 1, 1, 0, 0), fzWait(0), []byte{fzPostRecv, 2, 7, 1, 1, 4, fzRing, 0, 1},
		fzPostWrite(verbs.WRSend, 0, 0, 0, 0), fzWait(0)),
	// A second session names the first one's handles and the victim's;
	// the first detaches midway.
	fzProg(fzPD, fzCQ, fzSession(1, fzPD...), fzSession(1, fzRequest, fzOp(attachproto.OpCreateQP), 1, 1, 1, 0, 2, 2, 1, 1, 0, 4),
		fzReattach(0), fzSession(1, fzRequest, fzOp(attachproto.OpDeallocPD), 1), fzSession(1, fzRequest, fzOp(attachproto.OpCounters))),
	// Descriptors that are no sealed memfd, too small, of another kind;
	// regions over memory not given; reg_shared at a wild IOVA.
	fzProg(fzPD, []byte{fzRequest, fzOp(attachproto.OpAllocMR), 0, 3, fzAll, 1, fzRequest, fzOp(attachproto.OpAllocMR), 0, 4, fzAll, 2,
		fzRequest, fzOp(attachproto.OpAllocMR), 0, 3, fzAll, 3, fzRequest, fzOp(attachproto.OpAllocMR), 0, 3, fzAll, 4,
		fzRequest, fzOp(attachproto.OpRegMR), 0, 0, 0xf0, 4, fzAll, fzRequest, fzOp(attachproto.OpRegShared), 0, 0, 3, 5, fzAll, 0}),
	// A doorbell page full of marks, the victim's slots marked, signals.
	fzProg(fzPD, fzCQ, fzQP, []byte{fzRing, 11, 15, fzRing, 1, 15, fzRing, 4, 15}),
	// A listener, a waiting accept_request, its cancel; garbage lines.
	fzProg(fzPD, fzCQ, []byte{fzRequest, fzOp(attachproto.OpListen), 0, 0, 3, 4, fzRequest, fzOp(attachproto.OpAcceptRequest), 6, fzRequest, fzOp(attachproto.OpCancel), 0,
		fzGarbage, 9}, []byte(`{"fds":9}`), []byte{fzGarbage, 8}, []byte("not json")),
	// A type 2 window of the attacker bound over the victim's region by a
	// BIND_MW; the QP destroyed under its posts.
	fzProg(fzPD, fzCQ, fzQP, []byte{fzRequest, fzOp(attachproto.OpAllocMW), 0, 2, fzConnect, 6, 0},
		fzPostWrite(verbs.WRBindMW, 1, 1, 0, 0), fzWait(0), []byte{fzRequest, fzOp(attachproto.OpDestroyQP), 6, fzRing, 0, 1}),
	// Huge and negative queue sizes.
	fzProg(fzPD, []byte{fzRequest, fzOp(attachproto.OpCreateCQ), 6, fzRequest, fzOp(attachproto.OpCreateCQ), 7, fzRequest, fzOp(attachproto.OpCreateSRQ), 0, 6, 4,
		fzRequest, fzOp(attachproto.OpCreateQP), 1, 3, 3, 0, 7, 5, 4, 4, 2, 0}),
	// An SRQ resized with a limit, then refused a size of 0 and a
	// negative limit, queried; its CQ resized, to 0, and an SRQ's handle
	// resized as a CQ.
	fzProg(fzPD, fzCQ, []byte{fzRequest, fzOp(attachproto.OpCreateSRQ), 0, 3, 1,
		fzRequest, fzOp(attachproto.OpModifySRQ), 2, 4, 3, 3, fzRequest, fzOp(attachproto.OpModifySRQ), 2, 0, 200, 3,
		fzRequest, fzOp(attachproto.OpQuerySRQ), 2, fzRequest, fzOp(attachproto.OpResizeCQ), 1, 4,
		fzRequest, fzOp(attachproto.OpResizeCQ), 1, 0, fzRequest, fzOp(attachproto.OpResizeCQ), 2, 4}),
	// A UD QP attached to a group twice, its group's mapped GID once,
	// refused a unicast GID, an IPv6 group and none; detached, refused a
	// second detach; the RC QP and the victim's QP refused.
	fzProg(fzPD, fzCQ, []byte{fzRequest, fzOp(attachproto.OpCreateQP), 3, 3, 3, 0, 2, 2, 1, 1, 0, 0}, fzQP,
		fzMcast(attachproto.OpAttachMcast, 6, 0), fzMcast(attachproto.OpAttachMcast, 6, 0), fzMcast(attachproto.OpAttachMcast, 6, 1),
		fzMcast(attachproto.OpAttachMcast, 6, 2), fzMcast(attachproto.OpAttachMcast, 6, 3), fzMcast(attachproto.OpAttachMcast, 6, 4),
		fzMcast(attachproto.OpAttachMcast, 9, 0), fzMcast(attachproto.OpAttachMcast, 1, 0), fzMcast(attachproto.OpDetachMcast, 6, 0),
		fzMcast(attachproto.OpDetachMcast, 6, 0), fzMcast(attachproto.OpDetachMcast, 1, 0)),
	// A region moved into a second PD of the session with new access,
	// its first PD deallocated; moved into the victim's PD handle, an
	// edge handle, a CQ's handle re-registered; translation, no flags,
	// REMOTE_WRITE without LOCAL_WRITE.
	fzProg(fzPD, fzCQ, fzRegion, fzPD, []byte{fzRequest, fzOp(attachproto.OpReregMR), 6, 6, 9, byte(mr.LocalWrite | mr.RemoteRead),
		fzRequest, fzOp(attachproto.OpDeallocPD), 0,
		fzRequest, fzOp(attachproto.OpReregMR), 6, 2, 1, 0, fzRequest, fzOp(attachproto.OpReregMR), 6, 2, 2, 0,
		fzRequest, fzOp(attachproto.OpReregMR), 3, 4, 0, fzAll, fzRequest, fzOp(attachproto.OpReregMR), 6, 1, 0, 0,
		fzRequest, fzOp(attachproto.OpReregMR), 6, 0, 0, 0, fzRequest, fzOp(attachproto.OpReregMR), 6, 4, 0, byte(mr.RemoteWrite)}),
}

// sessionFuzz is the daemon under fuzzing, its victim, and what the
// daemon held before the attackers came.
type sessionFuzz struct {
	dev    *nic.Device
	srv    *Server
	path   string
	victim *fuzzVictim
	// base is what the daemon held when the first input began (on the
	// goroutine that runs the inputs, which a seed's subtest adds).
	base     fuzzHoldings
	baseOnce sync.Once
}

func newSessionFuzz(f *testing.F) *sessionFuzz {
	dev, srv, path := serveTest(f, Config{Attaches: unpaced})
	fz := &sessionFuzz{dev: dev, srv: srv, path: path, victim: newFuzzVictim(f, srv, path)}
	fz.victim.check(f)
	return fz
}

// run runs one program. One that has not ended in a minute ends the
// test binary with every goroutine's stack: a fuzzing worker that hangs
// says nothing of why.
func (fz *sessionFuzz) run(t *testing.T, prog []byte) {
	defer time.AfterFunc(time.Minute, func() {
		buf := make([]byte, 1<<20)
		panic(fmt.Sprintf("an input of FuzzAttachSessions has run for a minute:\n%s", buf[:runtime.Stack(buf, true)]))
	}).Stop()
	fz.baseOnce.Do(func() { fz.base = fz.holdings() })
	var ss [3]*fuzzSession
	defer func() {
		for _, s := range ss {
			s.close()
		}
	}()
	attach := func(i int) {
		var err error
		if ss[i], err = fz.attach(); err != nil {
			t.Fatalf("attach: %v", err)
		}
	}
	for i := range ss {
		attach(i)
	}
	in := &fuzzInput{b: prog}
	for n := 0; !in.done() && n < 256; n++ {
		op := in.byte()
		if op&fzControl == fzControl {
			b := in.byte()
			i := int(b/2) % len(ss)
			if b%2 == 0 {
				ss[i].close()
				attach(i)
			} else {
				ss[i].await(50 * time.Millisecond)
			}
			continue
		}
		s := ss[op>>3&3]
		if s.dead() {
			continue
		}
		if err := fuzzActions[op&7](s, in); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range ss {
		for _, m := range s.memory() {
			if bytes.Contains(m, fz.victim.secret[:]) {
				t.Fatal("an attacker's memory holds the victim's secret")
			}
		}
	}
	for i, s := range ss {
		s.close()
		ss[i] = nil
	}
	fz.settle(t)
	fz.victim.check(t)
}

// fuzzHoldings is what the daemon holds: in its process (the test's),
// its device and its ledger.
type fuzzHoldings struct {
	goroutines, fds, memfds, qps  int
	pds, regions, windows, arenas int
	charged                       quota.Bill
	sessions                      int
}

func (fz *sessionFuzz) holdings() fuzzHoldings {
	st := fz.dev.Memory().Stats()
	fz.srv.mu.Lock()
	sessions := len(fz.srv.sessions)
	fz.srv.mu.Unlock()
	fds, _ := os.ReadDir("/proc/self/fd")
	maps, _ := os.ReadFile("/proc/self/maps")
	return fuzzHoldings{
		goroutines: runtime.NumGoroutine(), fds: len(fds), memfds: strings.Count(string(maps), "/memfd:"),
		qps: len(fz.dev.QPs()), pds: st.PDs, regions: st.Regions, windows: st.Windows, arenas: st.Arenas,
		charged: fz.srv.Usage().Total, sessions: sessions,
	}
}

// settle waits until the daemon holds what it held before the attackers
// came, and fails the test if it does not within 10 s. Goroutines,
// descriptors and mappings may be fewer: what other tests of the process
// left behind may end meanwhile.
func (fz *sessionFuzz) settle(t *testing.T) {
	var now fuzzHoldings
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		now = fz.holdings()
		if now.goroutines <= fz.base.goroutines && now.fds <= fz.base.fds && now.memfds <= fz.base.memfds {
			rest := now
			rest.goroutines, rest.fds, rest.memfds = fz.base.goroutines, fz.base.fds, fz.base.memfds
			if rest == fz.base {
				return
			}
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("after the attackers detached the daemon holds\n%+v\nnot what it held before\n%+v\n%s", now, fz.base, buf[:runtime.Stack(buf, true)])
}

// attach attaches a new attacker session.
func (fz *sessionFuzz) attach() (*fuzzSession, error) {
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: fz.path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	c := shm.NewConn(uc, attachproto.MaxLine)
	fds, err := sendAttachLine(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	s := &fuzzSession{fz: fz, c: c, bell: fds[0], replies: make(map[uint64]chan fuzzReply), ended: make(chan struct{})}
	if s.page, err = shm.Map(fds[1], shm.DoorbellSize); err != nil {
		unix.Close(s.bell)
		c.Close()
		return nil, err
	}
	s.db, _ = shm.NewDoorbell(s.page.Bytes())
	go s.read()
	return s, nil
}

// fuzzVictim is a session made with the library, whose memory and
// objects the attackers must not reach.
type fuzzVictim struct {
	dev          *nic.Device
	secretMR, mr *nic.MR // the secret, remotely accessible; the victim's own work
	a, b         *nic.QP // connected to each other
	cq           *nic.CQ
	secret       [16]byte
	handles      []uint32 // of all its objects at the daemon
	slots        []uint32 // of a and b in its doorbell page
	next         uint64
}

func newFuzzVictim(f *testing.F, srv *Server, path string) *fuzzVictim {
	v := &fuzzVictim{}
	must := func(err error) {
		f.Helper()
		if err != nil {
			f.Fatal(err)
		}
	}
	var err error
	v.dev, err = nic.Open(nic.Config{Attach: path})
	must(err)
	f.Cleanup(func() { v.dev.Close() })
	pd, err := v.dev.AllocPD()
	must(err)
	all := mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic | mr.MWBind
	v.secretMR, err = pd.AllocMR(1<<16, all)
	must(err)
	v.mr, err = pd.AllocMR(1<<16, all)
	must(err)
	v.cq, err = v.dev.CreateCQ(16)
	must(err)
	v.a, err = pd.CreateQP(nic.QPConfig{SendCQ: v.cq})
	must(err)
	v.b, err = pd.CreateQP(nic.QPConfig{SendCQ: v.cq})
	must(err)
	must(v.a.Connect(v.dev.Addr(), v.b.Num(), nic.ConnectOptions{}))
	must(v.b.Connect(v.dev.Addr(), v.a.Num(), nic.ConnectOptions{}))
	binary.NativeEndian.PutUint64(v.secret[:], uint64(time.Now().UnixNano()))
	binary.NativeEndian.PutUint64(v.secret[8:], 0x5ec7e75ec7e75ec7)
	for i := 0; i < len(v.secretMR.Bytes()); i += len(v.secret) {
		copy(v.secretMR.Bytes()[i:], v.secret[:])
	}
	a, b := hostedOf(f, srv, v.a), hostedOf(f, srv, v.b)
	v.slots = []uint32{a.slot, b.slot}
	a.s.mu.Lock()
	v.handles = slices.Sorted(maps.Keys(a.s.objects))
	a.s.mu.Unlock()
	return v
}

// check fails the test unless the victim's secret is intact, a WRITE of
// its own completes with its data, and its CQ holds nothing else.
func (v *fuzzVictim) check(t testing.TB) {
	t.Helper()
	for i := 0; i < len(v.secretMR.Bytes()); i += len(v.secret) {
		if !bytes.Equal(v.secretMR.Bytes()[i:i+len(v.secret)], v.secret[:]) {
			t.Fatalf("the victim's secret region is changed at offset %d", i)
		}
	}
	v.next++
	src, dst := v.mr.Bytes()[:64], v.mr.Bytes()[4096:4096+64]
	for i := range src {
		src[i] = byte(v.next) + byte(i)
	}
	wr := verbs.SendWR{ID: v.next, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: []verbs.SGE{v.mr.SGE(0, 64)}, RemoteAddr: v.mr.Addr() + 4096, RKey: v.mr.RKey()}
	if err := v.a.PostSend(&wr); err != nil {
		t.Fatalf("the victim's WRITE: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [4]verbs.WC
	n, err := v.cq.Wait(ctx, wc[:])
	if err != nil || n != 1 || wc[0].ID != v.next || wc[0].Status != verbs.Success {
		t.Fatalf("the victim's WRITE %d: %d completions %v, %v; want its success alone", v.next, n, wc[:n], err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("the victim's WRITE completed without its data")
	}
	if n, _ := v.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("the victim's CQ holds completions it did not ask for: %v", wc[:n])
	}
}
