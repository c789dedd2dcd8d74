package qp

import (
	"fmt"
	"math/rand/v2"
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
}

// Enabled reports whether any fault has a non-zero probability.
func (f *Faults) Enabled() bool {
	return f.Drop > 0 || f.Duplicate > 0 || f.Reorder > 0 || f.Delay > 0 || f.Corrupt > 0
}

// ParseFaults reads a fault specification such as
// "drop=0.1,dup=0.05,reorder=0.05,corrupt=0.01,delay=0.02:5ms,seed=7,ops=0x0a+0x11":
// keys drop, dup, reorder[:hold], delay[:time], corrupt, seed and ops (opcodes
// in hex or decimal, joined by '+'). An empty spec means no faults.
func ParseFaults(spec string) (Faults, error) {
	var f Faults
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
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
	f   Faults
	rng *rand.Rand
}

// NewInjector returns an injector for f.
func NewInjector(f Faults) *Injector {
	if f.DelayTime == 0 {
		f.DelayTime = time.Millisecond
	}
	if f.ReorderTime == 0 {
		f.ReorderTime = 100 * time.Microsecond
	}
	return &Injector{f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}
}

// Decide returns the fate of pkt (an encoded packet, BTH first).
func (in *Injector) Decide(pkt []byte) Fate {
	fate := Fate{CorruptBit: -1}
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
