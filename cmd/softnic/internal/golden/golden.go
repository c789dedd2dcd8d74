// Package golden finds the captures of Linux rxe that the tests of
// cmd/softnic's packages compare with: ../shared/golden beside the
// repository (see its README.md), which a clone on its own lacks.
package golden

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
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
