package mad

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softnic/softnic/wire"
)

// goldenDir holds captures of Linux Soft-RoCE (rdma_rxe, kernel 6.1) made
// with ../shared/lab/rxe; its README.md describes each file.
var goldenDir = filepath.Join("..", "..", "..", "shared", "golden")

// goldenFrame is a RoCEv2 frame copied out of a capture.
type goldenFrame struct {
	n       int // frame number in the file, from 1
	env     wire.Envelope
	ipudp   []byte
	payload []byte
}

// readGolden returns the RoCEv2 frames of a capture.
func readGolden(t testing.TB, path string) []goldenFrame {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := wire.NewPcapReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var frames []goldenFrame
	for n := 1; ; n++ {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		if fr.RoCE {
			frames = append(frames, goldenFrame{n: n, env: fr.Env, ipudp: bytes.Clone(fr.IPUDP), payload: bytes.Clone(fr.Payload)})
		}
	}
}

// unhex decodes a hex string and fails the test on error.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectField checks that the first occurrence of a tshark field holds the
// number want.
func expectField(t *testing.T, col map[string]string, field string, want uint64) {
	t.Helper()
	first, _, _ := strings.Cut(col[field], ",")
	got, err := strconv.ParseUint(first, 0, 64)
	if err != nil || got != want {
		t.Errorf("%s = %q, want %d (%#x)", field, col[field], want, want)
	}
}

func boolValue(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
