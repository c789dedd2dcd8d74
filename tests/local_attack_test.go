//go:build linux

package tests

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/mr"
	"github.com/softnic/softnic/nic"
	"github.com/softnic/softnic/nic/shm"
	"github.com/softnic/softnic/verbs"
	"github.com/softnic/softnic/wire"
)

// The local attacks of one process on the daemon's resources, each a step
// an attacker process repeats (TestAttacker) against a daemon whose
// limits for one process are scaled down (localLimits), so that every
// step reaches its limit, is refused there, and lets go again within a
// few tens of milliseconds, a fraction of a round of the bystander's (a
// step that outlasted the attack would be measured as quiet).
const (
	localSessions = 16
	localQPs      = 16
	localMappings = 64
	localWaits    = 64
	// floodConns is how many connections a control flood's step opens
	// before it closes them all: more than the daemon answers at once
	// (control.Pending).
	floodConns = 300
)

// localLimits are the flags of the daemon the local attacks are made on.
var localLimits = []string{
	"--limit", fmt.Sprintf("process.sessions=%d", localSessions),
	"--limit", fmt.Sprintf("process.qps=%d", localQPs),
	"--limit", fmt.Sprintf("process.mappings=%d", localMappings),
	"--limit", fmt.Sprintf("process.waits=%d", localWaits),
}

// errNotRefused says a step made more than its limit allows.
var errNotRefused = errors.New("not refused past the limit")

// refusal returns nil if err is the daemon's refusal at a limit of the
// process, which the attacks expect, and err (or errNotRefused for nil)
// otherwise.
func refusal(err error) error {
	switch {
	case err == nil:
		return errNotRefused
	case strings.Contains(err.Error(), "softnic serve --limit process."):
		return nil
	}
	return err
}

// sessionsFlood attaches sessions until refused, then detaches them all.
func sessionsFlood(control string) (func() error, error) {
	return func() error {
		var ss []*rawSession
		defer func() {
			for _, s := range ss {
				s.Close()
			}
		}()
		for range localSessions + 1 {
			s, err := rawAttach(control)
			if err != nil {
				return refusal(err)
			}
			ss = append(ss, s)
		}
		return errNotRefused
	}, nil
}

// attachLoop attaches and detaches, as fast as the daemon lets it: paced
// (attachd.AttachPace), it waits its turn, where it would cost the daemon
// a session's setup and teardown at each step.
func attachLoop(control string) (func() error, error) {
	return func() error {
		s, err := rawAttach(control)
		if err != nil {
			return err
		}
		s.Close()
		return nil
	}, nil
}

// qpsFlood attaches, creates QPs until refused, and detaches.
func qpsFlood(control string) (func() error, error) {
	return func() error {
		s, err := rawAttach(control)
		if err != nil {
			return err
		}
		defer s.Close()
		return refusal(s.qps(localQPs + 1))
	}, nil
}

// mappingsFlood attaches and, at each step, allocates regions of a page
// (each the same sealed memfd, mapped by the daemon for each on its own)
// until refused, then deregisters them.
func mappingsFlood(control string) (func() error, error) {
	page := os.Getpagesize()
	mem, err := shm.Create("softnic-attack", page)
	if err != nil {
		return nil, err
	}
	s, err := rawAttach(control)
	if err != nil {
		return nil, err
	}
	var pd struct{ H uint32 }
	if _, err := s.call("alloc_pd", nil, &pd); err != nil {
		return nil, err
	}
	return func() error {
		var regions []uint32
		err := errNotRefused
		for range localMappings + 1 {
			if err = s.send("alloc_mr", map[string]any{"PD": pd.H, "Size": page, "Access": mr.LocalWrite}, []int{mem.FD()}); err != nil {
				return err
			}
			var r struct{ H uint32 }
			var fds []int
			if fds, err = s.read(s.next, &r); err != nil {
				break
			}
			shm.CloseFDs(fds)
			regions = append(regions, r.H)
		}
		for _, h := range regions {
			if _, err := s.call("dereg_mr", map[string]uint32{"H": h}, nil); err != nil {
				return err
			}
		}
		return refusal(err)
	}, nil
}

// waitsFlood attaches, listens (on a port of its own: the daemon may not
// yet have closed the last step's listener), makes one accept_request
// more than the limit wait at once, reads the refusal of the last, and
// detaches (which ends the others).
func waitsFlood(control string) (func() error, error) {
	base, step := 1024+os.Getpid()%512*64, 0
	return func() error {
		step++
		port := uint16(base + step%64)
		s, err := rawAttach(control)
		if err != nil {
			return err
		}
		defer s.Close()
		pd, cq, err := s.pdAndCQ()
		if err != nil {
			return err
		}
		var l struct{ H uint32 }
		if _, err := s.call("listen", map[string]any{"Port": port, "PD": pd, "QP": map[string]any{"SendCQ": cq}}, &l); err != nil {
			return err
		}
		for range localWaits + 1 {
			if err := s.send("accept_request", map[string]uint32{"H": l.H}, nil); err != nil {
				return err
			}
		}
		_, err = s.read(s.next, nil)
		return refusal(err)
	}, nil
}

