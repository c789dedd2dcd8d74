package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
	"github.com/softnic/softnic/wire"
)

func defineDecode(fs *flag.FlagSet) func(*invocation) error {
	var o decodeOptions
	fs.BoolVar(&o.verbose, "v", false, "also print every field of every header, one header per line")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per packet, with every field of every header, instead of lines")
	fs.BoolVar(&o.ladder, "ladder", false, "print the packets as a sequence diagram, two columns per conversation, naming retransmissions, NAKs and the like, instead of lines")
	fs.StringVar(&o.html, "html", "", "also write the sequence diagram to `FILE`, one HTML page that needs no network to view")
	fs.Func("ack-timeout", "the requesters' local ACK `TIMEOUT`, for the diagram to compare resends with: a duration (67ms) or an exponent as perftest's -u takes it (14: 4.096 µs × 2^14)", func(s string) error {
		if exp, err := strconv.ParseUint(s, 10, 8); err == nil && exp >= 1 && exp <= 31 {
			o.ackTimeout = ladder.ACKTimeout(uint8(exp))
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: want a duration such as 67ms or an exponent 1..31", s)
		}
		o.ackTimeout = d
		return nil
	})
	fs.Func("port", "also take UDP `PORT` for RoCEv2 whatever its datagrams hold (repeat for several); datagrams on other ports count when their ICRC verifies", func(s string) error {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("port %q: want 1..65535", s)
		}
		o.ports = append(o.ports, uint16(p))
		return nil
	})
	return func(inv *invocation) error {
		if err := inv.parse(1, 1); err != nil {
			return err
		}
		if o.json && (o.verbose || o.ladder) {
			return usagef("--json prints every field already: it goes with neither -v nor --ladder")
		}
		if o.ladder && o.verbose {
			return usagef("--ladder draws arrows, not fields: leave out -v")
		}
		name := inv.args[0]
		in := inv.stdin
		if name == "-" {
			name = "standard input"
		} else {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		return decodeCapture(inv.stdout, in, name, &o)
	}
}

// decodeOptions are decode's flags.
type decodeOptions struct {
	verbose, json, ladder bool
	html                  string
	ackTimeout            time.Duration
	ports                 []uint16
}

// decodeStats counts what decodeCapture saw.
type decodeStats struct {
	roce, badICRC, recovered, undecodable, otherPort, other int
	gso, pieces                                             int // UDP GSO sends captured whole, and the packets they carried
}

// decodeCapture prints the RoCEv2 packets of the pcap or pcapng capture
// read from in (named name in errors): one line each (appendPacketLine),
// with the header fields under it if verbose, then a line of counts; or one
// JSON object each; or the ladder; and writes the ladder's page if asked.
// UDP from or to port 4791 or one of o.ports is RoCEv2, and so is UDP on
// other ports that holds a packet whose ICRC verifies (wire.Frame.RoCE);
// other frames are counted and skipped; packets that do not decode are
// shown with the error and counted. It fails if in cannot be read or is
// not a capture, after printing what it read.
func decodeCapture(w io.Writer, in io.Reader, name string, o *decodeOptions) error {
	r, err := wire.NewPcapReader(bufio.NewReader(in))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, p := range o.ports {
		r.AddPort(p)
	}
	var lad *ladder.Ladder
	if o.ladder || o.html != "" {
		lad = ladder.New(ladder.Options{ACKTimeout: o.ackTimeout})
	}
	out := bufio.NewWriter(w)
	var (
		stats  decodeStats
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
			stats.other++
			continue
		}
		stats.roce++
		if !isRoCEPort(fr.Env, o.ports) {
			stats.otherPort++
		}
		if fr.Piece == 1 {
			stats.gso++
		}
		if fr.Piece > 0 {
			stats.pieces++
		}
		elapsed := fr.Time.Sub(first.Time)
		decErr := p.Decode(fr.Payload)
		switch {
		case decErr != nil:
			stats.undecodable++
		case fr.ICRC == wire.ICRCBad:
			stats.badICRC++
		case fr.ICRC == wire.ICRCRecovered:
			stats.recovered++
		}
		if lad != nil {
			lad.Add(&ladder.Packet{Time: fr.Time, Env: fr.Env, Data: fr.Payload, ICRC: fr.ICRC})
		}
		switch {
		case o.ladder:
		case o.json:
			if err := enc.Encode(newPacketJSON(n, elapsed, &fr, &p, decErr)); err != nil {
				return err
			}
		default:
			if decErr != nil {
				line = appendErrorLine(line[:0], elapsed, &fr.Env, len(fr.Payload), decErr)
			} else {
				line = appendPacketLine(line[:0], elapsed, &fr.Env, &p, fr.ICRC, fr.SealedIPID)
				if o.verbose {
					line = p.AppendVerbose(line)
				}
			}
			if _, err := out.Write(line); err != nil {
				return err
			}
		}
	}
	switch {
	case o.ladder:
		if err := ladder.WriteText(out, lad); err != nil {
			return err
		}
	case !o.json:
		fmt.Fprintf(out, "%s\n", stats.summary())
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if o.html != "" {
		if err := writeLadderPage(o.html, lad, "softnic decode "+name); err != nil {
			return err
		}
	}
	return readEr
}

// summary is the last line of decode's output: "45 RoCEv2 packets (0 bad
// ICRC, 0 undecodable), 39 other frames skipped", with the packets found on
// other ports and those whose ICRC needed another IP ID when there are
// any.
func (s *decodeStats) summary() string {
	text := fmt.Sprintf("%d RoCEv2 %s (%d bad ICRC, ", s.roce, plural(s.roce, "packet", "packets"), s.badICRC)
	if s.recovered > 0 {
		text += fmt.Sprintf("%d with the ICRC of another IP ID, ", s.recovered)
	}
	text += fmt.Sprintf("%d undecodable)", s.undecodable)
	if s.otherPort > 0 {
		text += fmt.Sprintf(", %d of them found by their ICRC on other UDP ports", s.otherPort)
	}
	if s.gso > 0 {
		text += fmt.Sprintf(", %d of them cut from %d UDP GSO %s captured whole", s.pieces, s.gso, plural(s.gso, "send", "sends"))
	}
	return text + fmt.Sprintf(", %d other %s skipped", s.other, plural(s.other, "frame", "frames"))
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

// writeLadderPage writes the ladder's HTML page to path.
func writeLadderPage(path string, l *ladder.Ladder, title string) error {
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
