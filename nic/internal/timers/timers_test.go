package timers

import (
	"math"
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

// DueWhere takes the entries due that its predicate accepts, earliest
// first, and leaves the rest queued for Due; Next follows the earliest
// entry queued.
func TestDueWhere(t *testing.T) {
	var q Queue[int]
	q.Init()
	if got := q.Next(); got != math.MaxInt64 {
		t.Fatalf("Next of an empty queue: %v, want math.MaxInt64", got)
	}
	for i, at := range []qp.Time{30, 10, 20, 50, 40} {
		q.Add(at, i) // values 0..4; even ones are taken
	}
	if got := q.Next(); got != 10 {
		t.Fatalf("Next: %v, want 10", got)
	}
	even := func(v *int) bool { return *v%2 == 0 }
	var buf []Entry[int]
	buf = q.DueWhere(35, buf[:0], even)
	if want := []Entry[int]{{20, 2}, {30, 0}}; !slices.Equal(buf, want) {
		t.Fatalf("DueWhere(35): %v, want %v", buf, want)
	}
	if got := q.Next(); got != 10 {
		t.Fatalf("Next after DueWhere: %v, want 10 (the entry it left)", got)
	}
	buf, wait := q.Due(45, buf[:0])
	if want := []Entry[int]{{10, 1}, {40, 4}}; !slices.Equal(buf, want) || wait != 5 {
		t.Fatalf("Due(45): %v, %v; want %v, 5ns", buf, wait, want)
	}
	if got := q.Next(); got != 50 {
		t.Fatalf("Next: %v, want 50", got)
	}
	if buf = q.DueWhere(100, buf[:0], even); len(buf) != 0 || q.Next() != 50 {
		t.Fatalf("DueWhere(100) of an odd entry: %v, Next %v; want nothing taken, 50", buf, q.Next())
	}
	buf = make([]Entry[int], 0, 8)
	if n := testing.AllocsPerRun(100, func() {
		q.Add(60, 6)
		buf = q.DueWhere(100, buf[:0], even)
	}); n != 0 {
		t.Errorf("Add and DueWhere: %v allocations, want 0", n)
	}
}