// controlFlood opens floodConns connections to the control socket, which
// send nothing, and closes them all. It connects with blocking system calls
// of its own, as cheap to the attacker as connecting gets.
func controlFlood(control string) (func() error, error) {
	addr := &unix.SockaddrUnix{Name: control}
	fds := make([]int, 0, floodConns)
	return func() error {
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = fds[:0]
		}()
		for range floodConns {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if err := unix.Connect(fd, addr); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// hijackWrites is how many WRITEs a hijack's step posts at its victim.
const hijackWrites = 16

// hijack points a QP of its own at the QP of another process that
// SOFTNIC_TEST_ATTACK_VICTIM names (the bystander's, whose number a
// program of the same user reads from softnic qp --json), at each step
// from RESET again with the next guess of the PSN the victim expects, and
// posts hijackWrites WRITEs at it. The victim is connected elsewhere, so
// the daemon drops every one of them (wrong_source), and the attacker's
// QP waits for ACKs that never come until the next step resets it.
func hijack(control string) (func() error, error) {
	victim, err := strconv.ParseUint(os.Getenv(envAttackVictim), 0, 32)
	if err != nil {
		return nil, fmt.Errorf("the victim's QP number: %w", err)
	}
	dev, err := nic.Open(nic.Config{Attach: control})
	if err != nil {
		return nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	cq, err := dev.CreateCQ(4 * hijackWrites)
	if err != nil {
		return nil, err
	}
	m, err := pd.AllocMR(4096, mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	q, err := pd.CreateQP(nic.QPConfig{SendCQ: cq, MaxSendWR: hijackWrites})
	if err != nil {
		return nil, err
	}
	wcs := make([]verbs.WC, 4*hijackWrites)
	var guess wire.PSN
	return func() error {
		if err := q.Modify(&verbs.Attr{State: verbs.Reset}, verbs.AttrState); err != nil {
			return err
		}
		for { // the completions of the last step's WRITEs, if any
			if n, err := cq.Poll(wcs); n == 0 || err != nil {
				if err != nil {
					return err
				}
				break
			}
		}
		guess = guess.Add(hijackWrites)
		if err := q.Connect(dev.Addr(), uint32(victim), nic.ConnectOptions{RemotePSN: 1, LocalPSN: guess}); err != nil {
			return err
		}
		for range hijackWrites {
			wr := verbs.SendWR{Opcode: verbs.WRWrite, SGL: []verbs.SGE{m.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 0x1234}
			if err := q.PostSend(&wr); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// TestBystanderUnderLocalAttacks: a process repeating one of the local
// attacks (sessions, QPs, mappings or waits to its limit and let go,
// WRITEs from a QP of its own at the bystander's QP, or silent
// connections to the control socket, opened and closed) leaves another
// attached process's 64 KiB WRITEs within 2× of their throughput and p99
// latency without it; the daemon refuses or drops what the attacker asks,
// counting it, and answers afterwards.
func TestBystanderUnderLocalAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds softnic and runs processes")
	}
	d := startServe(t, buildSoftnic(t), localLimits...)
	by := newBystander(t, d.control)
	for _, tt := range []struct{ attack, counter string }{
		{"sessions", "quota_refused_sessions"},
		{"qps", "quota_refused_qps"},
		{"mappings", "quota_refused_mappings"},
		{"waits", "quota_refused_waits"},
		{"hijack", "wrong_source"},
		{"control-flood", "control_refused_busy"},
		{"attach-loop", "attaches_paced"},
	} {
		t.Run(tt.attack, func(t *testing.T) {
			t.Setenv(envAttackVictim, fmt.Sprint(by.QP.Num()))
			var before map[string]uint64
			d.inspect(t, "stat", &before)
			a := startAttacker(t, tt.attack, d.control)
			by.Check(t, 5, 120*time.Millisecond, 2, func(on bool) { a.Attack(t, on) })
			var after map[string]uint64
			d.inspect(t, "stat", &after) // the daemon answers
			n := after[tt.counter] - before[tt.counter]
			t.Logf("%s: %d", tt.counter, n)
			if n == 0 {
				t.Errorf("%s did not grow under the attack", tt.counter)
			}
		})
	}
}

// TestControlFloodLetsClientsIn: while a process floods the control
// socket with silent connections (controlFlood, as fast as it can), the
// daemon's commands and a program attaching still get in: each waits its
// turn in the kernel's queue (nic.DialControl) behind at most the
// backlog, where with a non-blocking connect they would lose every turn
// to the flooder.
func TestControlFloodLetsClientsIn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds softnic and runs processes")
	}
	d := startServe(t, buildSoftnic(t))
	a := startAttacker(t, "control-flood", d.control)
	a.Attack(t, true)
	defer a.Attack(t, false)
	for i := range 5 {
		start := time.Now()
		var info struct{ PID int }
		d.inspect(t, "info", &info)
		took := time.Since(start)
		start = time.Now()
		dev, err := nic.Open(nic.Config{Attach: d.control})
		if err != nil {
			t.Fatalf("attaching during the flood: %v", err)
		}
		dev.Close()
		t.Logf("during the flood, try %d: softnic info answered in %v, an attach in %v", i+1, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	var stat map[string]uint64
	d.inspect(t, "stat", &stat)
	if stat["control_accepts_paced"] == 0 {
		t.Errorf("control_accepts_paced 0: the flood was not paced")
	}
}
