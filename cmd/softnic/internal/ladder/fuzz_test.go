package ladder

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/softnic/softnic/internal/golden"
	"github.com/softnic/softnic/wire"
)

// fuzzEnvs are the envelopes FuzzLadder's packets travel in: both ways
// between two hosts on RoCEv2's port, from another port, from a third host.
var fuzzEnvs = []wire.Envelope{
	envAB, envBA,
	{Src: netip.MustParseAddrPort("10.0.0.1:50000"), Dst: netip.MustParseAddrPort("10.0.0.2:4791")},
	{Src: netip.MustParseAddrPort("10.0.0.3:4791"), Dst: netip.MustParseAddrPort("10.0.0.1:4791")},
}

// FuzzLadder draws arbitrary packets: each is a control byte (its
// envelope, gap, and whether it was lost, held back or has a bad ICRC), a
// length byte and that many bytes, mutated from the seeds (the first
// packets of golden captures). No input may panic the ladder or its
// renderers; the text must be UTF-8 and the page well-formed.
func FuzzLadder(f *testing.F) {
	for _, name := range []string{"host_badicrc.pcap", "rping.pcap", "read_large.pcap", "atomic_fadd.pcap"} {
		path := filepath.Join(golden.Dir(), name)
		if files, _ := filepath.Glob(path); len(files) == 0 {
			continue
		}
		var in []byte
		var first netip.Addr
		for _, p := range capturePackets(f, path) {
			if !first.IsValid() {
				first = p.Env.Src.Addr()
			}
			ctl := byte(0) // A to B
			if p.Env.Src.Addr() != first {
				ctl = 1
			}
			data := p.Data[:min(len(p.Data), 255)]
			in = append(append(in, ctl, byte(len(data))), data...)
			if len(in) > 4096 {
				break
			}
		}
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		l := New(Options{Keep: 64})
		now := time.Unix(1, 0)
		for len(in) >= 2 {
			ctl, n := in[0], min(int(in[1]), len(in)-2)
			data := in[2 : 2+n]
			in = in[2+n:]
			now = now.Add(time.Duration(ctl&0x30) * time.Millisecond)
			p := Packet{Time: now, Env: fuzzEnvs[ctl&3], Data: data, ICRC: wire.ICRCOK, Lost: ctl&0x40 != 0}
			if ctl&0x80 != 0 {
				p.ICRC = wire.ICRCBad
			}
			if ctl&0x0c == 0x0c {
				p.Delayed = time.Millisecond
			}
			l.Add(&p)
		}
		var text, page bytes.Buffer
		if err := WriteText(&text, l); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bytes.ToValidUTF8(text.Bytes(), nil), text.Bytes()) {
			t.Fatal("the text is not UTF-8")
		}
		if err := WriteHTML(&page, l, "fuzz"); err != nil {
			t.Fatal(err)
		}
		parsePage(t, page.Bytes())
	})
}
