package demo

import (
	"io"
	"sync"
	"time"

	"github.com/softnic/softnic/cmd/softnic/internal/decode"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// printer writes the demo's output: sentences and packet lines, from the
// demo's goroutine and from the devices' reader and timer goroutines, one
// whole line at a time and in the order they happened.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	pkt   wire.Packet
	line  []byte
	err   error // the first write error; later writes are skipped
	// seen, if set, is called with each packet traced, sent or received,
	// that decodes, under the printer's lock.
	seen func(*nic.TracePacket, *wire.Packet)
}

func newPrinter(w io.Writer) *printer {
	return &printer{w: w, start: time.Now()}
}

// say writes text as a line of its own.
func (p *printer) say(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.line = append(append(p.line[:0], text...), '\n')
	p.writeLocked()
}

// trace is a nic.Config.Trace function: it prints every packet as it
// leaves its sender, in softnic decode's format (decode.AppendPacketLine), timed
// from the printer's start. Received packets are printed only when the
// receiver dropped them, with the reason on the next line: each packet is
// otherwise shown once, as a capture on the wire would show it. A note of
// the fault injector follows its packet the same way.
func (p *printer) trace(tp *nic.TracePacket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.pkt.Decode(tp.Data)
	if err == nil && p.seen != nil {
		p.seen(tp, &p.pkt)
	}
	if tp.Dir == nic.Received && tp.Note == "" {
		return
	}
	t := tp.Time.Sub(p.start)
	if err != nil {
		p.line = decode.AppendErrorLine(p.line[:0], t, &tp.Env, len(tp.Data), err)
	} else {
		p.line = decode.AppendPacketLine(p.line[:0], t, &tp.Env, &p.pkt, decode.ICRCStatus(tp.Env.Check(tp.Data)), 0)
	}
	if tp.Note != "" {
		p.line = append(p.line, "    ("...)
		if tp.Dir == nic.Received {
			p.line = append(p.line, "at the receiver: "...)
		}
		p.line = append(append(p.line, tp.Note...), ")\n"...)
	}
	p.writeLocked()
}

func (p *printer) writeLocked() {
	if p.err == nil {
		_, p.err = p.w.Write(p.line)
	}
}

// Err returns the first error writing the output.
func (p *printer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
