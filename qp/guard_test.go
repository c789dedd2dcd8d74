package qp_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// TestRefusalsLookAlike: a request refused for its R_Key gets the very
// same NAK, byte for byte, whatever the reason (the key names nothing, a
// region of another PD, a region without the access, memory that does not
// hold the range): a guesser learns only that its guess failed. A
// misaligned atomic is refused before its key is looked at, with the same
// NAK for a good key and a bad one.
func TestRefusalsLookAlike(t *testing.T) {
	// other registers a region on b's table for the case and returns the
	// key and remote address the request uses.
	type target func(t *testing.T, b *host) (rkey uint32, va uint64)
	own := func(off uint64) target {
		return func(t *testing.T, b *host) (uint32, uint64) { return b.region.RKey(), b.va(off) }
	}
	region := func(otherPD bool, access mr.Access, offset int) target {
		return func(t *testing.T, b *host) (uint32, uint64) {
			pd := b.pd
			if otherPD {
				var err error
				if pd, err = b.mem.AllocPD(); err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 4096+8)[offset:]
			r, err := b.mem.Register(pd, buf, access)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.mem.Deregister(r) })
			if access&mr.ZeroBased != 0 {
				return r.RKey(), 0
			}
			return r.RKey(), r.Addr()
		}
	}
	all := mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	tests := []struct {
		name string
		op   verbs.WROpcode
		to   target
		bad  uint32 // XORed into the key
		nak  wire.NakCode
	}{
		{"WRITE: no such key", verbs.WRWrite, own(0), 0x5a5a5a00, wire.NakRemoteAccessError},
		{"WRITE: a region of another PD", verbs.WRWrite, region(true, all, 0), 0, wire.NakRemoteAccessError},
		{"WRITE: a region without remote write", verbs.WRWrite, region(false, mr.RemoteRead, 0), 0, wire.NakRemoteAccessError},
		{"WRITE: beyond the region", verbs.WRWrite, own(regionSize - 4), 0, wire.NakRemoteAccessError},
		{"READ: no such key", verbs.WRRead, own(0), 0x00a5a5a5, wire.NakRemoteAccessError},
		{"READ: a region of another PD", verbs.WRRead, region(true, all, 0), 0, wire.NakRemoteAccessError},
		{"FETCH_ADD: no such key", verbs.WRFetchAdd, own(0), 0x5a5a5a00, wire.NakRemoteAccessError},
		{"FETCH_ADD: a region without remote atomic", verbs.WRFetchAdd, region(false, mr.LocalWrite|mr.RemoteWrite, 0), 0, wire.NakRemoteAccessError},
		{"FETCH_ADD: aligned address, unaligned memory", verbs.WRFetchAdd, region(false, all|mr.ZeroBased, 4), 0, wire.NakRemoteAccessError},
		{"FETCH_ADD misaligned: a good key", verbs.WRFetchAdd, own(4), 0, wire.NakInvalidRequest},
		{"FETCH_ADD misaligned: no such key", verbs.WRFetchAdd, own(4), 0x5a5a5a00, wire.NakInvalidRequest},
	}
	naks := map[wire.NakCode][]byte{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, a, b := pair(t, defaultAttr())
			rkey, va := tc.to(t, b)
			var nak []byte
			s.drop = func(h *host, p *wire.Packet) bool {
				if h == b && p.AETH != nil && p.AETH.Syndrome().Type() == wire.AckTypeNak {
					nak = slices.Clone(p.Raw)
				}
				return false
			}
			post(t, a, &verbs.SendWR{ID: 1, Opcode: tc.op, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: va, RKey: rkey ^ tc.bad})
			want := verbs.RemAccessErr
			if tc.nak == wire.NakInvalidRequest {
				want = verbs.RemInvReqErr
			}
			if wc := s.waitWC(a, 1, time.Second)[0]; wc.Status != want {
				t.Fatalf("completion %s, want %s", wc.Status, want)
			}
			switch prev, seen := naks[tc.nak]; {
			case nak == nil:
				t.Fatal("the responder sent no NAK")
			case wire.BTH(nak).OpCode() != wire.OpRCAck || wire.AETH(nak[wire.BTHSize:]).Syndrome() != wire.NakSyndrome(tc.nak):
				t.Fatalf("NAK % x, want syndrome %v", nak, wire.NakSyndrome(tc.nak))
			case seen && !bytes.Equal(nak, prev):
				t.Errorf("NAK % x differs from another refusal's % x", nak, prev)
			case !seen:
				naks[tc.nak] = nak
			}
		})
	}
}

