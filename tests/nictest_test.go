package tests

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nictest"
	"github.com/softnic/softnic/verbs"
)

// shipper is the kind of code a softnic user tests with package nictest:
// it ships records into slots of the peer's region with RDMA WRITE with
// immediate, the immediate naming the slot, so that the peer learns of
// each from a receive completion.
type shipper struct {
	local, remote *nictest.End
	slotSize      int
}

// ship writes rec into slot i of the remote region.
func (s *shipper) ship(i int, rec []byte) error {
	off := i * s.slotSize
	copy(s.local.MR.Bytes()[off:], rec)
	return s.local.QP.PostSend(&verbs.SendWR{ID: uint64(i), Opcode: verbs.WRWriteImm, Flags: verbs.Signaled, Imm: uint32(i),
		SGL: []verbs.SGE{s.local.MR.SGE(off, len(rec))}, RemoteAddr: s.remote.MR.Addr() + uint64(off), RKey: s.remote.MR.RKey()})
}

// record is the i-th record the test ships.
func record(i, n int) []byte {
	return bytes.Repeat([]byte{byte(i + 1)}, n)
}

// TestNictestShipUnderLoss tests shipper as a user would with package
// nictest: over a pair connected by the connection manager, embedded and
// attached, with a tenth of the packets lost in each direction (seeded,
// so that a failing run repeats from the seed it logs), every record
// arrives intact in its slot, each lost request is sent again, and once
// the faults are off nothing more is.
func TestNictestShipUnderLoss(t *testing.T) {
	for _, attached := range []bool{false, true} {
		t.Run(fmt.Sprintf("attached=%v", attached), func(t *testing.T) {
			const records, size, slot = 16, 3000, 4096
			p := nictest.NewPair(t, &nictest.Options{CM: true, Attached: attached, Config: nic.Config{MTU: 1024},
				RegionSize: (records + 1) * slot})
			s := &shipper{local: p.A, remote: p.B, slotSize: slot}
			for i := range records + 1 {
				if err := p.B.QP.PostRecv(&verbs.RecvWR{ID: uint64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			p.A.Faults.SetRandom(netem.Faults{Drop: 0.1})
			p.B.Faults.SetRandom(netem.Faults{Drop: 0.1})
			for i := range records {
				if err := s.ship(i, record(i, size)); err != nil {
					t.Fatal(err)
				}
			}
			got := make(map[uint32]bool)
			for range records {
				if wc := p.A.Wait(t); wc.Status != verbs.Success {
					t.Fatalf("record %d: %v", wc.ID, wc.Status)
				}
				wc := p.B.Wait(t)
				if wc.Status != verbs.Success || wc.Opcode != verbs.WCRecvWriteImm || got[wc.Imm] {
					t.Fatalf("B's completion %v, imm %d (seen: %v)", &wc, wc.Imm, got[wc.Imm])
				}
				got[wc.Imm] = true
			}
			p.B.QP.Status() // orders the device's writes before the reads below
			for i := range records {
				if !bytes.Equal(p.B.MR.Bytes()[i*s.slotSize:][:size], record(i, size)) {
					t.Errorf("slot %d holds other bytes than record %d", i, i)
				}
			}

			lost := p.Recorder.Find(func(pk *nictest.Packet) bool {
				return pk.Note == nic.NoteFaultDropped && pk.Device == "A" && pk.OpCode.IsWrite()
			})
			for _, pk := range lost {
				p.Recorder.ExpectRetransmitted(t, pk.PSN)
			}
			t.Logf("%d of A's WRITE packets lost, %d packets retransmitted", len(lost), len(p.Recorder.Retransmitted()))

			p.A.Faults.Clear()
			p.B.Faults.Clear()
			before := len(p.Recorder.Retransmitted())
			if err := s.ship(records, record(records, size)); err != nil {
				t.Fatal(err)
			}
			if wc := p.A.Wait(t); wc.Status != verbs.Success {
				t.Fatalf("the record shipped without faults: %v", wc.Status)
			}
			if wc := p.B.Wait(t); wc.Imm != records {
				t.Fatalf("B's completion %v, imm %d", &wc, wc.Imm)
			}
			if after := len(p.Recorder.Retransmitted()); after != before {
				t.Errorf("%d packets retransmitted with the faults off", after-before)
			}
			p.Recorder.ExpectNone(t, "bad packet", func(pk *nictest.Packet) bool { return !pk.Decoded })
		})
	}
}
