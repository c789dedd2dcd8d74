package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/decode"
	"github.com/softnic/softnic/cmd/softnic/internal/ladder"
)

// softnic decode's command line; the decoding is package decode's.

func defineDecode(fs *flag.FlagSet) func(*invocation) error {
	var o decode.Options
	fs.BoolVar(&o.Verbose, "v", false, "also print every field of every header, one header per line")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object per packet, with every field of every header, instead of lines")
	fs.BoolVar(&o.Ladder, "ladder", false, "print the packets as a sequence diagram, two columns per conversation, naming retransmissions, NAKs and the like, instead of lines")
	fs.StringVar(&o.HTML, "html", "", "also write the sequence diagram to `FILE`, one HTML page that needs no network to view")
	fs.Func("ack-timeout", "the requesters' local ACK `TIMEOUT`, for the diagram to compare resends with: a duration (67ms) or an exponent as perftest's -u takes it (14: 4.096 µs × 2^14)", func(s string) error {
		if exp, err := strconv.ParseUint(s, 10, 8); err == nil && exp >= 1 && exp <= 31 {
			o.ACKTimeout = ladder.ACKTimeout(uint8(exp))
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: want a duration such as 67ms or an exponent 1..31", s)
		}
		o.ACKTimeout = d
		return nil
	})
	fs.Func("port", "also take UDP `PORT` for RoCEv2 whatever its datagrams hold (repeat for several); datagrams on other ports count when their ICRC verifies", func(s string) error {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("port %q: want 1..65535", s)
		}
		o.Ports = append(o.Ports, uint16(p))
		return nil
	})
	return func(inv *invocation) error {
		if err := inv.parse(1, 1); err != nil {
			return err
		}
		if o.JSON && (o.Verbose || o.Ladder) {
			return usagef("--json prints every field already: it goes with neither -v nor --ladder")
		}
		if o.Ladder && o.Verbose {
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
		return decode.Capture(inv.stdout, in, name, &o)
	}
}
