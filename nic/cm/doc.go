// Package cm is the connection manager's protocol engine: the
// communication management state machine of IBTA chapter 12 with
// rdma_cm's conventions on top, as Linux's ib_cm and rdma_cm run it
// (drivers/infiniband/core/cm.c and cma.c), so that a softnic peer and a
// Linux rdma_cm peer understand each other.
//
// It owns the communications of one device (REQ, REP, RTU, REJ, MRA, DREQ
// and DREP, their retransmissions and timewaits), the listeners' backlogs,
// and the limits on the requests it holds for peers it does not know
// (Limits). It does no I/O: it has no socket, goroutine, channel, callback
// or clock. MADs, time and the application's calls go in (Engine.Receive,
// Engine.Tick, Engine.Connect, Engine.Accept …), and everything the caller
// must do comes back as data in an Output: MADs to send to QP1s, QPs to
// flush, events for the goroutines that wait (a request for a listener, a
// handshake's outcome, a connection's end) and counts. Package nic is the
// driver: it carries the MADs over its QP1, runs the timers, and turns the
// events into what Dial, Accept and Close wait on.
//
// The tests drive engines on a simulated link with a fake clock from
// transcripts in testdata/*.txt: commands and the MADs, events, timers and
// states each produces, readable without Go.
package cm
