package netem

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softnic/softnic/wire"
)

// Faults describes packet faults to inject on a link, each a probability
// in [0, 1], drawn from a seeded generator so that a run can be repeated.
// softnic's NIC applies them to the packets it sends (option or the
// SOFTNIC_FAULTS environment variable); qp's tests apply them to a
// simulated link.
type Faults struct {
	Drop      float64 // lose the packet
	Duplicate float64 // deliver it twice
	Reorder   float64 // hold it back so that later packets overtake it
	Delay     float64 // deliver it late by DelayTime
	Corrupt   float64 // flip one bit (the receiver's ICRC check drops it)
	// DelayTime is the extra latency of a delayed packet (default 1 ms);
	// a reordered packet is held for ReorderTime (default 100 µs).
	DelayTime, ReorderTime time.Duration
	Seed                   uint64
	// OpCodes restricts the faults to packets with these opcodes; empty
	// means every packet.
	OpCodes []wire.OpCode
	// Rules are targeted faults, tried before the probabilities: each
	// hits the packets it matches, so that a test or a demo loses, copies
	// or holds back exactly the packet it means to, such as the WRITE
	// packet of one PSN (and not its retransmission).
	Rules []Rule
}

// Rule is a targeted fault: Action on the first Count packets that match
// it. A packet matches if its BTH has one of OpCodes (any if empty), the
// destination QP (any if 0) and, if MatchPSN, the PSN.
type Rule struct {
	Action   Action
	OpCodes  []wire.OpCode
	QP       uint32
	PSN      wire.PSN
	MatchPSN bool
	// Count is how many matching packets the rule hits (0 means 1): the
	// ones after them, a retransmission of the same PSN included, pass.
	Count int
	// Hold is how long ActionDelay holds the packet back (default 1 ms).
	Hold time.Duration
}

// Action is what a Rule does to a packet.
type Action uint8

// The actions of a Rule.
const (
	ActionDrop      Action = iota + 1 // lose it
	ActionDuplicate                   // deliver it twice
	ActionDelay                       // deliver it Rule.Hold late, after the packets sent meanwhile
	ActionCorrupt                     // flip one bit of its ICRC, so that the receiver drops it
)

var actionNames = [...]string{ActionDrop: "drop", ActionDuplicate: "dup", ActionDelay: "delay", ActionCorrupt: "corrupt"}

// String returns the action's name in a fault specification.
func (a Action) String() string {
	if int(a) < len(actionNames) && actionNames[a] != "" {
		return actionNames[a]
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}

// matches reports whether the rule applies to the packet whose BTH is b.
func (r *Rule) matches(b wire.BTH) bool {
	return (len(r.OpCodes) == 0 || slices.Contains(r.OpCodes, b.OpCode())) &&
		(r.QP == 0 || r.QP == b.DestQP()) && (!r.MatchPSN || r.PSN == b.PSN())
}

// Enabled reports whether any fault has a non-zero probability or a rule.
func (f *Faults) Enabled() bool {
	return f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Delay > 0 || f.Corrupt > 0 || len(f.Rules) > 0
}

// ParseFaults reads a fault specification such as
// "drop=0.1,dup=0.05,reorder=0.05,corrupt=0.01,delay=0.02:5ms,seed=7,ops=0x0a+0x11":
// keys drop, dup, reorder[:hold], delay[:time], corrupt, seed and ops (opcodes
// in hex or decimal, joined by '+'). An empty spec means no faults.
//
// A targeted rule (Rule) is an action, '@' and what it matches, joined by
// '+': psn=N, qp=N, op=N (repeatable), count=N; delay takes its hold as
// delay:TIME. "drop@op=0x07+psn=0x7ad930" loses the WRITE Middle of that PSN
// once, "dup@op=0x14+count=2" copies the first two FETCH_ADDs,
// "delay:20ms@psn=0x10" holds PSN 0x10 back 20 ms.
func ParseFaults(spec string) (Faults, error) {
	var f Faults
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		if action, match, ok := strings.Cut(kv, "@"); ok {
			r, err := parseRule(action, match)
			if err != nil {
				return Faults{}, fmt.Errorf("fault rule %q: %v: %w", kv, err, ErrInvalid)
			}
			f.Rules = append(f.Rules, r)
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Faults{}, fmt.Errorf("fault %q: want key=value: %w", kv, ErrInvalid)
		}
		v, extra, hasExtra := strings.Cut(v, ":")
		var err error
		switch k {
		case "drop":
			f.Drop, err = parseProb(v)
		case "dup", "duplicate":
			f.Duplicate, err = parseProb(v)
		case "reorder":
			f.Reorder, err = parseProb(v)
			if err == nil && hasExtra {
				f.ReorderTime, err = time.ParseDuration(extra)
			}
		case "delay":
			f.Delay, err = parseProb(v)
			if err == nil && hasExtra {
				f.DelayTime, err = time.ParseDuration(extra)
			}
		case "corrupt":
			f.Corrupt, err = parseProb(v)
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 0, 64)
		case "ops":
			for _, o := range strings.Split(v, "+") {
				n, perr := strconv.ParseUint(o, 0, 8)
				if perr != nil || !wire.OpCode(n).Valid() {
					return Faults{}, fmt.Errorf("fault opcode %q: %w", o, ErrInvalid)
				}
				f.OpCodes = append(f.OpCodes, wire.OpCode(n))
			}
		default:
			return Faults{}, fmt.Errorf("unknown fault %q (want drop, dup, reorder, delay, corrupt, seed, ops): %w", k, ErrInvalid)
		}
		if err != nil {
			return Faults{}, fmt.Errorf("fault %q: %v: %w", kv, err, ErrInvalid)
		}
		if hasExtra && k != "reorder" && k != "delay" {
			return Faults{}, fmt.Errorf("fault %q takes no ':' part: %w", kv, ErrInvalid)
		}
	}
	return f, nil
}

