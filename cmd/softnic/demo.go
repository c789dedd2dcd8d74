package main

import (
	"flag"
	"strings"

	"github.com/softnic/softnic/cmd/softnic/internal/demo"
	"github.com/softnic/softnic/cmd/softnic/internal/scenario"
	"github.com/softnic/softnic/wire"
)

// softnic demo's command line; the demo is package demo's.

func defineDemo(fs *flag.FlagSet) func(*invocation) error {
	pcap := fs.String("pcap", "", "also write every packet to `FILE`, for Wireshark")
	mtu := addMTUFlag(fs, 1024, "the NICs' path `MTU`: 256, 512, 1024, 2048 or 4096 (1024 is rxe's on a 1500-byte Ethernet link)")
	name := fs.String("scenario", "", "instead of the tour, tell the story of one thing going wrong on the link, `NAME` one of: "+
		strings.Join(scenario.Names(), ", "))
	step := fs.Bool("step", false, "wait for Enter before each step")
	html := fs.String("html", "", "also write the ladder of the packets to `FILE`, one HTML page that needs no network to view")
	return func(inv *invocation) error {
		if err := inv.parse(0, 0); err != nil {
			return err
		}
		if _, ok := wire.MTUFromBytes(mtu.Val); !ok {
			return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", mtu.Val)
		}
		o := demo.Options{MTU: mtu.Val, CMPort: defaultCMPort, Pcap: *pcap, HTML: *html}
		if *step {
			o.Step = inv.stdin
		}
		if *name == "" {
			return demo.Tour(inv.ctx, inv.stdout, &o)
		}
		s := scenario.Lookup(*name)
		if s == nil {
			return usagef("--scenario %q: want one of %s", *name, strings.Join(scenario.Names(), ", "))
		}
		return demo.Scenario(inv.ctx, inv.stdout, s, &o)
	}
}
