package keyspace

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestIncRKey(t *testing.T) {
	tests := []struct{ in, want uint32 }{
		{0x00012300, 0x00012301},
		{0x000123fe, 0x000123ff},
		{0x000123ff, 0x00012300}, // the variant wraps, the index stays
		{0xffffffff, 0xffffff00},
	}
	for _, tc := range tests {
		if got := IncRKey(tc.in); got != tc.want {
			t.Errorf("IncRKey(%#x) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}

// TestFeistelIsAPermutation: encrypt and decrypt undo each other, and
// encrypt maps a whole small domain onto itself.
func TestFeistelIsAPermutation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []uint8{12, 23, 31} {
		f := newFeistel(bits, rng)
		for range 10000 {
			x := rng.Uint32() & (1<<bits - 1)
			if y := f.encrypt(x); y>>bits != 0 || f.decrypt(y) != x {
				t.Fatalf("%d bits: %#x → %#x → %#x", bits, x, y, f.decrypt(y))
			}
		}
	}
	f := newFeistel(12, rng)
	seen := make([]bool, 1<<12)
	for x := range uint32(1 << 12) {
		seen[f.encrypt(x)] = true
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Errorf("12 bits: nothing maps to %#x", i)
	}
}
