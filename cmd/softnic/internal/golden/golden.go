// Package golden finds the captures of Linux rxe that the tests of
// cmd/softnic's packages compare with: ../shared/golden beside the
// repository (see its README.md), which a clone on its own lacks.
package golden

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/softnic/softnic/wire"
)

// Dir is the directory of the captures.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "..", "shared", "golden")
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
	f, err := os.Open(Path(t, name))
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
