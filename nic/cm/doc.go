// Package cm is the connection manager's protocol engine: the
// communication management state machine of IBTA chapter 12 with
// rdma_cm's conventions on top, as Linux's ib_cm and rdma_cm run it
// (drivers/infiniband/core/cm.c and cma.c), so that a softnic peer and a
// Linux rdma_cm peer understand each other.
//
// It owns the communications of one device (REQ, REP, RTU, REJ, MRA, DREQ
// and DREP, their retransmissions and timewaits), the service ID
// resolutions of rdma_cm's UDP port space (SIDR_REQ and SIDR_REP,
// sidr.go), both also in rdma_cm's IB port space, the listeners' backlogs,
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
// The scenarios are transcripts in testdata/*.txt, readable without Go:
// two engines on a simulated link with a fake clock, driven by commands
// (listen, connect, accept, reject, drop, inject, tick, disconnect,
// abort, shutdown …), each followed by the MADs that crossed the link,
// the events, states, counts and tables it produced: the handshake and
// its losses (handshake.txt, rtu-lost.txt, rep-lost-after-mra.txt,
// duplicate-req.txt, mra.txt, private-data.txt, calls.txt), refusals
// (no-listener.txt, reject.txt, mtu.txt, backlog.txt, half-open.txt,
// no-amplification.txt, listener.txt), the end (disconnect.txt,
// qp-failed.txt, abort.txt, shutdown.txt), timeouts (req-timeout.txt,
// timeouts.txt) and what comes late or from elsewhere (stale.txt,
// strangers.txt), and service ID resolution (sidr.txt); TestTranscripts
// lists the commands. Go tests cover
// the MRA's service timeout, the peer address rule and the fuzz target.
package cm