// parseRule reads a rule's action ("drop", "dup", "delay[:TIME]",
// "corrupt") and its conditions.
func parseRule(action, match string) (Rule, error) {
	var r Rule
	name, hold, hasHold := strings.Cut(action, ":")
	for a, n := range actionNames {
		if n != "" && n == name {
			r.Action = Action(a)
		}
	}
	switch {
	case r.Action == 0:
		return Rule{}, fmt.Errorf("unknown action %q (want drop, dup, delay, corrupt)", name)
	case hasHold && r.Action != ActionDelay:
		return Rule{}, fmt.Errorf("%s takes no ':' part", name)
	case hasHold:
		d, err := time.ParseDuration(hold)
		if err != nil || d <= 0 {
			return Rule{}, fmt.Errorf("hold %q: want a positive duration", hold)
		}
		r.Hold = d
	}
	for _, c := range strings.Split(match, "+") {
		k, v, ok := strings.Cut(c, "=")
		if !ok {
			return Rule{}, fmt.Errorf("condition %q: want key=value", c)
		}
		n, err := strconv.ParseUint(v, 0, 32)
		switch {
		case err != nil:
			return Rule{}, fmt.Errorf("condition %q: not a number", c)
		case k == "psn" && n <= wire.PSNMask:
			r.PSN, r.MatchPSN = wire.PSN(n), true
		case k == "qp" && n <= wire.PSNMask:
			r.QP = uint32(n)
		case k == "op" && wire.OpCode(n).Valid() && n <= 0xff:
			r.OpCodes = append(r.OpCodes, wire.OpCode(n))
		case k == "count" && n > 0:
			r.Count = int(n)
		default:
			return Rule{}, fmt.Errorf("condition %q: want psn, qp (24 bits), op (a valid opcode) or count (> 0)", c)
		}
	}
	return r, nil
}

func parseProb(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p > 1 {
		return 0, fmt.Errorf("probability %q not in [0,1]", s)
	}
	return p, nil
}

// Fate is what an Injector decided for one packet.
type Fate struct {
	Drop      bool
	Duplicate bool
	// Delay holds the packet back this long (reorder or delay).
	Delay time.Duration
	// CorruptBit is the bit to flip, or -1.
	CorruptBit int
}

// Injector draws a Fate for each packet from Faults. It is deterministic
// for a seed and not safe for concurrent use.
type Injector struct {
	f    Faults
	rng  *rand.Rand
	left []int // the packets each rule may still hit
}

// NewInjector returns an injector for f.
func NewInjector(f Faults) *Injector {
	if f.DelayTime == 0 {
		f.DelayTime = time.Millisecond
	}
	if f.ReorderTime == 0 {
		f.ReorderTime = 100 * time.Microsecond
	}
	in := &Injector{f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15)), left: make([]int, len(f.Rules))}
	for i, r := range f.Rules {
		in.left[i] = max(r.Count, 1)
	}
	return in
}

// Decide returns the fate of pkt (an encoded packet, BTH first): that of
// the first rule that matches it and has packets left to hit, else one
// drawn from the probabilities.
func (in *Injector) Decide(pkt []byte) Fate {
	fate := Fate{CorruptBit: -1}
	if len(pkt) >= wire.BTHSize {
		for i := range in.f.Rules {
			if r := &in.f.Rules[i]; in.left[i] > 0 && r.matches(wire.BTH(pkt[:wire.BTHSize])) {
				in.left[i]--
				return r.fate(len(pkt))
			}
		}
	}
	if len(pkt) == 0 || !in.applies(wire.OpCode(pkt[0])) {
		return fate
	}
	r := in.rng
	switch {
	case r.Float64() < in.f.Drop:
		fate.Drop = true
		return fate
	case r.Float64() < in.f.Corrupt:
		fate.CorruptBit = r.IntN(len(pkt) * 8)
	}
	fate.Duplicate = r.Float64() < in.f.Duplicate
	if r.Float64() < in.f.Reorder {
		fate.Delay = in.f.ReorderTime
	}
	if r.Float64() < in.f.Delay {
		fate.Delay += in.f.DelayTime
	}
	return fate
}

// fate is what the rule does to a packet of n bytes.
func (r *Rule) fate(n int) Fate {
	fate := Fate{CorruptBit: -1}
	switch r.Action {
	case ActionDrop:
		fate.Drop = true
	case ActionDuplicate:
		fate.Duplicate = true
	case ActionDelay:
		fate.Delay = cmp.Or(r.Hold, time.Millisecond)
	case ActionCorrupt:
		fate.CorruptBit = (n-1)*8 + 1 // a bit of the ICRC's last byte
	}
	return fate
}

func (in *Injector) applies(op wire.OpCode) bool {
	if len(in.f.OpCodes) == 0 {
		return true
	}
	for _, o := range in.f.OpCodes {
		if o == op {
			return true
		}
	}
	return false
}
