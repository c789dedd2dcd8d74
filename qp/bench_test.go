package qp_test

import (
	"testing"
	"time"

	"github.com/softnic/softnic/qp"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// BenchmarkOp moves one operation at a time from post to completion
// between two RC QPs joined directly (no ICRC, no link): the cost of the
// transport alone, which must allocate nothing.
func BenchmarkOp(b *testing.B) {
	for _, bc := range []struct {
		name string
		op   verbs.WROpcode
		size uint32
	}{
		{"WRITE-8", verbs.WRWrite, 8},
		{"WRITE-64K", verbs.WRWrite, 64 << 10},
		{"READ-64K", verbs.WRRead, 64 << 10},
		{"SEND-4K", verbs.WRSend, 4 << 10},
		{"FETCH_ADD", verbs.WRFetchAdd, 8},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, x, y := pair(b, defaultAttr())
			buf := make([]byte, qp.MaxPacketSize)
			var pkt wire.Packet
			now := qp.Time(0)
			move := func(from, to *host) {
				for {
					n, route := from.qp.Transmit(buf, now)
					dst := route.Dst
					if n == 0 {
						return
					}
					if err := pkt.Decode(buf[:n]); err != nil {
						b.Fatal(err)
					}
					env := wire.Envelope{Src: from.addr, Dst: dst}
					to.qp.Receive(&pkt, &env, now)
				}
			}
			wr := verbs.SendWR{Opcode: bc.op, Flags: verbs.Signaled, SGL: sgl(x.sge(0, bc.size)), RemoteAddr: y.va(0), RKey: y.region.RKey()}
			rwr := verbs.RecvWR{SGL: sgl(y.sge(0, bc.size))}
			var wc [1]verbs.WC
			b.SetBytes(int64(bc.size))
			b.ReportAllocs()
			for b.Loop() {
				if bc.op == verbs.WRSend {
					if err := y.qp.PostRecv(&rwr); err != nil {
						b.Fatal(err)
					}
				}
				if err := x.qp.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
				for done := false; !done; {
					move(x, y)
					move(y, x)
					n, _ := x.cq.Poll(wc[:])
					if n > 0 && wc[0].Status != verbs.Success {
						b.Fatalf("%s completed with %s", bc.op, wc[0].Status)
					}
					done = n > 0
					now = now.Add(time.Microsecond)
					x.qp.Tick(now)
					y.qp.Tick(now)
				}
				if bc.op == verbs.WRSend {
					if n, _ := y.cq.Poll(wc[:1]); n != 1 || wc[0].Status != verbs.Success {
						b.Fatalf("receive: %d completions %v", n, wc[:n])
					}
				}
			}
		})
	}
}
