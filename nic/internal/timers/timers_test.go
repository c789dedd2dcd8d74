package timers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softnic/softnic/qp"
)

// The timer heap hands entries back earliest first, whatever the order
// they came in, with equal times and pops between pushes; a push does not
// allocate once the heap has room.
func TestTimerHeap(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   []qp.Time
	}{
		{"empty", nil},
		{"one", []qp.Time{5}},
		{"ascending", []qp.Time{1, 2, 3, 4, 5, 6, 7}},
		{"descending", []qp.Time{7, 6, 5, 4, 3, 2, 1}},
		{"equal times", []qp.Time{3, 3, 1, 3, 1, 2, 2}},
		{"random", func() []qp.Time {
			r := rand.New(rand.NewPCG(1, 2))
			at := make([]qp.Time, 500)
			for i := range at {
				at[i] = qp.Time(r.IntN(100))
			}
			return at
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h heap[int]
			var pending []qp.Time // what the heap holds, sorted
			pop := func() {
				t.Helper()
				if got := h.pop().At; got != pending[0] {
					t.Fatalf("popped %v with %v pending, want the earliest", got, pending)
				}
				pending = pending[1:]
			}
			for i, at := range tc.at {
				h.push(Entry[int]{At: at})
				pos, _ := slices.BinarySearch(pending, at)
				pending = slices.Insert(pending, pos, at)
				if i%3 == 2 { // pop between pushes
					pop()
				}
			}
			for len(pending) > 0 {
				pop()
			}
			if len(h) != 0 {
				t.Fatalf("%d entries left after popping all", len(h))
			}
		})
	}
	var h heap[int]
	h.push(Entry[int]{At: 1})
	h.pop()
	if n := testing.AllocsPerRun(100, func() { h.push(Entry[int]{At: 2}); h.pop() }); n != 0 {
		t.Errorf("push and pop: %v allocations, want 0", n)
	}
}
