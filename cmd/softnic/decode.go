package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/softnic/softnic/wire"
)

func defineDecode(fs *flag.FlagSet) func(*invocation) error {
	verbose := fs.Bool("v", false, "also print every field of every header, one header per line")
	var ports []uint16
	fs.Func("port", "also take UDP `PORT` for RoCEv2 besides 4791 (repeat for several): for captures of devices listening elsewhere", func(s string) error {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("port %q: want 1..65535", s)
		}
		ports = append(ports, uint16(p))
		return nil
	})
	return func(inv *invocation) error {
		if err := inv.parse(1, 1); err != nil {
			return err
		}
		return decodeFile(inv.stdout, inv.args[0], *verbose, ports...)
	}
}

// decodeStats counts what decodeFile saw.
type decodeStats struct {
	roce, badICRC, undecodable, other int
}

// decodeFile prints one line per RoCEv2 packet of the pcap file at path
// (see appendPacketLine), with the header fields under it if verbose, and a
// final line of counts. UDP from or to port 4791, or one of ports, is
// RoCEv2; other frames are counted and skipped; packets that do not decode
// are printed with the error and counted. It fails if the file cannot be
// read or is not a pcap file.
func decodeFile(w io.Writer, path string, verbose bool, ports ...uint16) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := wire.NewPcapReader(bufio.NewReader(f))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range ports {
		r.AddPort(p)
	}
	out := bufio.NewWriter(w)
	var (
		stats  decodeStats
		p      wire.Packet
		line   []byte
		first  wire.Frame
		start  = true
		readEr error
	)
	for {
		fr, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readEr = fmt.Errorf("%s: %w", path, err)
			}
			break
		}
		if start {
			first, start = fr, false
		}
		if !fr.RoCE {
			stats.other++
			continue
		}
		stats.roce++
		elapsed := fr.Time.Sub(first.Time)
		if err := p.Decode(fr.Payload); err != nil {
			stats.undecodable++
			line = appendErrorLine(line[:0], elapsed, &fr.Env, len(fr.Payload), err)
		} else {
			ok := icrcOK(&fr, &p)
			if !ok {
				stats.badICRC++
			}
			line = appendPacketLine(line[:0], elapsed, &fr.Env, &p, ok)
			if verbose {
				line = p.AppendVerbose(line)
			}
		}
		if _, err := out.Write(line); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d RoCEv2 %s (%d bad ICRC, %d undecodable), %d other %s skipped\n",
		stats.roce, plural(stats.roce, "packet", "packets"), stats.badICRC, stats.undecodable,
		stats.other, plural(stats.other, "frame", "frames"))
	if err := out.Flush(); err != nil {
		return err
	}
	return readEr
}

// icrcOK verifies a captured packet's ICRC against the IP and UDP headers it
// was captured with. A packet whose ICRC cannot be computed (IPv4 options,
// IPv6 extension headers) counts as bad: rxe would drop it too.
func icrcOK(fr *wire.Frame, p *wire.Packet) bool {
	icrc, err := wire.ICRCFromHeaders(fr.IPUDP, p.Raw[:len(p.Raw)-wire.ICRCSize])
	return err == nil && icrc == p.ICRC()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
