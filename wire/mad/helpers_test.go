package mad

import (
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
)

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
