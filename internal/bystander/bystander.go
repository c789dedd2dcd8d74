// Package bystander measures what an attack does to another user of the
// same daemon or device: a bystander, a QP that streams 64 KiB RDMA WRITEs,
// measured while the attack is off and while it is on, in alternating
// rounds (a machine's speed drifts within a minute), and whose throughput
// and p99 latency under the attack must stay within a factor of those
// without (Bystander.Check). The attack tests of tests/ (local programs on
// a daemon) and of cmd/softnic (remote peers of a daemon) share it.
//
// What is compared is what the attack makes the daemon do: an attacker
// that is off should keep as busy as when it is on (a process spinning
// in a loop of its own), since on a machine of two cores anything busy on
// one slows the bystander by itself (a plain busy loop tripled its p99),
// which is the kernel's sharing of the CPUs, not the daemon's.
package bystander

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/nicbench"
	"github.com/softnic/softnic/verbs"
)

// Depth is how many WRITEs a bystander keeps in flight.
const Depth = 8

// Size is the size of each WRITE.
const Size = nicbench.LargeSize

// Bystander streams WRITEs of Size from MR, on QP, to Remote: the WRITE at
// offset off of Span reads MR at off and writes Remote at off.
type Bystander struct {
	QP     *nic.QP
	CQ     *nic.CQ // QP's send CQ, of at least Depth entries
	MR     *nic.MR
	Remote nicbench.Region
	Span   int // bytes of MR and of the remote region the WRITEs cycle over: at least Size
}

// Figures is what the bystander measured: the WRITEs' latencies, from post
// to completion, and the time they took.
type Figures struct {
	RTTs []time.Duration
	Took time.Duration
}

// Gbps is the WRITEs' throughput.
func (f Figures) Gbps() float64 {
	return nicbench.Gbps(len(f.RTTs), Size, f.Took)
}

// P99 is the WRITEs' 99th percentile latency.
func (f Figures) P99() time.Duration {
	return nicbench.Percentiles(append([]time.Duration(nil), f.RTTs...)).P99
}

func (f Figures) String() string {
	return fmt.Sprintf("%d WRITEs of 64 KiB: %.2f Gbit/s, p99 %v", len(f.RTTs), f.Gbps(), f.P99())
}

// Run streams WRITEs for about d and adds what it measured to f.
func (b *Bystander) Run(d time.Duration, f *Figures) error {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	var posted [Depth]time.Time
	var wcs [Depth]verbs.WC
	wr := verbs.SendWR{Opcode: verbs.WRWrite, Flags: verbs.Signaled, SGL: make([]verbs.SGE, 1), RKey: b.Remote.RKey}
	start := time.Now()
	stop := start.Add(d)
	for n, done := 0, 0; ; {
		for n-done < Depth && time.Now().Before(stop) {
			off := n % (b.Span / Size) * Size
			wr.ID, wr.RemoteAddr, wr.SGL[0] = uint64(n), b.Remote.Addr+uint64(off), b.MR.SGE(off, Size)
			posted[n%Depth] = time.Now()
			if err := b.QP.PostSend(&wr); err != nil {
				return fmt.Errorf("bystander: post %d: %w", n, err)
			}
			n++
		}
		if n == done {
			break
		}
		k, err := b.CQ.Wait(ctx, wcs[:])
		if err != nil {
			return fmt.Errorf("bystander: %d of %d WRITEs done: %w", done, n, err)
		}
		now := time.Now()
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.Success {
				return fmt.Errorf("bystander: completion %v", wc.String())
			}
			f.RTTs = append(f.RTTs, now.Sub(posted[wc.ID%Depth]))
		}
		done += k
	}
	f.Took += time.Since(start)
	return nil
}

// Round is one round of UnderAttack.
type Round struct{ Quiet, Attacked Figures }

// UnderAttack measures the bystander for rounds rounds of per without the
// attack, then per with it: attack(true) starts the attack, attack(false)
// stops it. It returns each round's figures.
func (b *Bystander) UnderAttack(t testing.TB, rounds int, per time.Duration, attack func(on bool)) []Round {
	t.Helper()
	if err := b.Run(per/2, &Figures{}); err != nil { // warm up
		t.Fatal(err)
	}
	rs := make([]Round, rounds)
	for i := range rs {
		if err := b.Run(per, &rs[i].Quiet); err != nil {
			t.Fatal(err)
		}
		attack(true)
		err := b.Run(per, &rs[i].Attacked)
		attack(false)
		if err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

// Tries is how many times Check measures at most.
const Tries = 3

// Check measures the bystander under attack (UnderAttack) and fails the
// test unless its throughput under attack is at least the quiet one over
// factor, and its p99 latency at most the quiet one times factor, in the
// median of the rounds' ratios. Other programs on the machine slow a
// round now and then, and now and then most rounds of a try: a try that
// fails is made again, up to Tries times, as an attack that works slows
// every try. (On a machine busy with other work, an attacker gets too
// little CPU to slow anything much: the daemon before its doorbell budget
// tripled the bystander's p99 on an idle machine, and barely moved it
// under a load of 15. Attack tests check what the daemon counts as well.)
// It waits for the machine's other measurements to end (exclusive).
func (b *Bystander) Check(t testing.TB, rounds int, per time.Duration, factor float64, attack func(on bool)) {
	t.Helper()
	exclusive(t)
	var failed []string
	for try := range Tries {
		err := Within(t, b.UnderAttack(t, rounds, per, attack), factor)
		if err == nil {
			return
		}
		failed = append(failed, fmt.Sprintf("try %d: %v", try+1, err))
	}
	t.Errorf("the bystander is slowed by the attack:\n%s", strings.Join(failed, "\n"))
}

// Within logs the bystander's figures, and describes how they exceed
// factor, if they do.
func Within(t testing.TB, rounds []Round, factor float64) error {
	t.Helper()
	var all Round
	var slower, later []float64
	for _, r := range rounds {
		for _, x := range []struct{ from, to *Figures }{{&r.Quiet, &all.Quiet}, {&r.Attacked, &all.Attacked}} {
			x.to.RTTs = append(x.to.RTTs, x.from.RTTs...)
			x.to.Took += x.from.Took
		}
		slower = append(slower, r.Quiet.Gbps()/r.Attacked.Gbps())
		later = append(later, float64(r.Attacked.P99())/float64(r.Quiet.P99()))
	}
	slices.Sort(slower)
	slices.Sort(later)
	t.Logf("bystander without the attack: %v", all.Quiet)
	t.Logf("bystander under the attack:   %v", all.Attacked)
	t.Logf("rounds' throughput ratios %.2f, p99 ratios %.2f", slower, later)
	var errs []string
	if m := slower[len(slower)/2]; m > factor {
		errs = append(errs, fmt.Sprintf("its throughput fell %.2f× (median of %d rounds), more than %g×", m, len(rounds), factor))
	}
	if m := later[len(later)/2]; m > factor {
		errs = append(errs, fmt.Sprintf("its p99 latency rose %.2f× (median of %d rounds), more than %g×", m, len(rounds), factor))
	}
	if errs != nil {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
