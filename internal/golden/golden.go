// Package golden gives tests the captures of Linux rxe they compare with:
// ../shared/golden beside the repository (see its README.md), which a clone
// on its own lacks, and the RoCEv2 frames in a capture. Package wire's
// tests that read them are in package wire_test, since this package imports
// wire.
package golden

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/softnic/softnic/wire"
)

// Dir is the directory of the captures.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "golden")
}

// Path returns the path of the capture name, or skips t if it is not
// there.
func Path(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(Dir(), name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("golden capture %s not available (%v); skipping", path, err)
	}
	return path
}

// Reader opens the capture name for reading, closed when t ends, or skips
// t if it is not there.
func Reader(t testing.TB, name string) *wire.PcapReader {
	t.Helper()
	return Open(t, Path(t, name))
}

// Open opens the capture file at path for reading, closed when t ends,
// failing t if it cannot be read.
func Open(t testing.TB, path string) *wire.PcapReader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r, err := wire.NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Frame is a RoCEv2 frame of a capture, its bytes copied out of the
// reader's buffer.
type Frame struct {
	N int // the frame's number in the file, from 1
	wire.Frame
}

// Frames returns the RoCEv2 frames of the capture file at path, failing t
// if it cannot be read.
func Frames(t testing.TB, path string) []Frame {
	t.Helper()
	r := Open(t, path)
	var frames []Frame
	for n := 1; ; n++ {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		if fr.RoCE {
			fr.Data, fr.IPUDP, fr.Payload = bytes.Clone(fr.Data), bytes.Clone(fr.IPUDP), bytes.Clone(fr.Payload)
			frames = append(frames, Frame{N: n, Frame: fr})
		}
	}
}
