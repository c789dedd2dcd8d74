package ladder

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/softnic/softnic/wire"
)

// arrowWidth is the width of a text arrow between its two columns.
const arrowWidth = 62

// gapShown is the pause between two arrows that the drawings point out:
// the waits of timeouts and RNR timers stand out from the microseconds
// between packets in flight.
const gapShown = time.Millisecond

// WriteText writes the ladder for a terminal: a summary of the anomalies,
// then each conversation with its two columns and its arrows in order, each
// numbered and timed (seconds since the first packet), and under each arrow
// the anomalies it shows:
//
//	== conversation 1: RC 10.77.0.12 QP 0x000071 ⇄ 10.77.0.1 QP 0x00c342, 11 packets
//	                         10.77.0.12 QP 0x000071                                        10.77.0.1 QP 0x00c342
//	   1   0.000000  │──────────────── RDMA Write Only psn=0x11d86c 64 B ────────────────▶│
//	   2   0.000230  │◀───────────────────── ACK psn=0x11d86c msn=1 ──────────────────────│
//	  10   0.071235  │──────────────── RDMA Write Only psn=0x11d870 64 B ────────────────▶│
//	                 ┆ retransmission (timeout): PSN 0x11d870 resent 67.1 ms after ...
//
// A lost packet's arrow stops short with ✗, a packet whose ICRC is bad
// ends in ✗ at its receiver.
func WriteText(w io.Writer, l *Ladder) error {
	bw := bufio.NewWriter(w)
	arrows := l.Arrows()
	convs := l.Conversations()
	fmt.Fprintf(bw, "%d %s in %d %s; %s\n", len(arrows), plural(len(arrows), "packet", "packets"),
		len(convs), plural(len(convs), "conversation", "conversations"), Summary(arrows))
	byConv := make(map[int][]*Arrow, len(convs))
	for i := range arrows {
		byConv[arrows[i].Conv] = append(byConv[arrows[i].Conv], &arrows[i])
	}
	for i := range convs {
		c := &convs[i]
		fmt.Fprintf(bw, "\n== conversation %d: %s %s ⇄ %s, %d %s\n", c.ID, c.Transport, c.A, c.B,
			c.Packets, plural(c.Packets, "packet", "packets"))
		if c.ACKTimeout > 0 {
			fmt.Fprintf(bw, "   ACK timeout %s\n", Duration(c.ACKTimeout))
		}
		left, right := c.A.String(), c.B.String()
		pad := max(1, arrowWidth+2-utf8.RuneCountInString(right))
		fmt.Fprintf(bw, "%18s%-*s%s\n", "", pad, left, right)
		for i, a := range byConv[c.ID] {
			if i > 0 && a.Time-byConv[c.ID][i-1].Time >= gapShown {
				fmt.Fprintf(bw, "%17s ⋮ %s later\n", "", Duration(a.Time-byConv[c.ID][i-1].Time))
			}
			fmt.Fprintf(bw, "%5d %10.6f  %s\n", a.Seq, a.Time.Seconds(), textArrow(a))
			for _, an := range a.Anomalies {
				fmt.Fprintf(bw, "%17s ┆ %s\n", "", an.Text)
			}
			if a.Note != "" {
				fmt.Fprintf(bw, "%17s ┆ (%s)\n", "", a.Note)
			}
		}
	}
	return bw.Flush()
}

// textArrow draws an arrow with its label in the middle.
func textArrow(a *Arrow) string {
	label := " " + a.Label + " "
	n := utf8.RuneCountInString(label)
	if n > arrowWidth-4 {
		r := []rune(label)
		label, n = string(r[:arrowWidth-6])+"… ", arrowWidth-4
	}
	left := (arrowWidth - 2 - n) / 2
	right := arrowWidth - 2 - n - left
	var b strings.Builder
	b.WriteString("│")
	if a.FromA {
		b.WriteString(strings.Repeat("─", left+1))
		b.WriteString(label)
		switch {
		case a.Lost:
			b.WriteString(strings.Repeat("─", right-3) + "✗   ")
		case a.ICRC == wire.ICRCBad && a.Err == "":
			b.WriteString(strings.Repeat("─", right) + "✗")
		default:
			b.WriteString(strings.Repeat("─", right) + "▶")
		}
	} else {
		switch {
		case a.Lost:
			b.WriteString("   ✗" + strings.Repeat("─", left-3))
		case a.ICRC == wire.ICRCBad && a.Err == "":
			b.WriteString("✗" + strings.Repeat("─", left))
		default:
			b.WriteString("◀" + strings.Repeat("─", left))
		}
		b.WriteString(label)
		b.WriteString(strings.Repeat("─", right+1))
	}
	b.WriteString("│")
	return b.String()
}

// String names an endpoint: "10.77.0.1 QP 0x000011", with the port when it
// is not RoCEv2's ("127.0.0.1:40001 QP 0x000011"), and "QP ?" while its QP
// is unknown.
func (e Endpoint) String() string {
	s := e.Addr.String()
	if e.Port != 0 && e.Port != 4791 {
		s = fmt.Sprintf("%s:%d", s, e.Port)
		if e.Addr.Is6() {
			s = fmt.Sprintf("[%s]:%d", e.Addr, e.Port)
		}
	}
	if !e.QPKnown {
		return s + " QP ?"
	}
	return s + " QP " + hex6(e.QP)
}

// Summary counts the anomalies of arrows by kind, "no anomalies" if
// there are none: "290 bad ICRC, 55 retransmissions (55 timeout), 55
// duplicates".
func Summary(arrows []Arrow) string {
	var kinds [len(kindNames)]int
	var causes [len(causeNames)]int
	for i := range arrows {
		for _, an := range arrows[i].Anomalies {
			kinds[an.Kind]++
			causes[an.Cause]++
		}
	}
	var parts []string
	for k := Kind(1); int(k) < len(kinds); k++ {
		n := kinds[k]
		if n == 0 {
			continue
		}
		s := fmt.Sprintf("%d %v", n, k)
		if n > 1 && kindPlural[k] {
			s += "s"
		}
		if k == Retransmission {
			var cs []string
			for c := Cause(1); int(c) < len(causes); c++ {
				if causes[c] > 0 {
					cs = append(cs, fmt.Sprintf("%d %v", causes[c], c))
				}
			}
			s += " (" + strings.Join(cs, ", ") + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "no anomalies"
	}
	return strings.Join(parts, ", ")
}

// kindPlural: the kinds whose name takes an s for more than one.
var kindPlural = [len(kindNames)]bool{Retransmission: true, Duplicate: true, NAK: true, ImpliedNAK: true, Coalesced: true}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
