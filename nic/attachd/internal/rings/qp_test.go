package rings

import (
	"errors"
	"testing"

	"github.com/softnic/softnic/nic/shm"
)

// TestPosted: a producer index the process writes is taken when it is at
// most a ring's worth past the requests fetched and the requests
// finished, across the 32-bit wrap, and refused as corrupt otherwise.
func TestPosted(t *testing.T) {
	const slots = 8
	mem := make([]byte, shm.RingSize(slots, shm.RecvSlotSize(1)))
	ring, err := shm.NewRing(mem, slots, shm.RecvSlotSize(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		prod, fetched uint32
		queued        int
		corrupt       bool
	}{
		{"nothing new", 5, 5, 0, false},
		{"one new", 6, 5, 0, false},
		{"a full ring, none queued", 13, 5, 0, false},
		{"a full ring with the fetched still queued", 8, 5, 5, false},
		{"one past a full ring", 14, 5, 0, true},
		{"past the finished ones by more than the ring", 9, 5, 5, true},
		{"behind the fetched ones", 4, 5, 0, true},
		{"across the wrap", 3, 0xfffffffe, 0, false},
		{"across the wrap, one too many", 7, 0xfffffffe, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ring.Producer().Store(tc.prod)
			got, err := posted(ring, "test", tc.fetched, tc.queued)
			if tc.corrupt {
				if !errors.Is(err, shm.ErrCorrupt) {
					t.Errorf("posted = %d, %v; want ErrCorrupt", got, err)
				}
				return
			}
			if err != nil || got != tc.prod {
				t.Errorf("posted = %d, %v; want %d", got, err, tc.prod)
			}
		})
	}
}
