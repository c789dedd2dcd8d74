// Package qp is softnic's transport: RC, UC and UD queue pairs as pure state
// machines, with the completion queues and shared receive queues they feed.
//
// Nothing here touches a socket, starts a goroutine or reads a clock. The
// driver (package nic, or a test) feeds the machine three kinds of input and
// drains one kind of output:
//
//   - work requests from the application: [QP.PostSend], [QP.PostRecv],
//     [SRQ.PostRecv], [QP.Modify];
//   - packets from the network: [QP.Receive], with the [wire.Envelope] the
//     datagram arrived in;
//   - time: [QP.Tick] with the current [Time], after [QP.Deadline];
//   - out come packets, one per [QP.Transmit] call, encoded straight into the
//     driver's buffer, and work completions pushed to the [CQ]s.
//
// The behaviour follows the InfiniBand Architecture Specification's RC, UC
// and UD rules as Linux Soft-RoCE (rdma_rxe) implements them: a requester
// that segments messages by path MTU and retransmits go-back-N, a responder
// that executes each request exactly once and replays READ and ATOMIC
// responses for duplicates, and a completer that turns ACKs, NAKs and
// timeouts into completions with ibv_wc_status names. Each of the three is
// a type that owns its state (requester.go, completer.go, responder.go);
// the QP composes them with the send and receive queues they share. Where
// softnic departs from rxe the code says so: the requester paces itself
// with a congestion window (package cwnd, which the completer feeds), the
// responder paces its READ responses (package readpace), and a refused R_Key
// check always gets the same NAK (see Guard).
//
// The transport never sees the link's faults: those are package netem's,
// which the driver applies to what the QP sends. The tests drive QPs over
// a simulated link with a fake clock; the main scenarios are transcripts
// in testdata/transcripts, their commands and expected packets,
// completions and counters readable without Go.
//
// The values the machine takes and gives (work requests, completions,
// QP attributes, counters) are package verbs's.
//
// A QP is not safe for concurrent use: the driver serialises every call on
// one QP. CQs and SRQs are shared by QPs that may be driven from different
// goroutines and lock internally.
package qp
