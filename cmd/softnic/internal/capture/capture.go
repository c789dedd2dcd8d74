// Package capture writes the pcap file of softnic's devices (serve --pcap,
// the demo's, perftest's and rping's): the devices' goroutines write
// each packet through a buffer (nic.PcapTrace), which Flush writes out
// while they do.
package capture

import (
	"bufio"
	"errors"
	"os"
	"sync"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/wire"
)

// File is a pcap file the devices' goroutines write through a buffer
// (nic.PcapTrace), which Flush writes out while they do.
type File struct {
	path string
	f    *os.File
	mu   sync.Mutex // guards buf: trace writes and Flush come from different goroutines
	buf  *bufio.Writer
	err  error // the first error writing a packet
	w    *wire.PcapWriter
}

// Create creates (or truncates) the pcap file at path and writes its
// header.
func Create(path string) (*File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	c := &File{path: path, f: f}
	c.buf = bufio.NewWriterSize(f, 64<<10)
	if c.w, err = wire.NewPcapWriter(lockedWriter{c}); err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// Trace returns the nic.Config.Trace function that captures packets as
// they leave their sender: each packet once when the devices of both ends
// share the capture, as the demo's do.
func (c *File) Trace() func(*nic.TracePacket) { return nic.PcapTrace(c.w, false, c.fail) }

// TraceBoth returns a Trace function that also captures the packets the
// device receives, dropped ones included: a daemon's capture of its own
// traffic, as tcpdump on its interface would show it.
func (c *File) TraceBoth() func(*nic.TracePacket) { return nic.PcapTrace(c.w, true, c.fail) }

// fail records the first error of a write from a device's goroutine, for
// Flush and Close to return.
func (c *File) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// Flush writes the buffered packets to the file, so that a capture of a
// running daemon can be opened.
func (c *File) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return c.buf.Flush()
}

// Close flushes and closes the file. The devices writing to it must be
// closed first.
func (c *File) Close() error {
	return errors.Join(c.Flush(), c.f.Close())
}

// lockedWriter writes to the capture's buffer under its lock.
type lockedWriter struct{ c *File }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.buf.Write(b)
}

// Tee returns a Trace function calling each of fns.
func Tee(fns ...func(*nic.TracePacket)) func(*nic.TracePacket) {
	return func(tp *nic.TracePacket) {
		for _, fn := range fns {
			fn(tp)
		}
	}
}
