package shm

import (
	"slices"
	"sync"
	"testing"
)

func newTestDoorbell(t *testing.T) Doorbell {
	t.Helper()
	d, err := NewDoorbell(make([]byte, DoorbellSize))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// taken returns the slots d.Take yields, in order.
func taken(d Doorbell) []uint32 {
	var got []uint32
	for slot := range d.Take {
		got = append(got, slot)
	}
	return got
}

func TestDoorbellMarks(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark []uint32
		want []uint32
	}{
		{"none", nil, nil},
		{"one", []uint32{5}, []uint32{5}},
		{"twice counts once", []uint32{5, 5}, []uint32{5}},
		{"word edges", []uint32{63, 64, 0, 127}, []uint32{0, 63, 64, 127}},
		{"summary edges", []uint32{4095, 4096, MaxSlots - 1}, []uint32{4095, 4096, MaxSlots - 1}},
		{"beyond the page", []uint32{MaxSlots, 1 << 31, 1<<32 - 1, 7}, []uint32{7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDoorbell(t)
			for _, s := range tc.mark {
				d.Mark(s)
			}
			if got := taken(d); !slices.Equal(got, tc.want) {
				t.Errorf("Take yields %v, want %v", got, tc.want)
			}
			if got := taken(d); got != nil {
				t.Errorf("a second Take yields %v, want nothing", got)
			}
		})
	}
}

// TestDoorbellGarbage: whatever a process writes into the page, Take
// yields slots below MaxSlots, each once, and leaves the marks clear.
func TestDoorbellGarbage(t *testing.T) {
	for _, fill := range []byte{0xff, 0x5a, 0x01} {
		mem := make([]byte, DoorbellSize)
		for i := range mem {
			mem[i] = fill
		}
		d, _ := NewDoorbell(mem)
		got := taken(d)
		seen := map[uint32]bool{}
		for _, s := range got {
			if s >= MaxSlots || seen[s] {
				t.Fatalf("fill %#x: Take yields slot %d (seen before: %v)", fill, s, seen[s])
			}
			seen[s] = true
		}
		if fill == 0xff && len(got) != MaxSlots {
			t.Errorf("a page of ones yields %d slots, want %d", len(got), MaxSlots)
		}
		if again := taken(d); again != nil {
			t.Errorf("fill %#x: a second Take yields %d slots", fill, len(again))
		}
	}
}

// TestDoorbellTakeStopped: the marks a loop over Take did not reach are
// yielded by the next Take.
func TestDoorbellTakeStopped(t *testing.T) {
	d := newTestDoorbell(t)
	marks := []uint32{1, 2, 3, 70, 5000}
	for _, s := range marks {
		d.Mark(s)
	}
	var first []uint32
	for slot := range d.Take {
		first = append(first, slot)
		if len(first) == 2 {
			break
		}
	}
	if rest := taken(d); !slices.Equal(append(first, rest...), marks) {
		t.Errorf("Take stopped after %v, then yields %v; want %v in all", first, rest, marks)
	}
}

// TestDoorbellConcurrent: marks made while the daemon takes them are all
// yielded, by the Take under way or a later one (run it with -race).
func TestDoorbellConcurrent(t *testing.T) {
	d := newTestDoorbell(t)
	const posters, perPoster = 4, 2000
	var wg sync.WaitGroup
	marked := make([][]uint32, posters)
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perPoster {
				slot := uint32((i*posters + p) * 37 % MaxSlots)
				d.Mark(slot)
				marked[p] = append(marked[p], slot)
			}
		}()
	}
	seen := map[uint32]bool{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		for slot := range d.Take {
			seen[slot] = true
		}
	}
	for p := range marked {
		for _, slot := range marked[p] {
			if !seen[slot] {
				t.Fatalf("slot %d was marked and never taken", slot)
			}
		}
	}
}

func TestDoorbellDoesNotAllocate(t *testing.T) {
	d := newTestDoorbell(t)
	n := 0
	if a := testing.AllocsPerRun(100, func() {
		d.Mark(3)
		d.Mark(9000)
		for range d.Take {
			n++
		}
	}); a != 0 {
		t.Errorf("Mark and Take allocate %v times per run", a)
	}
	if n != 2*101 {
		t.Errorf("took %d marks, want %d", n, 2*101)
	}
}

// BenchmarkDoorbellMarkTake: what a post to an idle QP adds (Mark) and
// what the daemon's look at the marks costs (Take), for one QP.
func BenchmarkDoorbellMarkTake(b *testing.B) {
	d, _ := NewDoorbell(make([]byte, DoorbellSize))
	n := 0
	b.ReportAllocs()
	for range b.N {
		d.Mark(4711)
		for range d.Take {
			n++
		}
	}
	if n != b.N {
		b.Fatalf("took %d marks of %d", n, b.N)
	}
}
