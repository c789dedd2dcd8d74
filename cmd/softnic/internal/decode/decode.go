// Package decode prints the RoCEv2 packets of a pcap or pcapng capture,
// for softnic decode: one line each, with their headers' fields, as JSON
// objects, or as a ladder (package ladder); and the line softnic prints
// for a packet, which the demo's live trace prints too.
package decode

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/wire"
	"github.com/softnic/softnic/wire/mad"
)

// Options are softnic decode's flags.
type Options struct {
	Verbose, JSON, Ladder bool
	HTML                  string        // also write the ladder's page to this file
	ACKTimeout            time.Duration // the requesters' local ACK timeout, for the ladder
	Ports                 []uint16      // UDP ports that carry RoCEv2 besides 4791
}

// stats counts what Capture saw.
type stats struct {
	roce, badICRC, recovered, undecodable, otherPort, other int
	gso, pieces                                             int // UDP GSO sends captured whole, and the packets they carried
}

// Capture prints the RoCEv2 packets of the pcap or pcapng capture
// read from in (named name in errors): one line each (AppendPacketLine),
// with the header fields under it if verbose, then a line of counts; or one
// JSON object each; or the ladder; and writes the ladder's page if asked.
// UDP from or to port 4791 or one of o.Ports is RoCEv2, and so is UDP on
// other ports that holds a packet whose ICRC verifies (wire.Frame.RoCE);
// other frames are counted and skipped; packets that do not decode are
// shown with the error and counted. It fails if in cannot be read or is
// not a capture, after printing what it read.
func Capture(w io.Writer, in io.Reader, name string, o *Options) error {
	r, err := wire.NewPcapReader(bufio.NewReader(in))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, p := range o.Ports {
		r.AddPort(p)
	}
	var lad *ladder.Ladder
	if o.Ladder || o.HTML != "" {
		lad = ladder.New(ladder.Options{ACKTimeout: o.ACKTimeout})
	}
	out := bufio.NewWriter(w)
	var (
		st     stats
		p      wire.Packet
		line   []byte
		first  wire.Frame
		readEr error
		enc    = json.NewEncoder(out)
	)
	for n := 1; ; n++ {
		fr, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readEr = fmt.Errorf("%s: %w", name, err)
			}
			break
		}
		if n == 1 {
			first = fr
		}
		if !fr.RoCE {
			st.other++
			continue
		}
		st.roce++
		if !isRoCEPort(fr.Env, o.Ports) {
			st.otherPort++
		}
		if fr.Piece == 1 {
			st.gso++
		}
		if fr.Piece > 0 {
			st.pieces++
		}
		elapsed := fr.Time.Sub(first.Time)
		decErr := p.Decode(fr.Payload)
		switch {
		case decErr != nil:
			st.undecodable++
		case fr.ICRC == wire.ICRCBad:
			st.badICRC++
		case fr.ICRC == wire.ICRCRecovered:
			st.recovered++
		}
		if lad != nil {
			lad.Add(&ladder.Packet{Time: fr.Time, Env: fr.Env, Data: fr.Payload, ICRC: fr.ICRC})
		}
		switch {
		case o.Ladder:
		case o.JSON:
			if err := enc.Encode(newPacketJSON(n, elapsed, &fr, &p, decErr)); err != nil {
				return err
			}
		default:
			if decErr != nil {
				line = AppendErrorLine(line[:0], elapsed, &fr.Env, len(fr.Payload), decErr)
			} else {
				line = AppendPacketLine(line[:0], elapsed, &fr.Env, &p, fr.ICRC, fr.SealedIPID)
				if o.Verbose {
					line = mad.AppendPacketVerbose(line, &p)
				}
			}
			if _, err := out.Write(line); err != nil {
				return err
			}
		}
	}
	switch {
	case o.Ladder:
		if err := ladder.WriteText(out, lad); err != nil {
			return err
		}
	case !o.JSON:
		fmt.Fprintf(out, "%s\n", st.summary())
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if o.HTML != "" {
		if err := WriteLadderPage(o.HTML, lad, "softnic decode "+name); err != nil {
			return err
		}
	}
	return readEr
}

// summary is the last line of decode's output: "45 RoCEv2 packets (0 bad
// ICRC, 0 undecodable), 39 other frames skipped", with the packets found on
// other ports and those whose ICRC needed another IP ID when there are
// any.
func (s *stats) summary() string {
	text := fmt.Sprintf("%d RoCEv2 %s (%d bad ICRC, ", s.roce, Plural(s.roce, "packet", "packets"), s.badICRC)
	if s.recovered > 0 {
		text += fmt.Sprintf("%d with the ICRC of another IP ID, ", s.recovered)
	}
	text += fmt.Sprintf("%d undecodable)", s.undecodable)
	if s.otherPort > 0 {
		text += fmt.Sprintf(", %d of them found by their ICRC on other UDP ports", s.otherPort)
	}
	if s.gso > 0 {
		text += fmt.Sprintf(", %d of them cut from %d UDP GSO %s captured whole", s.pieces, s.gso, Plural(s.gso, "send", "sends"))
	}
	return text + fmt.Sprintf(", %d other %s skipped", s.other, Plural(s.other, "frame", "frames"))
}

// isRoCEPort reports whether a datagram is from or to 4791 or one of ports.
func isRoCEPort(env wire.Envelope, ports []uint16) bool {
	for _, p := range append([]uint16{wire.UDPPort}, ports...) {
		if env.Src.Port() == p || env.Dst.Port() == p {
			return true
		}
	}
	return false
}

// WriteLadderPage writes the ladder's HTML page to path.
func WriteLadderPage(path string, l *ladder.Ladder, title string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ladder.WriteHTML(f, l, title); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Plural returns one or many by n, for the counts softnic's messages
// print.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