// fakeGuard is a Guard a test sets: it holds back every peer while hold
// is set, and records refusals.
type fakeGuard struct {
	hold    bool
	refused []netip.AddrPort
	asked   int
}

func (g *fakeGuard) Held(qpn uint32, peer netip.AddrPort) bool {
	g.asked++
	return g.hold
}

func (g *fakeGuard) Refused(qpn uint32, peer netip.AddrPort) { g.refused = append(g.refused, peer) }

// TestGuardHoldsPeerBack: the responder tells its Guard of each refused
// R_Key check, and while the Guard holds the peer back it drops the peer's
// requests that need one, good key or not, unanswered and without moving
// its PSN or its state, as if they were lost; once the hold ends the
// requester's retry goes through. Requests without an R_Key (SEND) pass.
func TestGuardHoldsPeerBack(t *testing.T) {
	for _, typ := range []verbs.Type{verbs.RC, verbs.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			g := &fakeGuard{}
			a := newHost(t, "a", "10.0.0.1", typ, 0x11, qp.Config{})
			b := newHost(t, "b", "10.0.0.2", typ, 0x22, qp.Config{Guard: g})
			connect(t, a, b, defaultAttr())
			s := newSim(t, a, b)
			// What b answers but the NAK of a sequence error, which a lost
			// packet would bring as well (the SEND behind the WRITE).
			var answers []wire.Syndrome
			s.drop = func(h *host, p *wire.Packet) bool {
				if h == b && p.AETH != nil && p.AETH.Syndrome() != wire.NakSyndrome(wire.NakPSNSequenceError) {
					answers = append(answers, p.AETH.Syndrome())
				}
				return false
			}
			copy(a.buf, "guarded!")
			write := func(id uint64, rkey uint32) {
				post(t, a, &verbs.SendWR{ID: id, Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8)), RemoteAddr: b.va(64), RKey: rkey})
			}

			g.hold = true
			epsn := b.qp.Status().ExpectedPSN
			write(1, b.region.RKey())
			postRecv(t, b, &verbs.RecvWR{ID: 9, SGL: sgl(b.sge(4096, 64))})
			post(t, a, &verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: sgl(a.sge(0, 8))})
			s.run(time.Second, func() bool { return b.counter(verbs.HeldAccess) > 0 })
			if g.asked == 0 || b.counter(verbs.HeldAccess) == 0 {
				t.Fatalf("Guard asked %d times, %d requests held", g.asked, b.counter(verbs.HeldAccess))
			}
			if len(answers) != 0 || b.qp.Status().ExpectedPSN != epsn && typ == verbs.RC {
				t.Fatalf("a held WRITE was answered (%v) or moved the PSN (%v → %v)", answers, epsn, b.qp.Status().ExpectedPSN)
			}
			if string(b.buf[64:72]) == "guarded!" || b.qp.State() != verbs.RTS {
				t.Fatalf("a held WRITE landed, or moved the responder to %s", b.qp.State())
			}
			if len(g.refused) != 0 {
				t.Errorf("held requests counted as refusals: %v", g.refused)
			}

			g.hold = false
			if typ == verbs.RC {
				// The requester's retry of the WRITE goes through, then the SEND.
				wcs := s.waitWC(a, 2, time.Second)
				if wcs[0].Status != verbs.Success || wcs[1].Status != verbs.Success || string(b.buf[64:72]) != "guarded!" {
					t.Fatalf("after the hold: completions %v, memory %q", wcs, b.buf[64:72])
				}
			} else {
				s.settle(time.Second)
			}
			// The SEND, which needs no key, was received in either case.
			if wcs := b.poll(); len(wcs) != 1 || wcs[0].ID != 9 || wcs[0].Status != verbs.Success {
				t.Errorf("b's receive completions %v, want the SEND's", wcs)
			}

			// A refusal is reported with the QP's peer.
			write(3, b.region.RKey()^0x5a5a5a00)
			s.settle(time.Second)
			if len(g.refused) != 1 || g.refused[0] != a.addr {
				t.Errorf("refusals %v, want one from %v", g.refused, a.addr)
			}
			if typ == verbs.RC && binary.NativeEndian.Uint64(b.buf[128:]) != 0 {
				t.Error("the refused WRITE changed memory")
			}
		})
	}
}
