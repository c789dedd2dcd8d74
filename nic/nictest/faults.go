package nictest

import (
	"sync"

	"github.com/softnic/softnic/netem"
	"github.com/softnic/softnic/nic"
)

// Faults switches faults on and off, while a test runs, on the packets one
// device sends: one direction of a pair. A rule (netem.Rule) picks packets by
// opcode, destination QP and PSN, and hits as many as its Count; random
// faults (SetRandom) hit any packet with their probabilities, drawn from
// the test's seed. Rules are tried in the order they were switched on,
// before the random faults. It is safe for concurrent use.
type Faults struct {
	dev  *nic.Device
	seed uint64

	mu     sync.Mutex
	rules  []*Fault
	random *netem.Injector
}

// Fault is one rule switched on (Faults.Add).
type Fault struct {
	f    *Faults
	rule netem.Rule
	in   *netem.Injector // of the rule alone, which keeps its Count
	hits int
}

func newFaults(dev *nic.Device, seed uint64) (*Faults, error) {
	f := &Faults{dev: dev, seed: seed}
	return f, dev.SetFaults(f)
}

// Add switches rule on and returns it, to switch it off or count what it
// hit.
func (f *Faults) Add(rule netem.Rule) *Fault {
	r := &Fault{f: f, rule: rule, in: netem.NewInjector(netem.Faults{Rules: []netem.Rule{rule}})}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return r
}

// SetRandom switches the random faults of p on (p.Rules too, tried after
// the rules of Add), or, with the zero Faults, off. A p.Seed of 0 takes
// the test's seed, so that a run repeats with Options.Seed.
func (f *Faults) SetRandom(p netem.Faults) {
	if p.Seed == 0 {
		p.Seed = f.seed
	}
	var in *netem.Injector
	if p.Enabled() {
		in = netem.NewInjector(p)
	}
	f.mu.Lock()
	f.random = in
	f.mu.Unlock()
}

// Clear switches every fault off.
func (f *Faults) Clear() {
	f.mu.Lock()
	f.rules, f.random = nil, nil
	f.mu.Unlock()
}

// Decide is the device's nic.FaultInjector: the fate of the first rule
// that hits pkt, else the random faults'.
func (f *Faults) Decide(pkt []byte) netem.Fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if fate := r.in.Decide(pkt); fate != pass {
			r.hits++
			return fate
		}
	}
	if f.random != nil {
		return f.random.Decide(pkt)
	}
	return pass
}

// pass is the fate of a packet no fault hits.
var pass = netem.Fate{CorruptBit: -1}

// Off switches the rule off; the packets it holds back are still
// released.
func (r *Fault) Off() {
	f := r.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.rules {
		if x == r {
			f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			return
		}
	}
}

// Hits returns how many packets the rule has hit.
func (r *Fault) Hits() int {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.hits
}

// Rule returns the rule.
func (r *Fault) Rule() netem.Rule { return r.rule }
