package spin

import (
	"strings"
	"testing"
	"time"
)

// The budgets a policy gives over a sequence of waits. Each word of waits
// is one wait: S a spin that finds its completion; F a spin that finds
// nothing, then a sleep; - a wait told to sleep at once. A sleep's letter
// says how long it took to its completion: l longer than the budget, s
// shorter. A wait that gets a budget where the word says -, or none where
// it says S or F, fails the case.
func TestPolicyBacksOffAfterFailedSpins(t *testing.T) {
	const budget = 50 * time.Microsecond
	for _, tc := range []struct {
		name, waits string
	}{
		{"spins that succeed keep spinning", "S S S S S"},
		{"one failure in a row keeps spinning", "S Fl S Fs S Fl S"},
		{"two failures skip one wait", "Fl Fl -l S"},
		{"failed probes double the skip", "Fl Fl -l Fl -l -l Fl -l -l -l -l S"},
		{"a success resets the skip", "Fl Fl -l Fl -l -l S Fl Fl -l S"},
		// The peer was slow: once a sleep is short again, spin again.
		{"a short sleep after slow failures ends the skip", "Fl Fl -l Fl -s S"},
		// The spinner kept the peer from its CPU: short sleeps prove nothing.
		{"a short sleep after quick failures does not", "Fs Fs -s Fs -s -s Fs -s -s -s -s S"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(budget)
			for i, w := range strings.Fields(tc.waits) {
				b := p.Budget()
				switch {
				case w[0] == '-' && b != 0:
					t.Fatalf("wait %d (%s): budget %v, want 0", i, w, b)
				case w[0] != '-' && b != budget:
					t.Fatalf("wait %d (%s): budget %v, want %v", i, w, b, budget)
				case w[0] != '-':
					p.Spun(w[0] == 'S')
				}
				if len(w) > 1 {
					d := budget / 2
					if w[1] == 'l' {
						d = 2 * budget
					}
					p.Slept(d, w[0] == 'F')
				}
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
