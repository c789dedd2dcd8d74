package spin

import (
	"strings"
	"testing"
	"time"
)

// The budgets a policy gives over a sequence of waits: each letter of
// waits is one wait, S a spin that finds its completion, F one that finds
// nothing; a wait given no budget does not spin, and its letter says
// nothing. want has one letter per wait: s when it was given the budget,
// - when it was told to sleep at once.
func TestPolicyBacksOffAfterFailedSpins(t *testing.T) {
	const budget = 50 * time.Microsecond
	for _, tc := range []struct {
		name, waits, want string
	}{
		{"spins that succeed keep spinning", "SSSSS", "sssss"},
		{"one failure in a row keeps spinning", "SFSFSFS", "sssssss"},
		{"two failures skip one wait", "FFxS", "ss-s"},
		{"failed probes double the skip", "FFxFxxFxxxxS", "ss-s--s----s"},
		{"a success resets the skip", "FFxFxxSFFxS", "ss-s--sss-s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(budget)
			var got strings.Builder
			for _, w := range tc.waits {
				b := p.Budget()
				switch {
				case b == 0:
					got.WriteByte('-')
					continue
				case b != budget:
					t.Fatalf("budget %v, want %v or 0", b, budget)
				}
				got.WriteByte('s')
				p.Spun(w == 'S')
			}
			if got.String() != tc.want {
				t.Errorf("waits %s: budgets %s, want %s", tc.waits, got.String(), tc.want)
			}
		})
	}
}

// However long spinning keeps failing, a policy gives a spin at least once
// every MaxSkip+1 waits, so that it finds out when spinning pays again.
func TestPolicySkipIsBounded(t *testing.T) {
	p := NewPolicy(time.Microsecond)
	sinceSpin := 0
	for i := range 100 * MaxSkip {
		if p.Budget() == 0 {
			if sinceSpin++; sinceSpin > MaxSkip {
				t.Fatalf("wait %d: %d waits without a spin, want %d at most", i, sinceSpin, MaxSkip)
			}
			continue
		}
		sinceSpin = 0
		p.Spun(false)
	}
}

// A policy without a budget never spins.
func TestPolicyWithoutBudget(t *testing.T) {
	for _, budget := range []time.Duration{0, -time.Microsecond} {
		p := NewPolicy(budget)
		for range 3 {
			if b := p.Budget(); b != 0 {
				t.Errorf("NewPolicy(%v).Budget() = %v, want 0", budget, b)
			}
		}
	}
}
