package qp

import (
	"fmt"
	"strings"
)

// DumpSQ describes the send queue, for failing tests.
func DumpSQ(q *QP) string {
	var b strings.Builder
	fmt.Fprintf(&b, "head=%d next=%d tail=%d pkt=%d rdAtomic=%d halted=%v retrying=%v armed=%v rnrWait=%v cwnd=%.1f\n",
		q.sq.head, q.sq.next, q.sq.tail, q.req.pkt, q.req.rdAtomic, q.req.halted, q.comp.retrying, q.comp.armed, q.req.rnrWait, q.cc.Packets())
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := q.sq.at(i)
		fmt.Fprintf(&b, "  [%d] %s state=%d psn=%v..%v npkts=%d len=%d\n", i, w.wr.Opcode, w.state, w.firstPSN, w.lastPSN, w.npkts, w.length)
	}
	return b.String()
}

// PaceWindow is the READ response packets q's responder sends a round; 0
// while it does not pace.
func PaceWindow(q *QP) int { return q.resp.pace.Window() }
