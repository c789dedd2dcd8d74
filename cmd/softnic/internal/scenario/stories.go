package scenario

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// rule returns a rule that hits the packet of one opcode and PSN, once.
func rule(a netem.Action, op wire.OpCode, psn wire.PSN) netem.Rule {
	return netem.Rule{Action: a, OpCodes: []wire.OpCode{op}, PSN: psn, MatchPSN: true}
}

// pattern returns n bytes the server's memory can be compared with.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// write WRITEs n bytes of pattern into the server's region, waits for the
// completion, and checks the server's memory.
func (r *run) write(n int) error {
	data := pattern(n)
	copy(r.local.Bytes(), data)
	clear(r.region.Bytes()[:n])
	if _, err := r.postOK(&verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{r.local.SGE(0, n)},
		RemoteAddr: r.region.Addr(), RKey: r.region.RKey()}); err != nil {
		return err
	}
	r.syncServer()
	if !bytes.Equal(r.region.Bytes()[:n], data) {
		return errors.New("the server's memory does not hold what the client wrote")
	}
	return nil
}

var loss = &Scenario{
	Name:  "loss",
	Title: "a lost WRITE packet and go-back-N from the NAK'd PSN",
	intro: func(r *run) string {
		return fmt.Sprintf("The client WRITEs 3½ MTUs, four packets; the link loses the second, PSN %v, once. "+
			"The server takes an RC QP's packets only in order: the third tells it PSN %v is missing, so it answers "+
			"with a PSN sequence error NAK for it and drops what follows; the client goes back to PSN %v and sends "+
			"it and everything after it again (go-back-N).", clientPSN+1, clientPSN+1, clientPSN+1)
	},
	faults: func(r *run) (server, client []netem.Rule) {
		return nil, []netem.Rule{rule(netem.ActionDrop, wire.OpRCWriteMiddle, clientPSN+1)}
	},
	steps: []step{{
		"RDMA WRITE, one packet lost",
		func(r *run) string {
			return fmt.Sprintf("The client posts an RDMA WRITE of %d bytes: WRITE First %v, Middle %v (lost), Middle %v, Last %v.",
				lossLen(r), clientPSN, clientPSN+1, clientPSN+2, clientPSN+3)
		},
		func(r *run) (string, error) {
			if err := r.write(lossLen(r)); err != nil {
				return "", err
			}
			if err := check(
				want{r.client, "client", "rcvd_seq_err", 1},
				want{r.client, "client", "retransmitted_pkts", -1},
				want{r.server, "server", "out_of_seq_request", -1},
				want{r.server, "server", "duplicate_request", 0},
			); err != nil {
				return "", err
			}
			return fmt.Sprintf("the WRITE completed and the server's memory holds the %d bytes; the client received 1 PSN sequence error NAK "+
				"and resent %d packets (retransmitted_pkts).", lossLen(r), counter(r.client, "retransmitted_pkts")), nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		lost, naks := named(l, ladder.Lost), named(l, ladder.NAK)
		psns, causes := retransmitted(l, ladder.CauseNAK)
		switch {
		case len(lost) != 1 || lost[0].PSN != clientPSN+1:
			return "", fmt.Errorf("the ladder names %d lost packets (%v), want the WRITE of PSN %v", len(lost), lost, clientPSN+1)
		case len(naks) != 1 || naks[0].PSN != clientPSN+1:
			return "", fmt.Errorf("the ladder names %d NAKs (%v), want one for PSN %v", len(naks), naks, clientPSN+1)
		case len(psns) == 0 || psns[0] != clientPSN+1 || !contiguous(psns):
			return "", fmt.Errorf("the ladder names the retransmissions after the NAK of PSNs %s, want PSN %v and those after it", psnsText(psns), clientPSN+1)
		case slices.ContainsFunc(causes, func(c ladder.Cause) bool { return c != ladder.CauseNAK }):
			return "", fmt.Errorf("the ladder names retransmissions by %v, want all by the NAK", causes)
		}
		return fmt.Sprintf("the ladder names the lost packet of PSN %v, the NAK for it, and the retransmission of PSNs %s after the NAK (go-back-N).",
			clientPSN+1, psnsText(psns)), nil
	},
}

// lossLen is the loss scenario's WRITE: four packets, the last half full.
func lossLen(r *run) int { return 3*r.o.MTU + r.o.MTU/2 }

// contiguous reports whether psns follow each other.
func contiguous(psns []wire.PSN) bool {
	for i := 1; i < len(psns); i++ {
		if psns[i] != psns[i-1].Add(1) {
			return false
		}
	}
	return true
}

var timeout = &Scenario{
	Name:       "timeout",
	Title:      "a lost ACK and the retransmission timer",
	ackTimeout: ackTimeout,
	intro: func(r *run) string {
		return fmt.Sprintf("The client WRITEs 64 bytes in one packet; the server's link loses the ACK once. The client cannot tell "+
			"a lost ACK from a lost request: it waits its local ACK timeout, %s, and sends the WRITE again. The server "+
			"has it already: it acknowledges it again without writing twice.", ladder.Duration(ladder.ACKTimeout(ackTimeout)))
	},
	faults: func(r *run) (server, client []netem.Rule) {
		return []netem.Rule{rule(netem.ActionDrop, wire.OpRCAck, clientPSN)}, nil
	},
	steps: []step{{
		"RDMA WRITE, its ACK lost",
		func(r *run) string {
			return fmt.Sprintf("The client posts an RDMA WRITE of 64 bytes, PSN %v; its ACK is lost.", clientPSN)
		},
		func(r *run) (string, error) {
			start := time.Now()
			if err := r.write(64); err != nil {
				return "", err
			}
			waited := time.Since(start)
			if waited < ladder.ACKTimeout(ackTimeout) {
				return "", fmt.Errorf("the WRITE completed after %v, before the ACK timeout", waited.Round(time.Millisecond))
			}
			if err := check(
				want{r.client, "client", "retransmitted_pkts", 1},
				want{r.client, "client", "completer_retry_err", 1},
				want{r.server, "server", "duplicate_request", 1},
			); err != nil {
				return "", err
			}
			return fmt.Sprintf("the WRITE completed %v after it was posted: the client resent it once when the timer ran out, "+
				"and the server took it for a duplicate (duplicate_request 1).", waited.Round(time.Millisecond)), nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		lost := named(l, ladder.Lost)
		psns, causes := retransmitted(l, ladder.CauseTimeout)
		dups := named(l, ladder.Duplicate)
		switch {
		case len(lost) != 1 || lost[0].PSN != clientPSN:
			return "", fmt.Errorf("the ladder names %d lost packets (%v), want the ACK of PSN %v", len(lost), lost, clientPSN)
		case !slices.Equal(psns, []wire.PSN{clientPSN}) || len(causes) != 1:
			return "", fmt.Errorf("the ladder names the retransmissions %v of PSNs %s after a timeout, want PSN %v once", causes, psnsText(psns), clientPSN)
		case len(dups) == 0 || dups[0].PSN != clientPSN:
			return "", fmt.Errorf("the ladder names no duplicate of PSN %v at the server", clientPSN)
		}
		return fmt.Sprintf("the ladder names the lost ACK, the retransmission of PSN %v after the timeout, and the duplicate the server acknowledges again.", clientPSN), nil
	},
}

var rnr = &Scenario{
	Name:  "rnr",
	Title: "a SEND before a receive is posted",
	intro: func(r *run) string {
		return fmt.Sprintf("A SEND lands in a receive buffer the receiver posted beforehand. The client SENDs while the server has none: "+
			"the server answers with an RNR NAK (receiver not ready) that asks the client to wait its RNR timer, %s, and try again. "+
			"The server posts a receive meanwhile, and the next try succeeds.", ladder.Duration(wire.RNRTimeout(rnrTimer)))
	},
	faults: func(r *run) (server, client []netem.Rule) { return nil, nil },
	steps: []step{{
		"SEND before a receive is posted",
		func(r *run) string {
			return fmt.Sprintf("The client posts a SEND of %d bytes, PSN %v; the server posts its receive once the RNR NAK has gone out.", len(rnrMessage), clientPSN)
		},
		func(r *run) (string, error) {
			copy(r.local.Bytes(), rnrMessage)
			if err := r.cqp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.Signaled, SGL: []verbs.SGE{r.local.SGE(0, len(rnrMessage))}}); err != nil {
				return "", err
			}
			if err := r.await("an RNR NAK", func() bool { return r.named[ladder.RNRWait] > 0 }); err != nil {
				return "", err
			}
			if err := r.sqp.PostRecv(&verbs.RecvWR{ID: 7, SGL: []verbs.SGE{r.region.SGE(0, 1024)}}); err != nil {
				return "", err
			}
			wc, err := r.wait(r.ccq, "the client's SEND")
			if err == nil && wc.Status != verbs.Success {
				err = fmt.Errorf("the SEND completed with %v (%s)", wc.Status, wc.Status.Text())
			}
			if err != nil {
				return "", err
			}
			rwc, err := r.wait(r.scq, "the server's receive")
			if err != nil {
				return "", err
			}
			r.syncServer()
			if got := r.region.Bytes()[:rwc.ByteLen]; rwc.Status != verbs.Success || rwc.ID != 7 || !bytes.Equal(got, rnrMessage) {
				return "", fmt.Errorf("the server's completion is %v with %q, want RECV SUCCESS with %q", &rwc, got, rnrMessage)
			}
			if err := check(
				want{r.client, "client", "rcvd_rnr_err", -1},
				want{r.server, "server", "send_rnr_err", -1},
			); err != nil {
				return "", err
			}
			return fmt.Sprintf("the SEND completed after %d RNR %s; the server's receive holds %q.", counter(r.client, "rcvd_rnr_err"),
				plural(counter(r.client, "rcvd_rnr_err"), "NAK", "NAKs"), rnrMessage), nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		waits := named(l, ladder.RNRWait)
		psns, causes := retransmitted(l, ladder.CauseRNR)
		switch {
		case len(waits) == 0 || waits[0].PSN != clientPSN:
			return "", fmt.Errorf("the ladder names no RNR NAK for PSN %v", clientPSN)
		case !slices.Equal(psns, []wire.PSN{clientPSN}) || len(causes) != len(waits):
			return "", fmt.Errorf("the ladder names the retransmissions %v of PSNs %s, want PSN %v after each of the %d RNR NAKs", causes, psnsText(psns), clientPSN, len(waits))
		}
		return fmt.Sprintf("the ladder names the RNR NAK for PSN %v and the SEND sent again once its timer ran out.", clientPSN), nil
	},
}

var rnrMessage = []byte("sent before a receive was posted")

var seqerr = &Scenario{
	Name:  "seqerr",
	Title: "a PSN sequence error NAK",
	intro: func(r *run) string {
		return fmt.Sprintf("The client WRITEs 2½ MTUs, three packets; the link holds the second, PSN %v, back %v, so that the third "+
			"overtakes it. The server takes packets only in order: it answers the third with a PSN sequence error NAK for PSN %v, "+
			"and the client sends PSN %v and %v again. When the held-back packet arrives at last, the server has it already.",
			clientPSN+1, ladder.Duration(seqerrHold), clientPSN+1, clientPSN+1, clientPSN+2)
	},
	faults: func(r *run) (server, client []netem.Rule) {
		hold := rule(netem.ActionDelay, wire.OpRCWriteMiddle, clientPSN+1)
		hold.Hold = seqerrHold
		return nil, []netem.Rule{hold}
	},
	steps: []step{{
		"RDMA WRITE, one packet overtaken",
		func(r *run) string {
			return fmt.Sprintf("The client posts an RDMA WRITE of %d bytes: WRITE First %v, Middle %v (held back), Last %v.",
				seqerrLen(r), clientPSN, clientPSN+1, clientPSN+2)
		},
		func(r *run) (string, error) {
			if err := r.write(seqerrLen(r)); err != nil {
				return "", err
			}
			// The server counts the held-back packet, or its
			// retransmission if it arrives first, as a duplicate, then
			// acknowledges it again.
			if err := r.await("the duplicate's arrival", func() bool { return counter(r.server, "duplicate_request") > 0 }); err != nil {
				return "", err
			}
			if err := check(
				want{r.client, "client", "rcvd_seq_err", 1},
				want{r.server, "server", "out_of_seq_request", -1},
				want{r.server, "server", "duplicate_request", 1},
			); err != nil {
				return "", err
			}
			return fmt.Sprintf("the WRITE completed and the server's memory holds the %d bytes; the client received 1 PSN sequence error NAK, "+
				"and the held-back packet counted as a duplicate at the server.", seqerrLen(r)), nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		oos, naks := named(l, ladder.OutOfSequence), named(l, ladder.NAK)
		psns, _ := retransmitted(l, ladder.CauseNAK)
		dups := named(l, ladder.Duplicate)
		switch {
		case len(oos) == 0 || oos[0].PSN != clientPSN+1:
			return "", fmt.Errorf("the ladder names no packet out of sequence before PSN %v", clientPSN+1)
		case len(naks) != 1 || naks[0].PSN != clientPSN+1:
			return "", fmt.Errorf("the ladder names %d NAKs (%v), want one for PSN %v", len(naks), naks, clientPSN+1)
		case len(psns) == 0 || psns[0] != clientPSN+1:
			return "", fmt.Errorf("the ladder names the retransmissions after the NAK of PSNs %s, want PSN %v first", psnsText(psns), clientPSN+1)
		case !slices.ContainsFunc(dups, func(a ladder.Anomaly) bool { return a.PSN == clientPSN+1 }):
			return "", fmt.Errorf("the ladder names no duplicate of PSN %v", clientPSN+1)
		}
		return fmt.Sprintf("the ladder names PSN %v out of sequence, the PSN sequence error NAK for PSN %v, the retransmission of PSNs %s after it, "+
			"and the held-back packet as a duplicate.", clientPSN+2, clientPSN+1, psnsText(psns)), nil
	},
}

// seqerrHold holds the seqerr scenario's packet back: long enough for its
// retransmission to arrive first, on loopback by far.
const seqerrHold = 50 * time.Millisecond

// seqerrLen is the seqerr scenario's WRITE: three packets.
func seqerrLen(r *run) int { return 2*r.o.MTU + r.o.MTU/2 }

var atomicReplay = &Scenario{
	Name:  "atomic-replay",
	Title: "a duplicated FETCH_ADD answered from the saved result, executed once",
	intro: func(r *run) string {
		return "The client adds 2 to a word of the server's memory that holds 40 with a FETCH_ADD; the link delivers the request twice. " +
			"An atomic must not run twice: the server executes the first copy and answers the second from the result it saved, " +
			"so both ATOMIC ACKNOWLEDGEs carry 40, and the word holds 42."
	},
	faults: func(r *run) (server, client []netem.Rule) {
		return nil, []netem.Rule{rule(netem.ActionDuplicate, wire.OpRCFetchAdd, clientPSN)}
	},
	steps: []step{{
		"ATOMIC FETCH_ADD, delivered twice",
		func(r *run) string {
			return fmt.Sprintf("The word at offset 0 of the region holds 40; the client posts a FETCH_ADD of 2, PSN %v, which the link copies.", clientPSN)
		},
		func(r *run) (string, error) {
			binary.NativeEndian.PutUint64(r.region.Bytes(), 40)
			r.syncServer()
			if _, err := r.postOK(&verbs.SendWR{Opcode: verbs.WRFetchAdd, SGL: []verbs.SGE{r.local.SGE(0, 8)},
				RemoteAddr: r.region.Addr(), RKey: r.region.RKey(), CompareAdd: 2}); err != nil {
				return "", err
			}
			// The copy, then the second ATOMIC ACKNOWLEDGE.
			if err := r.await("the second ATOMIC ACKNOWLEDGE", func() bool { return r.named[ladder.Duplicate] >= 2 }); err != nil {
				return "", err
			}
			r.syncServer()
			orig, now := binary.NativeEndian.Uint64(r.local.Bytes()), binary.NativeEndian.Uint64(r.region.Bytes())
			if orig != 40 || now != 42 {
				return "", fmt.Errorf("the FETCH_ADD returned %d and left %d, want 40 and 42", orig, now)
			}
			if err := check(want{r.server, "server", "duplicate_request", 1}); err != nil {
				return "", err
			}
			return "the client got 40 back and the word holds 42: the server executed the FETCH_ADD once and counted the copy as a duplicate.", nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		var copies, replays int
		for _, an := range named(l, ladder.Duplicate) {
			switch {
			case an.PSN != clientPSN:
			case bytes.Contains([]byte(an.Text), []byte("copied on the way")):
				copies++
			case bytes.Contains([]byte(an.Text), []byte("executed once")):
				replays++
			}
		}
		if copies != 1 || replays != 1 {
			return "", fmt.Errorf("the ladder names %d copies of the FETCH_ADD and %d ATOMIC ACKNOWLEDGEs answered from the saved result, want 1 each", copies, replays)
		}
		return fmt.Sprintf("the ladder names the copy of the FETCH_ADD of PSN %v and its second ATOMIC ACKNOWLEDGE, with the same original value: executed once.", clientPSN), nil
	},
}

var badRKey = &Scenario{
	Name:  "bad-rkey",
	Title: "a WRITE with an rkey the server never handed out",
	intro: func(r *run) string {
		return "The client WRITEs 8 bytes with an rkey the server never handed out. The server's NIC refuses with a NAK " +
			"(remote access error); the WRITE completes with REM_ACCESS_ERR, and both QPs move to the error state: " +
			"an access violation ends an RC connection."
	},
	faults: func(r *run) (server, client []netem.Rule) { return nil, nil },
	steps: []step{{
		"RDMA WRITE with a bad rkey",
		func(r *run) string {
			return fmt.Sprintf("The client posts an RDMA WRITE of 8 bytes, PSN %v, with rkey %#x instead of %#x.", clientPSN, r.badKey(), r.region.RKey())
		},
		func(r *run) (string, error) {
			wc, err := r.post(&verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{r.local.SGE(0, 8)}, RemoteAddr: r.region.Addr(), RKey: r.badKey()})
			if err != nil {
				return "", err
			}
			if wc.Status != verbs.RemAccessErr {
				return "", fmt.Errorf("the WRITE completed with %v, want REM_ACCESS_ERR", wc.Status)
			}
			for _, q := range []struct {
				name string
				st   verbs.State
			}{{"client", r.cqp.Status().State}, {"server", r.sqp.Status().State}} {
				if q.st != verbs.Err {
					return "", fmt.Errorf("the %s's QP is in state %v, want ERR", q.name, q.st)
				}
			}
			if err := check(want{r.server, "server", "remote_access_err", 1}); err != nil {
				return "", err
			}
			return fmt.Sprintf("the WRITE completed with %v (%s); both QPs are in state ERR.", wc.Status, wc.Status.Text()), nil
		},
	}},
	ladder: func(r *run, l *ladder.Ladder) (string, error) {
		naks := named(l, ladder.NAK)
		if len(naks) != 1 || naks[0].PSN != clientPSN || !bytes.Contains([]byte(naks[0].Text), []byte("remote access error")) {
			return "", fmt.Errorf("the ladder names the NAKs %v, want one remote access error for PSN %v", naks, clientPSN)
		}
		return fmt.Sprintf("the ladder names the NAK (remote access error) for PSN %v.", clientPSN), nil
	},
}

// badKey is a key the server never handed out: the region's index plus
// one, which no region of the server has.
func (r *run) badKey() uint32 { return r.region.RKey() + 1<<8 }

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
