package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestUpdateBulk: the ICRC's payload CRC equals hash/crc32's for every
// length around the fold's thresholds and steps, from any start in memory
// and any register.
func TestUpdateBulk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 2200; n++ {
		for _, off := range []int{0, 1, 7, 13} {
			p := buf[off : off+n]
			crc := rng.Uint32()
			if got, want := updateBulk(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
				t.Fatalf("length %d at offset %d from %#x: %#x, want %#x", n, off, crc, got, want)
			}
		}
	}
	for _, n := range []int{4096, 4096 + 28, 8192 - 3, len(buf) - 16} {
		p := buf[16 : 16+n]
		if got, want := updateBulk(0, p), crc32.ChecksumIEEE(p); got != want {
			t.Fatalf("length %d: %#x, want %#x", n, got, want)
		}
	}
}
